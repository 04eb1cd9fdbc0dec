"""A random-weight Llama written to a directory: rdmaq's bench/serve/tiny_llama.py, run from this
source tree (no install needed). Usage: python tests/vllm/make_tiny_llama.py OUT_DIR [--shape
tiny|llama-3.2-1b] [--dtype D] [--device D]; see bench/serve/tiny_llama.py."""

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "bench" / "serve" / "tiny_llama.py"),
                   run_name="__main__")
