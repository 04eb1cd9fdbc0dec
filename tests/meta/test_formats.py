"""docs/format.md gives every format's current version: the code's."""
import os
import re

from rdmaq import handle, serialize

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def _number(text, pattern):
    m = re.search(pattern, text, re.MULTILINE)
    assert m, pattern
    return int(m.group(1))


def test_format_md_gives_each_format_s_current_version():
    versions = {
        "RDMAQ_VERSION": _number(_read("csrc", "format.h"), r"^#define RDMAQ_VERSION\s+(\d+)U"),
        "RDMAQ_SHM_VERSION": _number(_read("csrc", "shm_format.h"), r"^#define RDMAQ_SHM_VERSION\s+(\d+)U"),
        # read as text: importing the verbs package needs its extension
        "PROTO": _number(_read("rdmaq", "transport", "verbs", "protocol.py"), r"^PROTO = (\d+)"),
        "HANDLE_VERSION": handle.HANDLE_VERSION,
    }
    doc = _read("docs", "format.md")
    for name, version in versions.items():
        assert f"| `{name}` {version} |" in doc, (name, version)
    assert f"| the magic, `{serialize.MAGIC.decode()}` |" in doc
