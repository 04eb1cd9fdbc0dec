"""Unpack the payload's pieces on the GPU machine (Python standard library only).

    python3 bench/device/unpack.py [PIECE_DIR ...] [--dest /tmp/rdmaq-gpu] [--require-complete]

Each PIECE_DIR (from bench/device/build_payload.py: <piece>.tar.xz and manifest.json) is checked
against its manifest's sha256 and unpacked into DEST/site; DEST/pieces/<piece>.json records
it. Pieces come in separate calls, so every call says which pieces of the same build are still
missing; a piece of another build is refused (unpack that build's pieces again, or remove
DEST). Once all are there it writes DEST/bin/vllm (this Python running vLLM's CLI) and
DEST/env.sh (PYTHONPATH and PATH for the payload, RDMAQ_BENCH_CACHE for the microbenchmark).

Exit status: 0 (also while pieces are missing, unless --require-complete), 1 on a bad piece,
3 with --require-complete while pieces are missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import payload_spec as spec  # type: ignore[import-not-found]  # noqa: E402

FORMAT = "rdmaq-gpu-payload/1"
DEFAULT_DEST = "/tmp/rdmaq-gpu"


class PieceError(Exception):
    pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_manifest(piece_dir: Path) -> dict:
    try:
        m = json.loads((piece_dir / "manifest.json").read_text())
    except (OSError, ValueError) as e:
        raise PieceError(f"{piece_dir}: no readable manifest.json ({e})") from None
    if m.get("format") != FORMAT:
        raise PieceError(f"{piece_dir}/manifest.json is not a {FORMAT} manifest")
    return m


def installed(dest: Path) -> dict[str, dict]:
    """piece name -> its record, for the pieces unpacked into ``dest``."""
    out = {}
    for p in sorted((dest / "pieces").glob("*.json")):
        try:
            out[p.stem] = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
    return out


def status(dest: Path) -> tuple[str | None, list[str], list[str]]:
    """(build id, pieces there, pieces missing) of what ``dest`` holds."""
    have = installed(dest)
    if not have:
        return None, [], []
    builds = {r["build_id"] for r in have.values()}
    if len(builds) > 1:
        raise PieceError(f"{dest} holds pieces of builds {sorted(builds)}: remove it and unpack again")
    rec = next(iter(have.values()))
    missing = [n for n in rec["all_pieces"] if n not in have]
    return rec["build_id"], sorted(have), missing


def _safe_members(tar: tarfile.TarFile, site: Path):
    root = site.resolve()
    for m in tar.getmembers():
        target = (site / m.name).resolve()
        if not (m.isfile() or m.isdir()) or (target != root and root not in target.parents):
            raise PieceError(f"refusing archive member {m.name!r} (not a plain file under the site)")
        yield m


def unpack_piece(piece_dir: Path, dest: Path) -> str:
    """Check and unpack one piece; -> its name. Re-unpacking an installed piece is a no-op."""
    m = read_manifest(piece_dir)
    names = [n for n, info in m["pieces"].items() if (piece_dir / info["file"]).exists()]
    if len(names) != 1:
        raise PieceError(f"{piece_dir}: expected one piece archive of {sorted(m['pieces'])}, "
                         f"found {names}")
    name = names[0]
    info = m["pieces"][name]
    have = installed(dest)
    other = {r["build_id"] for r in have.values()} - {m["build_id"]}
    if other:
        raise PieceError(f"{piece_dir} is from build {m['build_id']}, {dest} holds build "
                         f"{sorted(other)}: unpack that build's pieces, or remove {dest}")
    if name in have:
        return name
    archive = piece_dir / info["file"]
    digest = _sha256(archive)
    if digest != info["sha256"]:
        raise PieceError(f"{archive}: sha256 {digest} is not the manifest's {info['sha256']} "
                         "(truncated or from another build)")
    site = dest / "site"
    site.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:xz") as tar:
        members = list(_safe_members(tar, site))
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4, 3.12: no links, no odd modes
            tar.extractall(site, members=members, filter="data")
        else:
            tar.extractall(site, members=members)
    (dest / "pieces").mkdir(exist_ok=True)
    record = {"piece": name, "build_id": m["build_id"], "sha256": digest,
              "all_pieces": sorted(m["pieces"]), "python": m["python"], "vllm": m["vllm"],
              "joined": m.get("joined", {})}
    tmp = dest / "pieces" / f".{name}.tmp"
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, dest / "pieces" / f"{name}.json")  # written last: a piece is there or not
    return name


def join_parts(dest: Path) -> list[Path]:
    """The files the build cut into parts, joined (and checked) once every piece is there;
    -> the files joined now (none when done before)."""
    site = dest / "site"
    joined = {}
    for record in installed(dest).values():
        joined.update(record.get("joined", {}))
    done = []
    for path, j in sorted(joined.items()):
        parts = [site / p for p in j["parts"]]
        if not any(p.exists() for p in parts):
            continue  # joined by an earlier call
        tmp = site / f"{path}.joining"
        h = hashlib.sha256()
        with open(tmp, "wb") as out:
            for part in parts:
                data = part.read_bytes()
                h.update(data)
                out.write(data)
        if h.hexdigest() != j["sha256"]:
            tmp.unlink()
            raise PieceError(f"{path} joined from {len(parts)} parts has sha256 {h.hexdigest()}, "
                             f"not the manifest's {j['sha256']}")
        tmp.chmod(j["mode"])
        os.replace(tmp, site / path)
        for part in parts:
            part.unlink()
        done.append(site / path)
    return done


def finish(dest: Path, python: str = sys.executable) -> list[Path]:
    """The files cut into parts joined, bin/vllm and env.sh, for a complete payload."""
    joined = join_parts(dest)
    (dest / "bin").mkdir(exist_ok=True)
    vllm = dest / "bin" / "vllm"
    # The guard matters: vLLM starts its engine and workers with spawn, which runs this
    # file again as __mp_main__ in each child.
    vllm.write_text(f"#!{python}\nimport sys\nfrom vllm.entrypoints.cli.main import main\n\n"
                    "if __name__ == \"__main__\":\n    sys.exit(main())\n")
    vllm.chmod(0o755)
    env = dest / "env.sh"
    env.write_text(f'export PYTHONPATH="{dest}/site${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                   f'export PATH="{dest}/bin:$PATH"\n'
                   f'export RDMAQ_BENCH_CACHE="{dest}/site/{spec.BENCH_CACHE}"\n')
    return [*joined, vllm, env]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/device/unpack.py", description=__doc__.split("\n")[0])
    p.add_argument("pieces", nargs="*", help="piece directories (OUT/<piece> of build_payload.py)")
    p.add_argument("--dest", default=DEFAULT_DEST, help="default %(default)s")
    p.add_argument("--require-complete", action="store_true",
                   help="exit 3 unless every piece of the build is unpacked")
    args = p.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        for d in args.pieces:
            name = unpack_piece(Path(d), dest)
            print(f"unpack: piece {name} from {d}: ok")
        build, have, missing = status(dest)
    except PieceError as e:
        print(f"unpack: {e}", file=sys.stderr)
        return 1
    if build is None:
        print(f"unpack: {dest} holds no piece yet")
        return 3 if args.require_complete else 0
    print(f"unpack: build {build} in {dest}: have {', '.join(have)}; "
          f"missing {', '.join(missing) if missing else 'nothing'}")
    if missing:
        return 3 if args.require_complete else 0
    try:
        for f in finish(dest):
            print(f"unpack: wrote {f}")
    except PieceError as e:
        print(f"unpack: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
