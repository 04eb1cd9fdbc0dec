"""A bad RDMAQ_* setting is named in one line, at once, by `rdmaq demo` and `rdmaq bench`
(exit status 2, before any child process starts: not a reader's error hidden behind the
writer's wait_ready timeout), and by the vLLM plugin before vLLM starts its workers."""
import logging

import pytest

from command import one_line_error, run
from rdmaq.vllm import plugin


@pytest.mark.parametrize("args", [("demo", "--readers", "2"),
                                  ("bench", "--readers", "1", "--sizes", "64", "--pace", "0")])
@pytest.mark.parametrize("var, value, words", [
    ("RDMAQ_POLICY", "fast", "environment variable RDMAQ_POLICY must be one of auto, efficient, got 'fast'"),
    ("RDMAQ_SETTLE_FAR_US", "3ms", "environment variable RDMAQ_SETTLE_FAR_US must be an integer"),
    ("RDMAQ_FREE_SPIN_BUSY", "1", "RDMAQ_FREE_SPIN_BUSY is no longer read: set "
                                  "RDMAQ_EXPERIMENT=free_spin_busy=1 instead"),
    ("RDMAQ_POLCY", "auto", "did you mean RDMAQ_POLICY?"),
])
def test_a_bad_setting_is_one_line_before_anything_starts(args, var, value, words):
    p = run(*args, env={var: value})
    one_line_error(p, 2, f"rdmaq {args[0]}", words)
    assert p.stdout == ""  # nothing ran


def test_the_vllm_plugin_names_a_bad_setting_first(monkeypatch, caplog):
    monkeypatch.setenv("RDMAQ_SLICE_US", "50")
    with caplog.at_level(logging.ERROR, logger="vllm.rdmaq"):
        with pytest.raises(SystemExit, match="rdmaq vLLM plugin: environment variable RDMAQ_SLICE_US "
                                             "must be 0 .off. or an integer in 100..100000, got '50'"):
            plugin.register()
    assert [r.getMessage() for r in caplog.records][0].startswith(
        "rdmaq vLLM plugin: environment variable RDMAQ_SLICE_US")
