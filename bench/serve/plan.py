"""The order of ``rdmaq bench serve``'s runs, what is left of it, and whether the next run fits.

A sweep is settings x queues x runs. Within a setting the queues alternate run by run, and each
setting starts one queue later than the one before (ABCABC..., then BCABCA...), so neither a
queue nor a position in the order meets the machine's drift more often than another. A sweep
can be cut into parts (a command on the GPU machine may run for minutes only): a part stops
before a run that would end past its deadline, and the next part (``--resume``) runs what is
left, in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    setting: str
    queue: str
    run: int  # 1-based

    @property
    def name(self) -> str:
        return f"{self.setting}-{self.queue}-{self.run}"


def base_queue(queue: str) -> str:
    """'rdmaq@RDMAQ_EXPERIMENT=busy_spin_us=2000' -> 'rdmaq': a variant is its base queue's server with
    more environment."""
    return queue.split("@", 1)[0]


def order_for(setting_index: int, queues: list[str], runs: int) -> list[tuple[str, int]]:
    """Alternate the queues run by run; each setting starts one queue later (0-based runs)."""
    n = len(queues)
    seq, count = [], {q: 0 for q in queues}
    for j in range(n * runs):
        q = queues[(setting_index + j) % n]
        seq.append((q, count[q]))
        count[q] += 1
    return seq


def plan(settings: list[str], queues: list[str], runs: int | dict[str, int]) -> list[Step]:
    """``runs`` per queue in every setting, or per setting (idle cells get more)."""
    per = runs if isinstance(runs, dict) else dict.fromkeys(settings, runs)
    return [Step(s, q, k + 1) for si, s in enumerate(settings)
            for q, k in order_for(si, queues, per[s])]


def remaining(steps: list[Step], done: list[dict]) -> list[Step]:
    """The steps without a successful run among ``done`` (run records of earlier parts)."""
    ok = {(r["setting"], r["queue"], r["run"]) for r in done if not r.get("error")}
    return [s for s in steps if (s.setting, s.queue, s.run) not in ok]


def run_estimate_s(durations: list[float], num_prompts: int, rate: float) -> float:
    """How long the next run may take: the longest so far, or, before any, the requests'
    arrival time plus a margin for the client's start and the last requests' tail."""
    if durations:
        return max(durations)
    return num_prompts / rate + 15.0


def fits(elapsed_s: float, estimate_s: float, deadline_s: float | None) -> bool:
    """Whether a run of ``estimate_s`` started now ends before the part's deadline."""
    return deadline_s is None or elapsed_s + estimate_s <= deadline_s
