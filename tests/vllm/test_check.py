"""`rdmaq vllm check` and the plugin against a real CUDA build of vLLM on a machine without a
GPU (the vllm tier's venv-mq): both name the cause and `rdmaq vllm install-cpu`, where vLLM
itself says only "Failed to infer device type"."""
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
from vllm.platforms import current_platform  # noqa: E402

pytestmark = pytest.mark.skipif(bool(current_platform.device_type),
                                reason=f"vLLM found a device here ({current_platform.device_type})")

RDMAQ = Path(sys.executable).parent / "rdmaq"


def test_check_names_a_cuda_build_without_a_gpu():
    p = subprocess.run([str(RDMAQ), "vllm", "check"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, (p.stdout, p.stderr)
    err = p.stderr.strip().splitlines()[-1]
    assert "is a CUDA build of vLLM on a machine without a GPU" in err, p.stderr
    assert "rdmaq vllm install-cpu" in err and "Traceback" not in p.stderr, p.stderr


def test_the_plugin_says_it_in_vllms_log():
    code = "from vllm.plugins import load_general_plugins; load_general_plugins()"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={"VLLM_PLUGINS": "rdmaq", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "rdmaq vLLM plugin: vLLM" in p.stderr and "a CUDA build of vLLM on a machine without a GPU" \
        in p.stderr, p.stderr
