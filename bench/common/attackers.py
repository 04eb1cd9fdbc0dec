"""The CPU attackers of every benchmark: busy-loop hogs and a tokenizer, a tokenizer trained
locally at run time (no downloads).

HF ``tokenizers`` encodes batches on a Rayon thread pool sized to the CPUs the
process may use, which is how an API server's tokenization competes with
TP workers for cores.
"""

from __future__ import annotations

import os
import random

from .children import pin, send_failure


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


def be_idle_class(policy: str) -> None:
    """Attackers as SCHED_IDLE: any normal thread that wakes preempts them."""
    if policy == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def hog_main(cpus, policy="normal") -> None:
    """A CPU attacker: a pure busy loop in the given cpuset until terminated."""
    pin(cpus)
    be_idle_class(policy)
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def tokenizer_main(conn, cpus, policy="normal") -> None:
    """HF tokenizers batch encoding with its Rayon thread pool, as an API server's does."""
    try:
        pin(cpus)
        be_idle_class(policy)  # before the pool starts: its threads inherit the class
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        corpus = make_corpus(4000)
        tok = train_tokenizer(corpus)
        conn.send(("ready", tok.get_vocab_size()))
        batch = corpus[:512]
        while True:
            tok.encode_batch(batch)
    except BaseException:
        send_failure(conn)
