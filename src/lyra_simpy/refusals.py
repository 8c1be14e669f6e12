"""Requests a scenario's workload can produce that no replica could ever serve.

``lyra-simpy validate`` warns about them before anything runs (a run would reject them
on arrival with a ``reject_reason``, see :data:`~lyra_simpy.engine.request.REJECT_REASONS`).
The check takes the largest prompt and the largest output each length distribution can
draw — ``fixed``, ``uniform``, ``normal``/``lognormal`` with a ``max``, ``empirical``
and ``trace`` lengths (the column's maximum over the rows replayed), and every component
of a ``mixture`` — with a system-prompt prefix added and ``max_total_tokens`` applied,
and asks every replica's scheduler, as the engine does at arrival (so the warning and
the engine cannot disagree). An unclipped normal or lognormal has no bound and is not
checked, nor are ``conversation`` prefixes (whose prompts grow with the history).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lyra_simpy.engine.request import Request
from lyra_simpy.policies import SCHEDULERS
from lyra_simpy.scenario import Scenario
from lyra_simpy.workload.arrivals import TraceArrivals
from lyra_simpy.workload.lengths import (
    EmpiricalLength,
    FixedLength,
    LogNormalLength,
    MixtureLength,
    NormalLength,
    TraceLength,
    UniformLength,
    read,
)
from lyra_simpy.workload.prefixes import ConversationPrefix, SystemPromptPrefix

if TYPE_CHECKING:
    from lyra_simpy.workload import WorkloadConfig


def max_tokens(dist: Any, workload: WorkloadConfig, base_dir: Path, field: str) -> int | None:
    """The largest length *dist* can draw (None: no cheap bound)."""
    if isinstance(dist, FixedLength):
        return dist.tokens
    if isinstance(dist, UniformLength):
        return dist.high
    if isinstance(dist, (NormalLength, LogNormalLength)):
        return dist.max
    if isinstance(dist, EmpiricalLength):
        trace = read(dist.path, dist.format, base_dir)
        column = trace.input_tokens if dist.field == "input" else trace.output_tokens
        return int(column.max())
    if isinstance(dist, TraceLength) and isinstance(workload.arrival, TraceArrivals):
        arrival = workload.arrival
        trace = read(arrival.path, arrival.format, base_dir)
        column = trace.input_tokens if field == "input" else trace.output_tokens
        return int(column[arrival.skip_rows :].max())
    if isinstance(dist, MixtureLength):
        bounds = [max_tokens(c.dist, workload, base_dir, field) for c in dist.components]
        return None if None in bounds else max(b for b in bounds if b is not None)
    return None


def possible_refusals(scenario: Scenario) -> list[str]:
    """One line per variant whose workload can draw a request (the longest prompt with
    the longest output) that no replica could ever serve, naming the reason."""
    out = []
    for variant in scenario.expand():
        w = variant.workload
        if isinstance(w.prefix, ConversationPrefix):
            continue
        longest_in = max_tokens(w.input_tokens, w, variant.base_dir, "input")
        longest_out = max_tokens(w.output_tokens, w, variant.base_dir, "output")
        if longest_in is None or longest_out is None:
            continue
        if isinstance(w.prefix, SystemPromptPrefix):
            longest_in += w.prefix.prefix_tokens
        if w.max_total_tokens is not None:  # both are scaled down to fit the cap
            longest_in = min(longest_in, w.max_total_tokens - 1)
            longest_out = min(longest_out, w.max_total_tokens - longest_in)
        req = Request(0, 0, 0.0, longest_in, longest_out)
        reasons: dict[str, list[str]] = {}
        for where, spec in variant.replica_specs_named():
            sched = SCHEDULERS[spec.scheduler.name](spec.scheduler)
            kv = spec.kv_cache
            prompt_only = where.endswith("prefill.")
            reason = sched.refusal(req, kv.capacity_blocks, kv.block_size, prompt_only)
            pool = where.removesuffix(".") or "replica"
            reasons.setdefault(pool, []).append(reason or "")  # ("": it can)
        # refused where every replica of some pool refuses (a request needs one of each
        # pool in a disaggregated cluster; one replica of any other cluster)
        refused: dict[str, str] = {p: rs[0] for p, rs in reasons.items() if all(rs)}
        if refused:
            pool, why = next(iter(refused.items()))
            label = f"{scenario.name}/{variant.label}"
            out.append(
                f"{label}: workload can draw {longest_in} prompt + {longest_out} output "
                f"tokens, which {pool} can never serve ({why}): such requests will be "
                "rejected"
            )
    return out
