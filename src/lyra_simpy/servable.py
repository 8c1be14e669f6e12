"""Warnings, before a run, for requests the workload can draw but no replica can serve.

A request whose prompt is larger than the KV pool, whose prompt is larger than the
token budget of a scheduler that does not chunk prefills, or whose prompt plus output
outgrows the pool can never run: the engine rejects it on arrival. That is a property
of the scenario, visible before simulating, so ``lyra-simpy validate`` says so (a
warning, not an error: a workload may mean to probe such limits).

Only the cheap bounds of the length distributions are used: the largest value of
``fixed``, ``uniform``, ``normal``/``lognormal`` with a ``max``, ``empirical`` and
``trace`` lengths (the trace column's maximum), and of every component of a
``mixture``. An unclipped normal or lognormal has no bound and is not checked, nor are
``conversation`` prefixes (whose prompts grow with the history). The decision itself
is each scheduler's own :meth:`~lyra_simpy.policies.base.Scheduler.accepts`, so the
warning and the engine cannot disagree.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lyra_simpy.kv import blocks_for
from lyra_simpy.policies import SCHEDULERS
from lyra_simpy.request import Request
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
    from lyra_simpy.scenario import Scenario
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


def never_served(scenario: Scenario) -> list[str]:
    """One line per replica kind and limit that some drawable request breaks."""
    w = scenario.workload
    if isinstance(w.prefix, ConversationPrefix):
        return []
    max_in = max_tokens(w.input_tokens, w, scenario.base_dir, "input")
    max_out = max_tokens(w.output_tokens, w, scenario.base_dir, "output")
    if max_in is None or max_out is None:
        return []
    if isinstance(w.prefix, SystemPromptPrefix):
        max_in += w.prefix.prefix_tokens
    total = max_in + max_out
    if w.max_total_tokens is not None:  # both are scaled down to fit the cap
        total = min(total, w.max_total_tokens)
        max_in = min(max_in, w.max_total_tokens - 1)
    out: list[str] = []
    # replicas of one group (one field path) are alike: checked once
    for where, spec in dict(scenario.replica_specs_named()).items():
        sched = SCHEDULERS[spec.scheduler.name](spec.scheduler)
        blocks, size = spec.kv_cache.capacity_blocks, spec.kv_cache.block_size
        pool = blocks * size
        name = f"{where}scheduler {spec.scheduler.name!r}"
        prompt_only = Request(0, 0, 0.0, max_in, 1)
        if not sched.accepts(prompt_only, blocks, size):
            budget = getattr(spec.scheduler, "max_num_batched_tokens", None)
            why = (
                f"the KV pool ({where}kv_cache: {pool} tokens)"
                if blocks_for(max_in, size) > blocks
                else f"the token budget ({where}scheduler.max_num_batched_tokens: {budget}) "
                "without chunked prefill"
            )
            out.append(
                f"workload.input_tokens: prompts of up to {max_in} tokens exceed {why}; "
                f"{name} rejects them on arrival"
            )
        elif not sched.accepts(Request(0, 0, 0.0, max_in, total - max_in), blocks, size):
            budget = getattr(spec.scheduler, "max_num_batched_tokens", None)
            limits = f"KV pool {pool} tokens" + (f", token budget {budget}" if budget else "")
            out.append(
                f"workload: prompt + output of up to {total} tokens can exceed what "
                f"{name} can hold ({limits}); such requests are rejected on arrival"
            )
    return out
