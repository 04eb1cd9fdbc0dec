"""The GPU machine's payload without the network or a GPU: pieces packed reproducibly from a
site directory, each checked against the manifest it travels with and unpacked in any order
and in separate calls, pieces of another build or damaged archives refused, the payload's
vLLM CLI and environment written once all are there (bench/device/build_payload.py, unpack.py)."""

from __future__ import annotations

import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from fake_extension import module_needing_a_missing_lib

from rdmaq.bench.common import queues

DEVICE = Path(__file__).resolve().parents[2] / "bench" / "device"
sys.path.insert(0, str(DEVICE))
import build_payload  # noqa: E402
import payload_spec  # noqa: E402
import unpack  # noqa: E402

FAST = 1  # xz preset: the files matter here, not the ratio
KERNELS = "vllm/_C_stable_libtorch.abi3.so"  # the file the build cuts in two


def _site(root: Path) -> Path:
    site = root / "site"
    (site / "vllm" / "distributed").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("__version__ = '0.26.0'\n")
    (site / "vllm" / "distributed" / "shm_broadcast.py").write_text("X = 1\n")
    kernels = site / KERNELS
    kernels.write_bytes(b"\x7fELF" + bytes(range(256)) * 17)
    kernels.chmod(0o755)
    (site / "pydantic").mkdir()
    (site / "pydantic" / "__init__.py").write_text("VERSION = '2'\n")
    return site


@pytest.fixture
def built(tmp_path):
    site = _site(tmp_path)
    out = tmp_path / "payload"
    m = build_payload.write_pieces(site, out, {"python": "3.12", "vllm": payload_spec.VLLM}, FAST)
    return out, m, tmp_path / "dest"


def test_pieces_split_and_reproduce(built, tmp_path):
    out, m, _ = built
    assert sorted(m["pieces"]) == ["kernels-1", "kernels-2", "site"]
    assert m["pieces"]["kernels-1"]["members"] == 1 and m["pieces"]["site"]["members"] == 3
    assert m["joined"][KERNELS]["parts"] == [f"{KERNELS}.part1", f"{KERNELS}.part2"]
    for name in m["pieces"]:
        assert json.loads((out / name / "manifest.json").read_text()) == m  # each carries all
    again = build_payload.write_pieces(_site(tmp_path / "again"), tmp_path / "p2",
                                       {"python": "3.12", "vllm": payload_spec.VLLM}, FAST)
    assert again["build_id"] == m["build_id"]  # no times, owners or order in the archives
    with tarfile.open(out / "kernels-1" / "kernels-1.tar.xz") as tar:
        (member,) = tar.getmembers()
        assert member.name == f"{KERNELS}.part1" and member.mtime == 0 and member.uid == 0


def test_pieces_unpack_one_call_at_a_time(built, capsys):
    out, m, dest = built
    assert unpack.main([str(out / "kernels-1"), "--dest", str(dest)]) == 0
    assert "have kernels-1; missing kernels-2, site" in capsys.readouterr().out
    assert unpack.main([str(out / "kernels-2"), "--dest", str(dest)]) == 0
    assert unpack.main(["--dest", str(dest), "--require-complete"]) == 3
    assert not (dest / "env.sh").exists() and not (dest / "site" / KERNELS).exists()
    assert unpack.main([str(out / "site"), "--dest", str(dest), "--require-complete"]) == 0
    text = capsys.readouterr().out
    assert "missing nothing" in text and m["build_id"] in text
    assert (dest / "site" / "vllm" / "distributed" / "shm_broadcast.py").read_text() == "X = 1\n"
    # the module cut in two for the trip is whole again, executable, and its parts are gone
    kernels = dest / "site" / KERNELS
    assert kernels.read_bytes() == b"\x7fELF" + bytes(range(256)) * 17
    assert kernels.stat().st_mode & 0o111
    assert not list((dest / "site" / "vllm").glob("*.part*"))
    env = (dest / "env.sh").read_text()
    assert f'PYTHONPATH="{dest}/site' in env and f'PATH="{dest}/bin' in env
    assert f'RDMAQ_BENCH_CACHE="{dest}/site/{payload_spec.BENCH_CACHE}"' in env
    vllm = (dest / "bin" / "vllm").read_text()
    assert vllm.startswith(f"#!{sys.executable}\n") and "vllm.entrypoints.cli.main" in vllm
    # a piece carried again (a retried call) changes nothing
    assert unpack.unpack_piece(out / "site", dest) == "site"
    assert unpack.status(dest) == (m["build_id"], ["kernels-1", "kernels-2", "site"], [])
    assert unpack.main(["--dest", str(dest)]) == 0 and kernels.read_bytes().startswith(b"\x7fELF")


def test_a_damaged_piece_is_refused(built, capsys):
    out, _, dest = built
    archive = out / "site" / "site.tar.xz"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    assert unpack.main([str(out / "site"), "--dest", str(dest)]) == 1
    assert "is not the manifest's" in capsys.readouterr().err
    assert unpack.installed(dest) == {}


def test_a_file_joined_wrong_is_refused(built, capsys):
    """The parts of a file cut for the trip are joined only into what the build cut: a part
    changed after its piece was unpacked leaves no joined file and no env.sh."""
    out, _, dest = built
    assert unpack.main([str(out / "kernels-1"), str(out / "kernels-2"), "--dest", str(dest)]) == 0
    (dest / "site" / f"{KERNELS}.part1").write_bytes(b"not the module")
    assert unpack.main([str(out / "site"), "--dest", str(dest)]) == 1
    assert "joined from 2 parts has sha256" in capsys.readouterr().err
    assert not (dest / "site" / KERNELS).exists() and not (dest / "env.sh").exists()


def test_a_piece_of_another_build_is_refused(built, tmp_path, capsys):
    out, _, dest = built
    other_site = _site(tmp_path / "other")
    (other_site / "pydantic" / "__init__.py").write_text("VERSION = '3'\n")
    other = build_payload.write_pieces(other_site, tmp_path / "other-payload",
                                       {"python": "3.12", "vllm": payload_spec.VLLM}, FAST)
    assert unpack.main([str(out / "kernels-1"), "--dest", str(dest)]) == 0
    assert unpack.main([str(tmp_path / "other-payload" / "site"), "--dest", str(dest)]) == 1
    err = capsys.readouterr().err
    assert f"is from build {other['build_id']}" in err and "remove" in err


def test_an_archive_member_outside_the_site_is_refused(tmp_path, capsys):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = b"evil"
        info = tarfile.TarInfo("../escaped.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    piece = tmp_path / "site"
    piece.mkdir()
    blob = lzma.compress(raw.getvalue())
    (piece / "site.tar.xz").write_bytes(blob)
    import hashlib

    manifest = {"format": unpack.FORMAT, "build_id": "b1", "python": "3.12", "vllm": "v",
                "pieces": {"site": {"file": "site.tar.xz", "bytes": len(blob),
                                    "sha256": hashlib.sha256(blob).hexdigest()}}}
    (piece / "manifest.json").write_text(json.dumps(manifest))
    dest = tmp_path / "dest"
    assert unpack.main([str(piece), "--dest", str(dest)]) == 1
    assert "refusing archive member '../escaped.txt'" in capsys.readouterr().err
    assert not (tmp_path / "escaped.txt").exists()


def test_not_a_piece_directory(tmp_path, capsys):
    assert unpack.main([str(tmp_path), "--dest", str(tmp_path / "d")]) == 1
    assert "no readable manifest.json" in capsys.readouterr().err


def test_the_spec_names_what_it_drops_and_keeps_pieces_under_the_limit():
    assert payload_spec.requirements()[0] == "vllm==0.26.0"
    names = [r.split("==")[0] for r in payload_spec.requirements()]
    assert len(names) == len(set(names))  # one version of each
    assert all("==" in r for r in payload_spec.requirements())
    assert payload_spec.piece_of(f"{KERNELS}.part2") == "kernels-2"
    assert payload_spec.piece_of("vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so") == "site"
    assert "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" not in payload_spec.VLLM_DROP


@pytest.mark.skipif(shutil.which("git") is None, reason="missing dependency: git")
def test_each_piece_fits_one_call_beside_the_repository():
    """A call carries 64 MiB, the repository's files included: the largest piece the build
    allows, the repository and a margin for what the transfer adds must fit."""
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], capture_output=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    tracked = sum((root / f).stat().st_size for f in r.stdout.decode().split("\0")
                  if f and (root / f).is_file())
    assert tracked + payload_spec.PIECE_LIMIT_BYTES + (4 << 20) <= 64 << 20, tracked >> 20


def test_device_script_names_its_steps(tmp_path):
    r = subprocess.run(["bash", str(DEVICE / "device.sh"), "no-such-step"], capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                                       "RDMAQ_GPU_DEST": str(tmp_path / "dest")})
    assert r.returncode == 2
    for step in ("unpack", "setup", "smoke", "sweep", "resume", "ab", "step", "micro", "micro-sweep",
                 "diagnose", "cpuset", "quota", "restore", "status"):
        assert f"device.sh {step}" in r.stdout


def test_the_microbenchmark_runs_from_the_payload_layout(tmp_path):
    """device.sh micro as on the GPU machine, shrunk: one reader, one sub-run, rdmaq alone.  The
    payload's rdmaq is this checkout's (its bench/ files already in DEST/site, so nothing is
    built); the step writes one result per reader count into OUT and prints its digest."""
    dest, out = tmp_path / "dest", tmp_path / "out"
    root = DEVICE.parents[1]
    for f in (root / "bench").rglob("*.py"):  # as if `setup` had built this copy
        copy = dest / "site" / "rdmaq" / "bench" / f.relative_to(root / "bench")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(f.read_bytes())
    (dest / "env.sh").write_text("export RDMAQ_TEST_PAYLOAD=1\n")
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(out), "RDMAQ_GPU_DEST": str(dest),
           "PYTHON": sys.executable, "READERS": "1", "QUEUES": "rdmaq-shm", "ATTACKERS": "0",
           "SIZES": "64", "PACE": "1ms", "DURATION": "0.2", "IDLE": "0.2", "LABEL": "test"}
    r = subprocess.run(["bash", str(DEVICE / "device.sh"), "micro"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + (out / "tp1.err").read_text()[-2000:]
    assert "rdmaq built" not in r.stdout and "micro: TP=1 done" in r.stdout
    result = json.loads((out / "tp1.json").read_text())
    assert result["machine"]["label"] == "test" and {c["queue"] for c in result["cells"]} == {"rdmaq-shm"}
    assert "## tp1.json: test" in r.stdout  # the digest's heading


FAKE_CLI = '''\
import multiprocessing as mp
import os
import sys


def child(path):
    with open(path, "a") as f:
        f.write("child\\n")


def main():
    path = os.environ["RDMAQ_TEST_MARK"]
    with open(path, "a") as f:
        f.write("main " + sys.modules["__main__"].__name__ + "\\n")
    # as vLLM starts its engine and workers: spawn, which runs the launcher again in the child
    p = mp.get_context("spawn").Process(target=child, args=(path,))
    p.start()
    p.join()
    return p.exitcode
'''


def test_the_launcher_runs_the_cli_only_as_main(tmp_path):
    """bin/vllm run as a script runs the CLI once; the spawned child, which runs the same file
    as __mp_main__, must not run it again (unguarded, the child starts a process while it
    bootstraps: RuntimeError, and the GPU machine's servers never came up)."""
    dest = tmp_path / "dest"
    cli = dest / "site" / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    for d in (cli.parents[1], cli.parent, cli):
        (d / "__init__.py").write_text("")
    (cli / "main.py").write_text(FAKE_CLI)
    vllm, _ = unpack.finish(dest)
    mark = tmp_path / "mark"
    r = subprocess.run([str(vllm)], capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(dest / "site"),
                            "RDMAQ_TEST_MARK": str(mark)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert mark.read_text().splitlines() == ["main __main__", "child"]
    assert "bootstrapping phase" not in r.stderr


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="missing dependency: gcc")
@pytest.mark.skipif(queues._patchelf() is None,
                    reason="missing dependency: patchelf (tests/bench/ci.sh installs it)")
def test_the_payload_carries_a_spinloop_module_the_microbenchmark_loads(tmp_path, monkeypatch):
    """vLLM's spinloop module needs torch's libraries it never calls: the payload carries a copy
    without them under BENCH_CACHE, and with env.sh's RDMAQ_BENCH_CACHE the microbenchmark finds
    that copy for the payload's module instead of making one (the GPU machine has no patchelf)."""
    site = _site(tmp_path)
    (tmp_path / "build").mkdir()
    so = module_needing_a_missing_lib(tmp_path / "build")
    (site / "vllm" / "spinloop.abi3.so").write_bytes(so.read_bytes())
    copy = build_payload.add_loadable_spinloop(site)
    assert copy is not None and copy.startswith(payload_spec.BENCH_CACHE + "/spinloop/")
    monkeypatch.setenv("RDMAQ_BENCH_CACHE", str(site / payload_spec.BENCH_CACHE))
    monkeypatch.setattr(queues, "_patchelf", lambda: None)  # as on the GPU machine
    path, why = queues.loadable_spinloop(str(site / "vllm" / "spinloop.abi3.so"))
    assert (path, why) == (str(site / copy), None)


def test_a_payload_without_a_spinloop_module_carries_no_copy(tmp_path):
    site = _site(tmp_path)
    assert build_payload.add_loadable_spinloop(site) is None
    assert not (site / payload_spec.BENCH_CACHE).exists()


def test_preflight_checks_the_server_arguments_the_harness_gives(tmp_path, monkeypatch):
    """preflight.py builds the rdmaq server's `vllm serve` command from the harness itself
    (no vLLM needed for that part): what `rdmaq bench serve --device cuda` runs by default."""
    import preflight

    monkeypatch.setattr(os, "environ", dict(os.environ))  # the function sets the server's env
    argv = preflight.bench_serve_args(str(tmp_path))
    assert argv[0] == str(tmp_path.resolve())
    assert argv[argv.index("--distributed-ipc") + 1] == "rdmaq"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "mp"
    assert "-cc.cudagraph_mode=FULL_DECODE_ONLY" in argv
