"""The C core under AddressSanitizer+UBSan and ThreadSanitizer (race check)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def _core_sources():
    # The build module owns the source list.
    import importlib.util

    spec = importlib.util.spec_from_file_location("_rdmaq_build", os.path.join(ROOT, "rdmaq", "_build.py"))
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return [os.path.join(ROOT, "csrc", f) for f in build.CORE_SOURCES + build.SHM_SOURCES]


SOURCES = _core_sources()
TEST = os.path.join(ROOT, "tests", "c", "test_ring.c")
SANITIZERS = {
    "asan-ubsan": ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
    "tsan": ["-fsanitize=thread"],
}


# Sanitizer builds and runs are slow (TSan ~15 s at load 4 on 2 cores); each
# step has its own limit so a hang in the C code fails, naming the step.
COMPILE_TIMEOUT_S = 240
RUN_TIMEOUT_S = 180


@pytest.mark.timeout(2 * (COMPILE_TIMEOUT_S + RUN_TIMEOUT_S))
@pytest.mark.parametrize("kind", sorted(SANITIZERS))
def test_c_core_under_sanitizer(kind, tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler: install gcc (the CI script does)")
    exe = tmp_path / f"test_ring_{kind}"
    subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
                    "-I", os.path.join(ROOT, "csrc", "include"), "-I", os.path.join(ROOT, "csrc"), *SANITIZERS[kind], TEST, *SOURCES,
                    "-lpthread", "-o", str(exe)], check=True, timeout=COMPILE_TIMEOUT_S)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
               TSAN_OPTIONS="halt_on_error=1")
    # TSan needs a fixed address-space layout on some kernels.
    cmd = ["setarch", "-R", str(exe)] if kind == "tsan" and shutil.which("setarch") else [str(exe)]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{exe.name} still running after {RUN_TIMEOUT_S} s (a lost wake-up?):\n"
                    f"{(e.stdout or b'').decode(errors='replace')[-3000:]}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS" in p.stdout
