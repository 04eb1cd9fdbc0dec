"""Where a benchmark's results go, for ``rdmaq bench`` and ``rdmaq bench serve`` alike: JSON
files replaced whole (a reader never sees half of one), and plot file names matplotlib can
write, checked before anything runs."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` to ``path`` through a temporary file renamed over it."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def check_plot_format(parser: argparse.ArgumentParser, flag: str, path: str) -> None:
    """Refuse, before anything runs, a plot file whose format matplotlib cannot write
    (it takes the format from the extension)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if ext not in formats:
        what = f".{ext} files" if ext else "a file name without an extension"
        parser.error(f"{flag} {path}: matplotlib cannot write {what}; use one of "
                     f"{', '.join('.' + f for f in sorted(formats))}")
