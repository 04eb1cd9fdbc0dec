"""Write a tiny random-weight Llama (config, safetensors, tokenizer) to a directory.

Nothing is downloaded: the weights come from a fixed seed and the tokenizer is a
word-level vocabulary built here. Greedy outputs are deterministic for a given
directory, which is all the serve end-to-end test needs (it compares two
transports against each other, not against reference text).

Usage: python make_tiny_llama.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WORDS = (
    "the a an of to in and or is was be it that this on for with as by at from "
    "cat dog bird fish tree house car road river hill city town sun moon star sky "
    "red green blue black white big small old new fast slow hot cold good bad "
    "one two three four five six seven eight nine ten "
    "run walk eat sleep read write sing jump swim fly see hear go come make take"
).split()


def _tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {tok: i for i, tok in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out)
    return len(vocab)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab_size = _tokenizer(out)
    # head_dim 64: vLLM's CPU attention backend rejects smaller head sizes.
    config = LlamaConfig(
        vocab_size=128,  # >= len(vocab); a multiple of 2 so TP=2 can split it
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    assert vocab_size <= config.vocab_size
    torch.manual_seed(1234)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False})
    )
    print(f"tiny llama written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
