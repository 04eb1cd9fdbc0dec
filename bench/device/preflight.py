"""Check, before any server starts, that ``vllm serve`` and ``vllm bench serve`` can run here.

Imports every module on the path ``rdmaq bench serve`` takes on a GPU (the CLI, the OpenAI
server and its routers, the EngineCore, the multiprocessing executor, the GPU worker and model
runner, the Llama model, the attention backends, the sampler, the tokenizer and detokenizer,
the benchmark client, the plugins), builds the ``vllm serve`` argument parser and, given a
model, the engine configuration the harness's server arguments produce. Then lists the imports
made inside functions of every loaded vLLM module whose package is not installed: each must be
a feature the run does not use (docs/benchmarks/gpu-setup.md says why each one is).

On the GPU machine it also checks what the run relies on: CUDA is vLLM's platform, FlashAttention
3 and the spin-loop extension load, and the rdmaq plugins are visible as vLLM plugins.

``--fake-cuda`` (a machine without a GPU, with torch's CUDA build and a stand-in libcuda.so.1 on
LD_LIBRARY_PATH: bench/device/check_payload.sh) makes vLLM take its CUDA platform, reporting an
H200's compute capability, so the same imports and configuration run without a GPU.

Exit status: 0 when everything needed is there, 1 otherwise. ``--json FILE`` writes the findings.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

# What `vllm serve ... --distributed-executor-backend mp` and `vllm bench serve` import on a
# CUDA GPU for a dense Llama (beyond what these import themselves).
MODULES = [
    "vllm.entrypoints.cli.main",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.cli.benchmark.main",
    "vllm.entrypoints.cli.benchmark.serve",
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.engine.core_client",
    "vllm.v1.engine.detokenizer",
    "vllm.v1.engine.output_processor",
    "vllm.v1.engine.input_processor",
    "vllm.v1.executor.multiproc_executor",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.v1.worker.gpu.model_runner",  # Model Runner V2: vLLM 0.26's default for a dense Llama
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.sample.sampler",
    "vllm.v1.attention.backends.flash_attn",
    "vllm.v1.attention.backends.triton_attn",
    "vllm.model_executor.models.llama",
    "vllm.model_executor.model_loader",
    "vllm.model_executor.model_loader.default_loader",
    "vllm.distributed.device_communicators.shm_broadcast",
    "vllm.tokenizers",
    "vllm.benchmarks.serve",
    "vllm.benchmarks.datasets",
    "vllm.plugins",
    "rdmaq.vllm.plugin",
    "rdmaq.vllm.queue",
    "rdmaq.bench.serve.steptime",
]
# one entry point: it also switches the benchmark's step timing on (rdmaq/vllm/plugin.py)
PLUGINS = {"rdmaq": "rdmaq.vllm.plugin:register"}


def fake_cuda() -> None:
    """vLLM's CUDA platform, answering as an H200 would, on a machine without a GPU."""
    from vllm.platforms.cuda import CudaPlatform
    from vllm.platforms.interface import DeviceCapability

    from vllm import platforms

    class FakeH200(CudaPlatform):  # type: ignore[misc]
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(9, 0)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return "NVIDIA H200"

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return 143771 << 20

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            return 1

    platforms.current_platform = FakeH200()


def try_import(name: str) -> str | None:
    try:
        importlib.import_module(name)
        return None
    except BaseException:  # noqa: BLE001 (a module may raise anything at import)
        return traceback.format_exc(limit=-6)


def _lazy_imports(path: str) -> list[tuple[str, int, str]]:
    """(function, line, imported module) of the imports inside functions of one file."""
    try:
        tree = ast.parse(Path(path).read_text(), path)
    except (OSError, SyntaxError, ValueError):
        return []
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                out += [(fn.name, node.lineno, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.append((fn.name, node.lineno, node.module))
    return out


# vLLM modules imported inside functions on the serving path are imported too (and theirs, in
# turn): the server's routers and request handlers, the engine, the worker, the model loader.
FOLLOW = ("vllm.entrypoints.openai", "vllm.entrypoints.generate", "vllm.entrypoints.anthropic",
          "vllm.entrypoints.serve", "vllm.entrypoints.scale_out", "vllm.entrypoints.mcp",
          "vllm.entrypoints.chat_utils", "vllm.entrypoints.cli", "vllm.renderers", "vllm.tokenizers",
          "vllm.v1.engine", "vllm.v1.executor", "vllm.v1.worker", "vllm.v1.core",
          "vllm.v1.sample", "vllm.v1.structured_output", "vllm.v1.attention.backends.flash_attn",
          "vllm.v1.attention.backends.triton_attn", "vllm.model_executor.model_loader",
          "vllm.model_executor.models.llama", "vllm.benchmarks", "vllm.compilation")


def follow_lazy_vllm_imports() -> dict[str, str]:
    """Import the vLLM modules under FOLLOW that loaded modules import inside functions, until
    none is left; -> module that failed -> its error's last line."""
    failed: dict[str, str] = {}
    while True:
        todo = set()
        for name, mod in list(sys.modules.items()):
            path = getattr(mod, "__file__", None)
            if not name.startswith("vllm") or not path:
                continue
            for _, _, target in _lazy_imports(path):
                if (target.startswith(FOLLOW) and target not in sys.modules
                        and target not in failed):
                    todo.add(target)
        if not todo:
            return failed
        for target in sorted(todo):
            err = try_import(target)
            if err:
                failed[target] = err.strip().splitlines()[-1]


def missing_lazy_imports() -> dict[str, list[str]]:
    """Top-level package -> where a loaded vLLM module imports it inside a function, for
    packages that are not installed here."""
    missing: dict[str, list[str]] = {}
    found: dict[str, bool] = {}
    for name, mod in sorted(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if not name.startswith("vllm") or not path:
            continue
        for fn, line, target in _lazy_imports(path):
            top = target.split(".")[0]
            if top not in found:
                try:
                    found[top] = importlib.util.find_spec(top) is not None
                except (ImportError, ValueError):
                    found[top] = False
            if not found[top]:
                missing.setdefault(top, []).append(f"{name}:{line} ({fn})")
    return missing


def serve_parser() -> Any:
    """The `vllm` CLI's parser, built the way vllm.entrypoints.cli.main builds it."""
    import vllm.entrypoints.cli.benchmark.main as bench_main
    import vllm.entrypoints.cli.serve as serve_cli
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="subparser")
    for module in (serve_cli, bench_main):
        for cmd in module.cmd_init():
            cmd.subparser_init(sub).set_defaults(dispatch_function=cmd.cmd)
    return parser


def engine_config(serve_args: list[str]) -> dict:
    """Parse ``vllm serve SERVE_ARGS`` and build the engine's configuration from it."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.plugins import load_general_plugins

    from rdmaq.vllm.plugin import choice_from_env

    load_general_plugins()
    args = serve_parser().parse_args(["serve", *serve_args])
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    cfg = AsyncEngineArgs.from_cli_args(args).create_engine_config()
    cc = cfg.compilation_config
    return runtime_objects(cfg) | {"model": cfg.model_config.model, "dtype": str(cfg.model_config.dtype),
            "executor": str(cfg.parallel_config.distributed_executor_backend),
            "tp": cfg.parallel_config.tensor_parallel_size,
            "compilation_mode": str(cc.mode), "cudagraph_mode": str(cc.cudagraph_mode),
            "cudagraph_capture_sizes": cc.cudagraph_capture_sizes,
            "async_scheduling": cfg.scheduler_config.async_scheduling,
            "model_runner": "v2" if cfg.use_v2_model_runner else "v1",
            "kv_cache_memory_bytes": cfg.cache_config.kv_cache_memory_bytes,
            "distributed_ipc": choice_from_env() or "shm"}


def runtime_objects(cfg: Any) -> dict[str, Any]:
    """Build what the worker and the engine build from the configuration without a GPU: the
    sampler (whose top-k/top-p part picks FlashInfer on CUDA unless VLLM_USE_FLASHINFER_SAMPLER=0),
    the attention backend the worker would pick for this model, and the tokenizer."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.tokenizers import get_tokenizer
    from vllm.v1.attention.selector import get_attn_backend
    from vllm.v1.sample.ops.topk_topp_sampler import flashinfer_sampler_supported
    from vllm.v1.sample.sampler import Sampler

    mc = cfg.model_config
    with set_current_vllm_config(cfg):
        sampler = Sampler()
        backend = get_attn_backend(mc.get_head_size(), mc.dtype, cfg.cache_config.cache_dtype)
    tok = get_tokenizer(mc.tokenizer)
    text = "the cat is on the road"
    return {"sampler_topk_topp": getattr(sampler.topk_topp_sampler.forward, "__name__", "?"),
            # both model runners' samplers ask this (V2's too): FlashInfer is not carried
            "flashinfer_sampler": flashinfer_sampler_supported(),
            "attention_backend": backend.get_name(),
            "tokenizer_roundtrip": tok.decode(tok.encode(text, add_special_tokens=False)) == text,
            "torch": torch.__version__}


def bench_serve_args(model: str) -> list[str]:
    """The rdmaq server's `vllm serve` arguments in `rdmaq bench serve --device cuda` with its
    defaults, and its environment (set here)."""
    import tempfile

    # bench/ installed as rdmaq.bench
    from rdmaq.bench.serve import launch as serve_launch  # type: ignore[import-not-found]
    from rdmaq.bench.serve import options as serve_options

    args = serve_options.resolve(serve_options.build_parser().parse_args(["--device", "cuda", "--model", model]))
    cfg = serve_options.config_of(args, "vllm", Path(model).resolve(), ["rdmaq-shm"], ["idle"])
    env = serve_launch.server_env("rdmaq-shm", "cuda", None, Path(tempfile.gettempdir()) / "rdmaq-preflight")
    os.environ.update({k: v for k, v in env.items() if k.startswith(("VLLM_", "RDMAQ_"))})
    return serve_launch.serve_command(cfg, "rdmaq-shm")


def client_args_check(model: str) -> dict[str, Any]:
    """The harness's `vllm bench serve` arguments, parsed by this vLLM's own client parser
    (as its persistent client does)."""
    from rdmaq.bench.serve import client as serve_client
    from rdmaq.bench.serve import measure as serve_measure
    from rdmaq.bench.serve import options as serve_options
    from rdmaq.bench.serve.server import VllmServer  # type: ignore[import-not-found]

    args = serve_options.resolve(serve_options.build_parser().parse_args(["--device", "cuda", "--model", model]))
    cfg = serve_options.config_of(args, "vllm", Path(model).resolve(), ["rdmaq-shm"], ["idle"])
    srv = VllmServer(vllm="vllm", model=Path(model), ipc="rdmaq", workdir=Path("."), env={},
                     max_model_len=cfg["max_model_len"])
    srv.port = 8000
    argv = serve_measure.client_argv(cfg, Path(model), srv, Path("."), "preflight")
    parsed = serve_client._parser().parse_args(argv)
    return {"num_prompts": parsed.num_prompts, "request_rate": parsed.request_rate,
            "max_concurrency": parsed.max_concurrency, "dataset_name": parsed.dataset_name}


def gpu_checks() -> dict[str, Any]:
    """What the GPU run relies on, on the GPU machine."""
    import torch
    from vllm.platforms import current_platform

    out: dict[str, Any] = {"cuda_available": torch.cuda.is_available(),
                           "platform_is_cuda": current_platform.is_cuda()}
    if out["cuda_available"]:
        out["device"] = torch.cuda.get_device_name(0)
        out["capability"] = list(torch.cuda.get_device_capability(0))
        out["gpus"] = torch.cuda.device_count()
    from vllm.vllm_flash_attn.flash_attn_interface import FA3_AVAILABLE

    out["fa3_loaded"] = FA3_AVAILABLE
    try:
        from vllm.spinloop import spinloop  # noqa: F401

        out["spinloop_loaded"] = True
    except ImportError as e:
        out["spinloop_loaded"] = f"no: {e}"
    return out


def plugin_check() -> dict[str, str | None]:
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="vllm.general_plugins")}
    return {name: eps.get(name) for name in PLUGINS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/device/preflight.py", description=__doc__.split("\n")[0])
    p.add_argument("--fake-cuda", action="store_true",
                   help="take vLLM's CUDA platform without a GPU (import and configuration checks only)")
    p.add_argument("--serve-args", default=None,
                   help="a `vllm serve` argument string (model first) whose engine configuration to build")
    p.add_argument("--bench-model", default=None, metavar="DIR",
                   help="build the engine configuration of `rdmaq bench serve --device cuda "
                        "--model DIR`'s rdmaq server (its arguments and environment)")
    p.add_argument("--json", default=None, help="write the findings to this file")
    args = p.parse_args(argv)
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report: dict[str, Any] = {"python": sys.version.split()[0], "fake_cuda": args.fake_cuda}
    ok = True
    if args.fake_cuda:
        # Triton refuses itself without an active GPU driver, unless the visible devices are
        # an empty list (vLLM's check then trusts it): as on the GPU machine, vLLM then uses
        # Triton and picks its V2 model runner
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        fake_cuda()
    failed = {}
    for name in MODULES:
        err = try_import(name)
        if err:
            failed[name] = err
    report["imports"] = {"checked": len(MODULES), "failed": failed}
    for name, err in failed.items():
        ok = False
        print(f"IMPORT FAILED {name}:\n{err}", file=sys.stderr)
    report["plugins"] = plugin_check()
    for name, value in report["plugins"].items():
        if value != PLUGINS[name]:
            ok = False
            print(f"PLUGIN MISSING: vllm.general_plugins has no {name} = {PLUGINS[name]} "
                  f"(found {value!r}): is rdmaq's dist-info on sys.path?", file=sys.stderr)
    if not args.fake_cuda:
        report["gpu"] = g = gpu_checks()
        for key in ("cuda_available", "platform_is_cuda", "fa3_loaded", "spinloop_loaded"):
            if g.get(key) is not True:
                ok = False
                print(f"GPU CHECK FAILED: {key} = {g.get(key)!r}", file=sys.stderr)
    serve_args = None
    if args.serve_args:
        import shlex

        serve_args = shlex.split(args.serve_args)
    elif args.bench_model:
        serve_args = bench_serve_args(args.bench_model)
    if serve_args:
        report["serve_args"] = serve_args
        if args.bench_model:
            try:
                report["client_args"] = client_args_check(args.bench_model)
            except BaseException:  # noqa: BLE001 (argparse exits)
                ok = False
                report["client_args"] = {"error": traceback.format_exc(limit=-4)}
                print(f"CLIENT ARGUMENTS FAILED:\n{report['client_args']['error']}", file=sys.stderr)
        try:
            report["engine_config"] = engine_config(serve_args)
        except BaseException:  # noqa: BLE001
            ok = False
            report["engine_config"] = {"error": traceback.format_exc(limit=-8)}
            print(f"ENGINE CONFIG FAILED:\n{report['engine_config']['error']}", file=sys.stderr)
    report["lazy_vllm_modules_failed"] = follow_lazy_vllm_imports()
    report["missing_lazy_imports"] = missing_lazy_imports()
    report["vllm_modules_loaded"] = sum(1 for m in sys.modules if m.startswith("vllm"))
    report["ok"] = ok
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: v for k, v in report.items() if k not in ("missing_lazy_imports",)},
                     indent=1, default=str))
    print(f"lazy imports of packages not installed: {len(report['missing_lazy_imports'])} "
          f"({', '.join(sorted(report['missing_lazy_imports']))})")
    print("preflight: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
