"""Every reader of an RDMAQ_* variable takes an empty or whitespace value as unset (its
default), as rdmaq/settings.py's value() does, and the value's surrounding whitespace as no
part of it.  A reader that went to os.environ itself once took "" or " " as a value: an
address of one space, a ring size refused as "not an integer", a queue choice refused as a
bad one, the benchmark's step timing switched on by a blank."""
import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

from rdmaq import settings

REPO = Path(__file__).resolve().parents[2]
BLANKS = ["", " ", "\t", " \n "]


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_stripped_is_none_for_a_blank_value(raw):
    assert settings.stripped("RDMAQ_VERBS_ADDR", {"RDMAQ_VERBS_ADDR": raw}) is None
    assert settings.stripped("RDMAQ_VERBS_ADDR", {}) is None


def test_stripped_drops_surrounding_whitespace_only():
    env = {"RDMAQ_VLLM_REMOTE": "\t zmq \n", "RDMAQ_VERBS_ADDR": " a b "}
    assert settings.stripped("RDMAQ_VLLM_REMOTE", env) == "zmq"
    assert settings.stripped("RDMAQ_VERBS_ADDR", env) == "a b"


def test_stripped_refuses_a_name_missing_from_the_table():
    with pytest.raises(KeyError):
        settings.stripped("RDMAQ_NOT_A_SETTING", {})


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_a_bad_value_s_message_quotes_it_as_given(raw):
    with pytest.raises(ValueError, match=re.escape(f"got {raw + 'x'!r}")):
        settings.value("RDMAQ_SPIN_US", {"RDMAQ_SPIN_US": raw + "x"})


# ------------------------------------------------------------------ each reader
@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_vllm_ring_bytes_blank_is_the_default(monkeypatch, raw):
    from rdmaq.vllm import _geometry

    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", raw)
    assert _geometry._env_ring_bytes() == _geometry.DEFAULT_RING_BYTES
    monkeypatch.setenv("RDMAQ_VLLM_RING_BYTES", f"{raw}8192{raw}")
    assert _geometry._env_ring_bytes() == 8192


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_vllm_stats_blank_interval_and_directory_are_unset(monkeypatch, raw):
    from rdmaq.vllm import _stats

    monkeypatch.setenv(_stats.ENV_INTERVAL, raw)
    assert _stats._interval() == 1.0
    monkeypatch.setenv(_stats.ENV_INTERVAL, f"{raw}0.5{raw}")
    assert _stats._interval() == 0.5
    monkeypatch.setenv(_stats.ENV_DIR, raw)
    stats = _stats.QueueStats(object, "writer")  # any object a weakref takes
    assert stats._dir is None and stats._path is None and not stats.dirty()


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_vllm_plugin_blank_choice_is_unset(monkeypatch, raw):
    from rdmaq.vllm import plugin

    monkeypatch.setenv(plugin.ENV, raw)
    monkeypatch.delenv(plugin.OLD_ENV, raising=False)
    assert plugin.choice_from_env() is None
    monkeypatch.setenv(plugin.ENV, f"{raw}rdmaq{raw}")
    assert plugin.choice_from_env() == "rdmaq"


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_vllm_plugin_blank_new_name_falls_back_to_the_old_one(monkeypatch, raw):
    from rdmaq.vllm import plugin

    monkeypatch.setenv(plugin.ENV, raw)
    monkeypatch.setenv(plugin.OLD_ENV, " rdmaq ")
    assert plugin.choice_from_env() == "rdmaq"
    assert os.environ[plugin.ENV] == "rdmaq"  # exported under the new name, stripped
    monkeypatch.setenv(plugin.ENV, raw)
    monkeypatch.setenv(plugin.OLD_ENV, raw)
    assert plugin.choice_from_env() is None


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_build_blank_sanitize_and_no_verbs_are_unset(monkeypatch, raw):
    # The checkout's build module (a build runs from the source tree, which an installed
    # wheel's copy of the module lacks: csrc/ is beside the checkout's only)
    spec = importlib.util.spec_from_file_location("rdmaq_build_of_the_checkout", REPO / "rdmaq" / "_build.py")
    assert spec is not None and spec.loader is not None
    _build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_build)

    monkeypatch.setenv("RDMAQ_SANITIZE", raw)
    assert _build._sanitize_flags() == []
    monkeypatch.setenv("RDMAQ_SANITIZE", f"{raw}address{raw}")
    assert _build._sanitize_flags()[0] == "-fsanitize=address"
    monkeypatch.setenv("RDMAQ_NO_VERBS", f"{raw}1{raw}")
    assert _build.verbs_skip_reason() == "RDMAQ_NO_VERBS=1 is set"
    monkeypatch.setenv("RDMAQ_NO_VERBS", raw)
    assert _build.verbs_skip_reason() != "RDMAQ_NO_VERBS=1 is set"


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_bench_cache_blank_is_the_user_s_cache(monkeypatch, raw, tmp_path):
    from rdmaq.bench.common import queues

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv(queues.CACHE_ENV, raw)
    assert queues._cache_dir() == str(tmp_path / "rdmaq-bench")
    monkeypatch.setenv(queues.CACHE_ENV, f"{raw}{tmp_path}{raw}")
    assert queues._cache_dir() == str(tmp_path)


@pytest.mark.parametrize("raw", BLANKS, ids=repr)
def test_verbs_blank_address_and_liveness_are_the_default(monkeypatch, raw):
    net = pytest.importorskip("rdmaq.transport.verbs.net", exc_type=ImportError)

    monkeypatch.setenv("RDMAQ_VERBS_ADDR", raw)
    assert net.bootstrap_ip("10.0.0.7", None) == "10.0.0.7"
    monkeypatch.setenv("RDMAQ_VERBS_ADDR", f"{raw}10.0.0.9{raw}")
    assert net.bootstrap_ip("10.0.0.7", None) == "10.0.0.9"
    assert net.bootstrap_ip("10.0.0.7", "10.0.0.8") == "10.0.0.8"
    monkeypatch.setenv("RDMAQ_VERBS_LIVENESS_S", raw)
    assert net.liveness_s() == settings.default("RDMAQ_VERBS_LIVENESS_S")
    monkeypatch.setenv("RDMAQ_VERBS_LIVENESS_S", f"{raw}7{raw}")
    assert net.liveness_s() == 7
    monkeypatch.setenv("RDMAQ_VERBS_LIVENESS_S", "1")
    with pytest.raises(ValueError, match="RDMAQ_VERBS_LIVENESS_S"):
        net.liveness_s()


# ------------------------------------------------------------------ no reader left out
# The only files that may read RDMAQ_* variables from the environment themselves:
# the table's own module, and the build glue setup.py loads without the package.
OWN_READERS = {"rdmaq/settings.py", "rdmaq/_build.py"}


def test_no_python_reader_goes_around_settings():
    """A new `os.environ.get("RDMAQ_...")` in rdmaq/ or bench/ would read a blank value as a
    value: read it with settings.value() or settings.stripped() instead."""
    out = subprocess.run(
        ["grep", "-rnE", r"""(environ\.get\(|environ\[|getenv\(|in os\.environ)\s*["']RDMAQ_""",
         "--include=*.py", "rdmaq", "bench"], cwd=REPO, capture_output=True, text=True).stdout
    offenders = [line for line in out.splitlines() if line.split(":", 1)[0] not in OWN_READERS]
    assert offenders == []

