"""Building the shm extension of a scratch tree, one C file at a time.

setuptools rebuilds every source of an extension when one changed; a C
mutant changes one file.  So the tree is built once with setuptools
(verbose), its compiler and linker commands are kept, and a mutant
replays two of them: the mutated file's compile and the link.

The same commands, changed, give two more builds:

- the coverage build (-O0 --coverage, plus an exported
  rdmaq_mut_gcov_flush() that the coverage plugin calls after each test);
- the object of a file alone with -g0, compared byte for byte with the
  original's: a mutant that compiles to the same object is equivalent
  (trivial compiler equivalence), one that does not compile is stillborn.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

EXT = "_rdmaq.abi3.so"

GCOV_FLUSH = """
/* Coverage build only: write this process's counters now and start afresh. */
void __gcov_dump(void);
void __gcov_reset(void);
__attribute__((visibility("default"))) void rdmaq_mut_gcov_flush(void)
{
	__gcov_dump();
	__gcov_reset();
}
"""


class BuildError(Exception):
    pass


def _run(cmd, cwd, timeout=300):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise BuildError(f"{shlex.join(cmd)}\n{(p.stdout + p.stderr)[-3000:]}")
    return p


class Extension:
    """The shm extension (rdmaq._rdmaq) of one tree."""

    def __init__(self, tree: Path, python: str = sys.executable, coverage: bool = False):
        self.tree = Path(tree)
        self.python = python
        self.coverage = coverage
        self.temp = self.tree / "build" / ("mutcov" if coverage else "mut")
        self.compiles: dict[str, list[str]] = {}  # csrc/x.c -> argv
        self.link: list[str] = []
        self.so: Path | None = None

    def build(self):
        """Build with setuptools and keep its commands; the coverage build then rebuilds."""
        env = dict(os.environ, RDMAQ_NO_VERBS="1")
        env.pop("RDMAQ_SANITIZE", None)
        p = subprocess.run([self.python, "setup.py", "build_ext", "--inplace", "-f", "-v",
                            "--build-temp", str(self.temp)], cwd=self.tree, env=env,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise BuildError(f"setup.py build_ext failed:\n{(p.stdout + p.stderr)[-3000:]}")
        for line in (p.stdout + p.stderr).splitlines():
            argv = shlex.split(line) if re.match(r"^\S*(gcc|cc|clang)\s", line) else None
            if not argv:
                continue
            if "-c" in argv and "-o" in argv:
                src = argv[argv.index("-c") + 1]
                self.compiles[os.path.relpath(os.path.join(self.tree, src), self.tree)
                              if not os.path.isabs(src) else src] = argv
            elif "-shared" in argv:
                self.link = argv
        if not self.link or not any(k.startswith("csrc/") for k in self.compiles):
            raise BuildError("could not find the compiler and linker commands in setup.py's output")
        out = self.link[self.link.index("-o") + 1]
        self.so_built = self.tree / out if not os.path.isabs(out) else Path(out)
        self.so = self.tree / "rdmaq" / EXT
        if self.coverage:
            self._coverage_build()

    def _coverage_build(self):
        for src, argv in self.compiles.items():
            argv = [("-O0" if a.startswith("-O") else a) for a in argv]
            if src.startswith("csrc/"):
                argv.append("--coverage")
            self.compiles[src] = argv
            _run(argv, self.tree)
        hook_c = self.temp / "gcov_flush.c"
        hook_c.write_text(GCOV_FLUSH)
        hook_o = self.temp / "gcov_flush.o"
        _run([self.compiles["csrc/ring.c"][0], "-fPIC", "-c", str(hook_c), "-o", str(hook_o)], self.tree)
        self.link = self.link + [str(hook_o), "--coverage"]
        self.relink()

    def obj(self, src: str) -> Path:
        argv = self.compiles[src]
        return Path(argv[argv.index("-o") + 1])

    def recompile(self, src: str):
        _run(self.compiles[src], self.tree)

    def relink(self):
        _run(self.link, self.tree)
        shutil.copy2(self.so_built, self.so)

    def object_alone(self, src: str, out: Path) -> bool:
        """Compile ``src`` as it is now, without debug info, to ``out``; False if it does not compile."""
        argv = list(self.compiles[src])
        argv[argv.index("-o") + 1] = str(out)
        argv.append("-g0")
        p = subprocess.run(argv, cwd=self.tree, capture_output=True, timeout=300)
        return p.returncode == 0

    def gcno_dir(self) -> Path:
        return self.obj("csrc/ring.c").parent
