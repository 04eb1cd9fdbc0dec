"""Write a random-weight Llama (config, safetensors, tokenizer) to a directory.

Nothing is downloaded: the weights come from a fixed seed and the tokenizer is a
word-level vocabulary built here. Greedy outputs are deterministic for a given
directory, which is all the serve end-to-end test needs (it compares two
transports against each other, not against reference text).

Shapes:
  tiny          2 layers, hidden 256, float32 (the CPU tests' model)
  llama-3.2-1b  Llama 3.2 1B's shapes (16 layers, hidden 2048, 32 query / 8 KV heads
                of 64, MLP 8192, vocabulary 128256, tied embeddings): a step does a
                1B model's GPU work. No RoPE scaling (it changes no kernel's cost).
                Weights are drawn directly into the safetensors file (N(0, 0.02),
                norms 1), on --device, in --dtype (default bfloat16).

The tokenizer's vocabulary covers the model's whole vocabulary (the words below,
then "w<id>" fillers), so any token a random model samples decodes to a word, and
a decoded prompt encodes back to the same number of tokens.

Usage: python -m rdmaq.bench.serve.tiny_llama OUT_DIR [--shape tiny|llama-3.2-1b] [--dtype D] [--device D]
(in a source checkout also python tests/vllm/make_tiny_llama.py ..., which runs this file).
It ships with rdmaq because ``rdmaq bench serve`` makes its model with it; it needs torch,
transformers, safetensors and tokenizers (vLLM's dependencies).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

WORDS = (
    "the a an of to in and or is was be it that this on for with as by at from "
    "cat dog bird fish tree house car road river hill city town sun moon star sky "
    "red green blue black white big small old new fast slow hot cold good bad "
    "one two three four five six seven eight nine ten "
    "run walk eat sleep read write sing jump swim fly see hear go come make take"
).split()
SPECIALS = ["<unk>", "<s>", "</s>"]

# name -> LlamaConfig arguments (bos 1, eos 2: the tokenizer's <s> and </s>)
SHAPES: dict[str, dict[str, Any]] = {
    # head_dim 64: vLLM's CPU attention backend rejects smaller head sizes.
    "tiny": dict(vocab_size=128,  # >= the word list; a multiple of 2 so TP=2 can split it
                 hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 tie_word_embeddings=False),
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True),
}
DEFAULT_DTYPE = {"tiny": "float32", "llama-3.2-1b": "bfloat16"}


def vocabulary(size: int) -> dict[str, int]:
    """Specials, the words, then fillers up to ``size`` entries (at least the words)."""
    names = SPECIALS + WORDS
    names += [f"w{i}" for i in range(len(names), size)]
    return {tok: i for i, tok in enumerate(names)}


def _tokenizer(out: Path, size: int) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = vocabulary(size)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out)
    return len(vocab)


def _random_state_dict(model: Any, dtype: Any, device: str, seed: int) -> dict[str, Any]:
    """Every tensor of ``model`` (built on the meta device) drawn at once on ``device``."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue  # tied: the embedding is the head
        if name.endswith("norm.weight"):
            t = torch.ones(p.shape, dtype=dtype, device=device)
        else:
            t = torch.empty(p.shape, dtype=dtype, device=device).normal_(0.0, 0.02, generator=gen)
        out[name] = t.cpu().contiguous()
    return out


def make(out: Path, shape: str = "tiny", dtype: str | None = None, device: str = "cpu") -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    spec = SHAPES[shape]
    dtype = dtype or DEFAULT_DTYPE[shape]
    n_vocab = _tokenizer(out, spec["vocab_size"] if shape != "tiny" else 0)
    config = LlamaConfig(**spec, bos_token_id=1, eos_token_id=2, torch_dtype=dtype)
    assert n_vocab <= config.vocab_size
    if shape == "tiny":
        torch.manual_seed(1234)
        model = LlamaForCausalLM(config)
        model.save_pretrained(out, safe_serialization=True)
    else:
        from safetensors.torch import save_file

        with torch.device("meta"):
            model = LlamaForCausalLM(config)
        tensors = _random_state_dict(model, getattr(torch, dtype), device, seed=1234)
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(out)
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False})
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tiny_llama", description=(__doc__ or "").split("\n")[0])
    p.add_argument("out", help="output directory")
    p.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None,
                   help="weights' dtype (default: float32 for tiny, bfloat16 otherwise)")
    p.add_argument("--device", default="cpu",
                   help="where the random weights are drawn (cuda is faster for 1B)")
    args = p.parse_args(argv)
    make(Path(args.out), args.shape, args.dtype, args.device)
    print(f"{args.shape} llama written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
