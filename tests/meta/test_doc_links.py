"""Every relative link of README.md and docs/ leads somewhere: the file exists and, for
FILE.md#anchor, FILE.md has a heading of that anchor (GitHub's rule: lower case, spaces
to hyphens, punctuation dropped)."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted(REPO.glob("docs/*.md")), *sorted(REPO.glob("docs/benchmarks/*.md")),
        *sorted(REPO.glob("docs/investigations/*.md")), *sorted(REPO.glob("docs/results/**/*.md"))]


def anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#+ ", line):
            out.add(anchor(line.split(" ", 1)[1]))
    return out


def broken_links(doc: Path) -> list[str]:
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, frag = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest.name}")
    return bad


def test_every_relative_link_and_anchor_resolves():
    bad = {str(d.relative_to(REPO)): b for d in DOCS if (b := broken_links(d))}
    assert bad == {}


def test_a_moved_section_is_caught(tmp_path):
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# B\n\n## Kept\n")
    doc.write_text("[ok](b.md#kept) [gone](b.md#moved) [none](c.md)\n")
    assert broken_links(doc) == ["b.md#moved: no heading #moved in b.md", "c.md: no such file"]
