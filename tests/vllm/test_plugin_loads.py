"""What vLLM loads from rdmaq into every process it starts: rdmaq's queue plugin, and the
benchmark's step timing (rdmaq.bench.serve.steptime) only where `rdmaq bench serve` asks for it with
RDMAQ_BENCH_STEPTIME_DIR. Each rdmaq entry point of pyproject.toml's vllm.general_plugins is
imported and called as vllm.plugins.load_general_plugins does, in a fresh process whose vllm
is the stand-in of tests/bench/fakevllm: no vLLM needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rdmaq

if sys.version_info < (3, 11):
    pytest.skip("reads pyproject.toml with tomllib, Python 3.11's", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
FAKE_VLLM = ROOT / "tests" / "bench" / "fakevllm"

# argv[1]: pyproject.toml. Prints the entry points called and the rdmaq.bench modules loaded.
LOAD = """
import importlib, json, sys, tomllib
with open(sys.argv[1], "rb") as f:
    eps = tomllib.load(f)["project"]["entry-points"]["vllm.general_plugins"]
for value in eps.values():  # as vllm.plugins.load_general_plugins: import, then call
    module, _, func = value.partition(":")
    getattr(importlib.import_module(module), func)()
print(json.dumps({"plugins": sorted(eps),
                  "bench": sorted(m for m in sys.modules if m.startswith("rdmaq.bench"))}))
"""


def _load_plugins(**env) -> dict:
    path = os.pathsep.join([str(FAKE_VLLM), str(Path(rdmaq.__file__).resolve().parents[1])])
    base = {k: v for k, v in os.environ.items()
            if k not in ("RDMAQ_BENCH_STEPTIME_DIR", "RDMAQ_DISTRIBUTED_IPC", "VLLM_DISTRIBUTED_IPC")}
    r = subprocess.run([sys.executable, "-c", LOAD, str(ROOT / "pyproject.toml")],
                       capture_output=True, text=True, timeout=120,
                       env=base | {"PYTHONPATH": path} | env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_users_vllm_process_loads_no_benchmark_code():
    loaded = _load_plugins()
    assert loaded["plugins"] == ["rdmaq"]
    assert loaded["bench"] == []


def test_the_benchmarks_servers_get_its_step_timing(tmp_path):
    loaded = _load_plugins(RDMAQ_BENCH_STEPTIME_DIR=str(tmp_path / "steptime"))
    assert "rdmaq.bench.serve.steptime" in loaded["bench"]
