"""A tokenizer trained locally at run time (no downloads) for the tokenizer attacker.

HF ``tokenizers`` encodes batches on a Rayon thread pool sized to the CPUs the
process may use, which is how an API server's tokenization competes with
TP workers for cores.
"""

from __future__ import annotations

import random


def make_corpus(n_sentences: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    weights = [12, 9, 8, 7.5, 7, 6.7, 6.3, 6, 5.9, 4.3, 4, 2.8, 2.8, 2.4, 2.4, 2.2, 2,
               2, 1.9, 1.5, 1, 0.8, 0.2, 0.2, 0.1, 0.1]
    vocab = ["".join(rng.choices(letters, weights, k=rng.randint(2, 10))) for _ in range(3000)]
    return [" ".join(rng.choices(vocab, k=rng.randint(20, 120))) for _ in range(n_sentences)]


def train_tokenizer(corpus: list[str], vocab_size: int = 8000):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"],
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok
