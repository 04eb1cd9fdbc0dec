#!/usr/bin/env python3
"""Structural checks of docker/Dockerfile and docker/compose.yml (no hadolint offline).

    python3 docker/check-dockerfile.py [REPO_ROOT]

Checks what has broken or bloated such images before: the base image comes
from ARG BASE_IMAGE declared before the first FROM; apt-get update and install
share one RUN that uses --no-install-recommends and removes the lists; no
`latest` tags or remote ADD; every COPY source exists in the build context;
the ENTRYPOINT is exec-form and its file is executable; the compose service
passes /dev/infiniband, IPC_LOCK and an unlimited memlock. Exit 1 on findings.
"""

import glob
import os
import re
import shlex
import sys


def logical_lines(text):
    """Dockerfile instructions with continuation lines joined: [(lineno, text)]."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if not buf:
            start = n
        if s.startswith("#"):  # comment inside a continued instruction
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        out.append((start, buf + s))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def check_dockerfile(path, root):
    errs = []
    text = open(path).read()
    lines = logical_lines(text)
    froms = [(n, l) for n, l in lines if l.split()[0].upper() == "FROM"]
    if not froms:
        return [f"{path}: no FROM"]
    first_from = froms[0][0]
    if not any(re.match(r"ARG\s+BASE_IMAGE(=\S+)?$", l) and n < first_from for n, l in lines):
        errs.append(f"{path}: ARG BASE_IMAGE must come before the first FROM")
    for n, l in froms:
        img = l.split()[1]
        if img != "${BASE_IMAGE}" and not re.fullmatch(r"[a-z0-9_.-]+", img):  # stage names allowed
            errs.append(f"{path}:{n}: FROM {img}: use ${{BASE_IMAGE}}")
        if img.endswith(":latest"):
            errs.append(f"{path}:{n}: `latest` tag")
    stages = {l.split()[3] for _, l in froms if len(l.split()) >= 4 and l.split()[2].upper() == "AS"}
    entry = None
    for n, l in lines:
        op, _, rest = l.partition(" ")
        op = op.upper()
        if op == "RUN" and "apt-get" in rest:
            if "apt-get update" in rest and "apt-get install" not in rest:
                errs.append(f"{path}:{n}: apt-get update without install in the same RUN (stale cache layer)")
            if "apt-get install" in rest:
                if "apt-get update" not in rest:
                    errs.append(f"{path}:{n}: apt-get install without apt-get update in the same RUN")
                if "--no-install-recommends" not in rest:
                    errs.append(f"{path}:{n}: apt-get install without --no-install-recommends")
                if " -y" not in rest:
                    errs.append(f"{path}:{n}: apt-get install without -y")
                if "rm -rf /var/lib/apt/lists" not in rest:
                    errs.append(f"{path}:{n}: apt lists not removed in the same RUN")
        if op == "ADD" and re.search(r"https?://", rest):
            errs.append(f"{path}:{n}: ADD from a URL (use RUN with a checksum)")
        if op == "COPY":
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            from_stage = re.search(r"--from=(\S+)", rest)
            if from_stage:
                if from_stage.group(1) not in stages:
                    errs.append(f"{path}:{n}: COPY --from={from_stage.group(1)}: no such stage")
                continue
            srcs = args[:-1]
            found = 0
            for src in srcs:
                if any(c in src for c in "*?["):  # optional pattern
                    found += len(glob.glob(os.path.join(root, src)))
                elif os.path.exists(os.path.join(root, src)):
                    found += 1
                else:
                    errs.append(f"{path}:{n}: COPY source {src} missing from the build context")
            if srcs and not found:
                errs.append(f"{path}:{n}: COPY matches no file")
        if op == "ENTRYPOINT":
            entry = (n, rest)
    if entry is None:
        errs.append(f"{path}: no ENTRYPOINT")
    else:
        n, rest = entry
        if not rest.strip().startswith("["):
            errs.append(f"{path}:{n}: ENTRYPOINT not in exec form (signals would not reach the tests)")
        target = rest.strip().strip("[]").split(",")[0].strip().strip('"')
        copied = {shlex.split(l.partition(" ")[2])[-1]: shlex.split(l.partition(" ")[2])[-2]
                  for _, l in lines if l.upper().startswith("COPY ") and "--from" not in l}
        src = copied.get(target)
        if src is None:
            errs.append(f"{path}:{n}: ENTRYPOINT {target} is not COPYed into the image")
        elif not os.access(os.path.join(root, src), os.X_OK):
            errs.append(f"{path}:{n}: ENTRYPOINT source {src} is not executable")
    return errs


def check_compose(path):
    try:
        import yaml
    except ImportError:
        return []  # optional: only the Dockerfile checks run
    if not os.path.exists(path):
        return [f"{path}: missing"]
    errs = []
    doc = yaml.safe_load(open(path))
    for name, svc in (doc.get("services") or {}).items():
        devs = [d.split(":")[0] for d in svc.get("devices", [])]
        if not any(d.startswith("/dev/infiniband") for d in devs):
            errs.append(f"{path}: {name}: no /dev/infiniband device")
        if "IPC_LOCK" not in svc.get("cap_add", []) and not svc.get("privileged"):
            errs.append(f"{path}: {name}: no IPC_LOCK capability")
        memlock = (svc.get("ulimits") or {}).get("memlock")
        if memlock not in (-1, {"soft": -1, "hard": -1}):
            errs.append(f"{path}: {name}: memlock ulimit is not unlimited")
        build = svc.get("build") or {}
        df = os.path.join(os.path.dirname(path), build.get("context", "."), build.get("dockerfile", "Dockerfile"))
        if build and not os.path.exists(df):
            errs.append(f"{path}: {name}: build dockerfile {df} missing")
    return errs


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    errs = check_dockerfile(os.path.join(root, "docker", "Dockerfile"), root)
    errs += check_compose(os.path.join(root, "docker", "compose.yml"))
    for e in errs:
        print(e, file=sys.stderr)
    print(f"check-dockerfile: {len(errs)} finding(s)")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
