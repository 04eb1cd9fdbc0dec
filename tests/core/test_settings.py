"""rdmaq/settings.py: the one table of RDMAQ_* variables.  Each parses its default's text,
refuses a bad value naming the variable, the value and what is allowed; empty means unset;
check_environment refuses typos and retired names and lets a harness's own names pass; the
table lists every variable the code reads; a bad value makes a Reader or Writer fail before
it attaches or creates anything (nothing left behind, the index free for a retry)."""
import dataclasses
import os
import re
import subprocess
from pathlib import Path

import pytest

import rdmaq
from rdmaq import settings
from rdmaq._rdmaq import lib as core

REPO = Path(__file__).resolve().parents[2]

# A bad value of each variable that has a rule to break.
BAD = {
    "RDMAQ_POLICY": "fast", "RDMAQ_FREE_SPIN_US": "1000001", "RDMAQ_SPIN_US": "-1",
    "RDMAQ_SLICE_US": "99", "RDMAQ_ANTICIPATE": "yes", "RDMAQ_RESTORE_SLICE": "2",
    "RDMAQ_WARM": "on", "RDMAQ_SETTLE_FAR_US": "3ms", "RDMAQ_EXPERIMENT": "busy_spin_us",
    "RDMAQ_PORT": "256", "RDMAQ_GID_INDEX": "-2", "RDMAQ_VERBS_LIVENESS_S": "1",
    "RDMAQ_SRQ_DEPTH": "63", "RDMAQ_QPS_PER_PEER": "65", "RDMAQ_TRACEBACK": "yes",
    "RDMAQ_DISTRIBUTED_IPC": "nccl", "RDMAQ_VLLM_RING_BYTES": "4095", "RDMAQ_VLLM_REMOTE": "tcp",
    "RDMAQ_VLLM_TRANSPORT": "ib", "RDMAQ_VLLM_STATS_INTERVAL": "-1", "RDMAQ_NO_VERBS": "true",
}
# The waiting variables a Reader parses (the library's own).
READER_VARS = [s.name for s in settings.SETTINGS if s.reader == settings.LIBRARY]


def test_the_bounds_are_the_c_core_s():
    assert settings.MAX_SPIN_US == core.RDMAQ_MAX_SPIN_NS // 1000
    assert (settings.MIN_SLICE_US, settings.MAX_SLICE_US) == (core.RDMAQ_MIN_SLICE_NS // 1000,
                                                               core.RDMAQ_MAX_SLICE_NS // 1000)


@pytest.mark.parametrize("s", settings.SETTINGS, ids=lambda s: s.name)
def test_unset_empty_and_blank_are_the_default(s):
    for env in ({}, {s.name: ""}, {s.name: "  \t"}):
        assert settings.value(s.name, env) == s.default


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_named_with_what_is_allowed(name):
    s = settings.BY_NAME[name]
    with pytest.raises(ValueError) as e:
        settings.value(name, {name: BAD[name]})
    assert str(e.value) == f"environment variable {name} must be {s.allowed}, got {BAD[name]!r}"
    with pytest.raises(ValueError, match=re.escape(str(e.value))):
        settings.check_environment({"RDMAQ_POLICY": "auto", name: BAD[name]})


def test_every_variable_with_a_rule_has_a_bad_value_here():
    free = {s.name for s in settings.SETTINGS if s.parse is settings._text}
    assert set(BAD) == set(settings.BY_NAME) - free


def test_every_default_is_a_value_its_own_rule_allows():
    """A default outside its variable's range would be used without the check a user's
    value gets; each one, written out, parses back to itself."""
    for s in settings.SETTINGS:
        if isinstance(s.default, (int, float)) and not isinstance(s.default, bool):
            assert settings.value(s.name, {s.name: str(s.default)}) == s.default, s.name


def test_a_name_two_characters_off_in_length_is_a_typo_three_is_another_name():
    """A close name at most two characters longer or shorter is refused with the name meant;
    one three longer is someone else's variable, and passes."""
    with pytest.raises(ValueError, match="RDMAQ_SPIN_USXX='5': did you mean RDMAQ_SPIN_US"):
        settings.check_environment({"RDMAQ_SPIN_USXX": "5"})
    with pytest.raises(ValueError, match="RDMAQ_SPIN_U='5': did you mean RDMAQ_SPIN_US"):
        settings.check_environment({"RDMAQ_SPIN_U": "5"})
    settings.check_environment({"RDMAQ_SPIN_USXYZ": "5"})


def test_values_are_parsed():
    env = {"RDMAQ_POLICY": " efficient ", "RDMAQ_SPIN_US": "0", "RDMAQ_WARM": "0",
           "RDMAQ_EXPERIMENT": "busy_spin_us=2000, free_spin_busy=1", "RDMAQ_GID_INDEX": "-1",
           "RDMAQ_VLLM_STATS_INTERVAL": "0.5"}
    got = {k: settings.value(k, env) for k in env}
    assert got == {"RDMAQ_POLICY": "efficient", "RDMAQ_SPIN_US": 0, "RDMAQ_WARM": False,
                   "RDMAQ_EXPERIMENT": {"busy_spin_us": 2000, "free_spin_busy": True},
                   "RDMAQ_GID_INDEX": -1, "RDMAQ_VLLM_STATS_INTERVAL": 0.5}
    assert settings.value("RDMAQ_EXPERIMENT", {}) == {"busy_spin_us": 0, "free_spin_busy": False}


def test_typos_and_retired_names_are_refused_and_others_pass():
    with pytest.raises(ValueError, match="unknown environment variable RDMAQ_SPINUS='5': did you mean "
                                         "RDMAQ_SPIN_US"):
        settings.check_environment({"RDMAQ_SPINUS": "5"})
    for old, new in settings.RETIRED.items():
        with pytest.raises(ValueError, match=f"{old} is no longer read: set {re.escape(new)}"):
            settings.check_environment({old: "1"})
    settings.check_environment({"RDMAQ_VENV": "/x", "OTHER": "y", "RDMAQ_POLICY": ""})


def test_the_harness_s_own_names_pass():
    """Every RDMAQ_* variable the tests and tools set (NAME=, or "NAME" in Python and shell)
    that is not a setting is no typo of one (the typos these tests make on purpose aside)."""
    out = subprocess.run(["grep", "-rhoE", "--include=*.py", "--include=*.sh", "--exclude=test_settings*.py",
                          r"RDMAQ_[A-Z0-9_]+=|[\"']RDMAQ_[A-Z0-9_]+[\"']", "tests", "bench", "docker"],
                         cwd=REPO, capture_output=True, text=True).stdout
    names = set(re.findall(r"RDMAQ_[A-Z0-9_]+", out)) - set(settings.BY_NAME) - set(settings.RETIRED)
    assert "RDMAQ_VENV" in names
    settings.check_environment({n: "1" for n in names})


def test_the_table_lists_every_variable_the_code_reads():
    """A name read through os.environ / getenv in rdmaq/, bench/ or csrc/ is in the table."""
    out = subprocess.run(["grep", "-rhoE", r"(environ\.get|getenv|env_u32|env_int)\(\"RDMAQ_[A-Z0-9_]+",
                          "rdmaq", "bench", "csrc"], cwd=REPO, capture_output=True, text=True).stdout
    read = set(re.findall(r"RDMAQ_[A-Z0-9_]+", out))
    assert read and read <= set(settings.BY_NAME), read - set(settings.BY_NAME)


def test_the_c_core_reads_no_waiting_variable():
    out = subprocess.run(["grep", "-rn", "getenv", "csrc/wait.c", "csrc/busy.c", "csrc/ring.c",
                          "csrc/shm.c"], cwd=REPO, capture_output=True, text=True).stdout
    assert out == ""


def _segments():
    return {n for n in os.listdir("/dev/shm") if n.startswith("rdmaq-")}


@pytest.mark.parametrize("name", READER_VARS)
def test_a_bad_value_takes_no_index_and_the_writer_goes_on(monkeypatch, name):
    """A Reader refused for a bad setting attached nothing: a retry with a good value
    attaches the same index, and the writer's puts reach it."""
    with rdmaq.Writer(1, transport="shm") as w:
        monkeypatch.setenv(name, BAD[name])
        with pytest.raises(ValueError, match=f"environment variable {name} must be"):
            rdmaq.Reader(w.handle, 0)
        monkeypatch.delenv(name)
        with rdmaq.Reader(w.handle, 0) as r:
            w.wait_ready(timeout=30)
            w.put(b"after", timeout=30)
            assert r.get(timeout=30) == b"after"


@pytest.mark.parametrize("name", [n for n in READER_VARS if n not in ("RDMAQ_POLICY", "RDMAQ_FREE_SPIN_US",
                                                                      "RDMAQ_ANTICIPATE", "RDMAQ_WARM")])
def test_a_writer_refused_for_a_bad_value_leaves_no_segment(monkeypatch, name):
    before = _segments()
    monkeypatch.setenv(name, BAD[name])
    with pytest.raises(ValueError, match=f"environment variable {name} must be"):
        rdmaq.Writer(1, transport="shm")
    assert _segments() - before == set()


RANGE = re.compile(r"^(?:0 \(off\) or )?an integer in (-?\d+)\.\.(\d+)$")


@pytest.mark.parametrize("s", [s for s in settings.SETTINGS if RANGE.search(s.allowed)],
                         ids=lambda s: s.name)
def test_an_integer_setting_takes_its_documented_range_and_nothing_past_it(s):
    """What docs/settings.md says is allowed is what is parsed: both ends taken, one past each
    refused."""
    lo, hi = map(int, RANGE.search(s.allowed).groups())
    assert settings.value(s.name, {s.name: str(lo)}) == lo
    assert settings.value(s.name, {s.name: str(hi)}) == hi
    for past in (lo - 1, hi + 1):
        if past == 0 and s.allowed.startswith("0 (off)"):
            continue
        with pytest.raises(ValueError, match=s.name):
            settings.value(s.name, {s.name: str(past)})


def test_docs_settings_md_is_the_table():
    """The documented defaults, ranges and readers are the code's: docs/settings.md holds
    the table as table_markdown() writes it (a default changed in one place only fails here)."""
    text = (REPO / "docs" / "settings.md").read_text()
    block = text.split("<!-- settings:begin -->\n")[1].split("<!-- settings:end -->")[0]
    assert block == settings.table_markdown()


def test_a_row_of_the_table_cannot_be_changed_at_run_time():
    """Every reader of a variable sees the row the docs are made from."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.BY_NAME["RDMAQ_PORT"].default = 1  # type: ignore[misc]
