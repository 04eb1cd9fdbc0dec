"""What the GPU machine needs beyond its own packages to run rdmaq's benchmarks on vLLM 0.26:
``rdmaq bench serve``, ``rdmaq bench step`` and the microbenchmark (bench/device/device.sh).

The machine has Python 3.12, torch 2.11.0+cu130 (with the nvidia-* CUDA 13 libraries), triton
3.6, transformers 5.17, tokenizers, numpy, psutil, aiohttp, httpx, uvloop, cloudpickle,
prometheus-client, matplotlib and gcc (the list: docs/benchmarks/gpu-setup.md), and no
package registry. vLLM 0.26.0 is the newest vLLM that pins torch 2.11; its compiled modules link
CUDA 13 (libcudart.so.13) and it ships the C spin-loop extension (vllm/spinloop.abi3.so).

Carried: vLLM's Python code, the compiled modules a dense Llama uses on a Hopper GPU, and the
packages missing there that vLLM imports on the path of ``vllm serve`` and ``vllm bench serve``
(bench/device/preflight.py imports that path and lists what is imported only inside functions).
Left out: what only other features import (``LEFT_OUT`` says which and why), and vLLM's large
kernels for other GPUs or other model kinds (``VLLM_DROP``).
"""

from __future__ import annotations

VLLM = "vllm==0.26.0"

# Wheels for packages the GPU machine lacks, pinned; each line: requirement, why it is carried.
WHEELS: list[tuple[str, str]] = [
    ("pydantic==2.14.4", "vllm.config (every process)"),
    ("pydantic-core==2.50.5", "pydantic"),
    ("annotated-types==0.8.0", "pydantic"),
    ("typing-inspection==0.4.5", "pydantic, fastapi"),
    ("typing-extensions==4.16.0", "pydantic needs >= 4.14.1; the machine's version is not known"),
    ("fastapi==0.136.3", "the OpenAI-compatible server (vLLM 0.26 wants >=0.133,<0.137)"),
    ("starlette==1.10.0", "fastapi"),
    ("uvicorn==0.54.0", "the server's HTTP loop"),
    ("httptools==0.9.0", "uvicorn's HTTP parser, as fastapi[standard] installs it"),
    ("python-multipart==0.0.34", "form-data routes (FastAPI checks for it when routes are made)"),
    ("openai==2.54.0", "request/response types (newer 3.x needs httpx2, which the machine lacks)"),
    ("jiter==0.19.0", "openai"),
    ("distro==1.9.0", "openai"),
    ("sniffio==1.3.1", "openai"),
    ("pyzmq==27.3.0", "vLLM's ZMQ sockets (API server, EngineCore, MessageQueue); rdmaq's remote path"),
    ("msgspec==0.23.0", "vllm.v1.engine messages"),
    ("blake3==1.0.11", "prefix-cache block hashes"),
    ("cbor2==6.3.0", "prefix-cache block hashes"),
    ("pybase64==1.5.1", "vllm.benchmarks.datasets, multimodal utils"),
    ("cachetools==8.0.2", "vllm utils"),
    ("setproctitle==1.3.8", "process titles (VLLM::EngineCore, VLLM::Worker_TP0): the harness tells "
                            "processes apart by them"),
    ("partial-json-parser==0.2.1.1.post7", "tool-call parsing module, imported by the chat server"),
    ("prometheus-fastapi-instrumentator==8.1.0", "the server's /metrics"),
    ("openai-harmony==0.0.8", "imported by vllm.config (reasoning parsers' tool server)"),
    ("llguidance==1.7.6", "structured-output backend, evaluated when the scheduler module loads"),
    ("xgrammar==0.2.7", "structured-output backend, evaluated when the scheduler module loads"),
    ("apache-tvm-ffi==0.1.10", "xgrammar (0.1.10 is vLLM 0.26's pin)"),
    ("watchfiles==1.3.0", "vllm.entrypoints.launcher (TLS certificate reloads)"),
    ("model-hosting-container-standards==0.1.16", "the server's SageMaker routes, always attached"),
    ("jmespath==1.1.0", "model-hosting-container-standards"),
    ("cffi==2.1.1", "rdmaq's C core (built there with gcc)"),
    ("pycparser==3.12", "cffi"),
]

# Requirements of vLLM 0.26.0 (unconditional ones) that are neither on the machine nor carried,
# and why the run never imports them: bench/device/preflight.py lists each as imported only inside
# functions of features named here (or, for the vLLM modules that import them, not at all).
LEFT_OUT: dict[str, str] = {
    "flashinfer-python": (
        "FlashInfer kernels: attention (FLASH_ATTN is used), FP4/FP8 GEMMs, MoE, MLA, and its "
        "top-k/top-p sampler, which vLLM imports when it builds the sampler unless "
        "VLLM_USE_FLASHINFER_SAMPLER=0 (the harness sets it on GPUs)"),
    "nvidia-cutlass-dsl, quack-kernels, tilelang, humming-kernels, tokenspeed-mla": (
        "CuTe-DSL/TileLang kernels: FlashAttention 4 (Blackwell), MLA and sparse-attention "
        "models, DeepSeek V4, quantized GEMMs"),
    "nvidia-cudnn-frontend": "cuDNN attention of vision encoders",
    "torchcodec, PyNvVideoCodec": "video inputs of multimodal models",
    "mistral_common": "Mistral tokenizers (vllm.tokenizers.mistral) and their grammars",
    "lm-format-enforcer, outlines_core, lark": (
        "structured-output backends other than xgrammar and guidance, for requests that ask "
        "for structured output"),
    "compressed-tensors": "compressed-tensors quantized checkpoints",
    "depyf": "torch.compile debugging dumps (compilation is off)",
    "jsonschema, ijson, python-json-logger": (
        "tool-call schema checks, streamed JSON parsing, JSON log formatting (not configured)"),
    "anthropic, mcp": ("the Anthropic endpoint's client types and MCP tool servers (vLLM's own "
                       "modules for them load without either)"),
    "opentelemetry-sdk, -api, -exporter-otlp, -semantic-conventions-ai": (
        "request tracing (--otlp-traces-endpoint)"),
    "fastsafetensors, nvtx": "--load-format fastsafetensors; VLLM_NVTX_SCOPES_FOR_PROFILING",
}

# Files of the vLLM wheel not carried (large, and not loaded for a dense Llama on Hopper).
VLLM_DROP: dict[str, str] = {
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": (
        "FlashAttention 2 (305 MB): Hopper uses FlashAttention 3; vllm_flash_attn imports "
        "with either"),
    "vllm/_moe_C_stable_libtorch.abi3.so": "mixture-of-experts kernels (45 MB); optional import",
    "vllm/_flashmla_C.abi3.so": "FlashMLA (MLA models)",
    "vllm/_flashmla_extension_C.abi3.so": "FlashMLA (MLA models)",
    "vllm/_qutlass_C.abi3.so": "QuTLASS (FP4 quantization); optional import",
}
# deep_gemm's extension is built per Python: only the machine's one is kept.
DEEP_GEMM_GLOB = "vllm/third_party/deep_gemm/_C.cpython-*-x86_64-linux-gnu.so"

# Files cut into parts for the trip, one piece each, joined again once every piece is there
# (bench/device/unpack.py): the largest compiled module is 53 MiB as xz, and a call carries
# 64 MiB with the repository's files included.
SPLIT: dict[str, int] = {"vllm/_C_stable_libtorch.abi3.so": 2}


def part_of(path: str, i: int) -> str:
    """The site-relative name of part ``i`` (from 1) of a file in SPLIT."""
    return f"{path}.part{i}"


# The pieces, each one call's carry: a part of the largest compiled module each, everything
# else together.
PIECES: dict[str, list[str]] = {
    **{f"kernels-{i}": [part_of(path, i)] for path, n in SPLIT.items() for i in range(1, n + 1)},
    "site": ["*"],
}
# The rest of a call's 64 MiB is the repository's (tests/bench checks); the largest piece,
# site, is 34.7 MiB.
PIECE_LIMIT_BYTES = 36 << 20

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_34_x86_64", "manylinux_2_35_x86_64"]
# The machine's Python; the build can target another (3.11 here) for a local rehearsal.
PYTHON = "3.12"
# The site-relative folder of the copies the microbenchmark loads instead of vLLM's own (its
# spinloop module without the torch libraries it never calls: bench/common/queues.py); env.sh
# names it in RDMAQ_BENCH_CACHE.
BENCH_CACHE = "rdmaq-bench-cache"
# Where the machine's unpacked payload lives (outside the repository copy: it survives between
# calls while the machine is held).
DEST = "/tmp/rdmaq-gpu"


def piece_of(path: str) -> str:
    """The piece a site-relative path belongs to."""
    for name, members in PIECES.items():
        if path in members:
            return name
    return "site"


def requirements() -> list[str]:
    return [VLLM] + [req for req, _ in WHEELS]
