"""Requests a scenario's workload can produce that no replica could ever serve.

``lyra-simpy validate`` warns about them before anything runs (a run would reject them
on arrival with a ``reject_reason``, see :data:`~lyra_simpy.request.REJECT_REASONS`).
The check takes the largest prompt and the largest output each length distribution can
draw (``fixed``, ``uniform``, clipped ``normal``/``lognormal``, mixtures of those) and
asks every replica's scheduler, as the engine does at arrival; distributions without an
upper bound (unclipped, empirical, trace) are not checked.
"""

from __future__ import annotations

from typing import Any

from lyra_simpy.policies import SCHEDULERS
from lyra_simpy.request import Request
from lyra_simpy.scenario import Scenario


def largest_length(dist: Any) -> int | None:
    """The longest length *dist* (a length config) can draw; None: no bound known."""
    name = dist.name
    if name == "fixed":
        return int(dist.tokens)
    if name == "uniform":
        return int(dist.high)
    if name in ("normal", "lognormal"):
        return None if dist.max is None else int(dist.max)
    if name == "mixture":
        longest = [largest_length(c.dist) for c in dist.components]
        return None if None in longest else max(x for x in longest if x is not None)
    return None  # empirical, trace: the file decides


def possible_refusals(scenario: Scenario) -> list[str]:
    """One line per variant whose workload can draw a request (the longest prompt with
    the longest output) that no replica could ever serve, naming the reason."""
    out = []
    for variant in scenario.expand():
        workload = variant.workload
        longest_in = largest_length(workload.input_tokens)
        longest_out = largest_length(workload.output_tokens)
        if longest_in is None or longest_out is None:
            continue
        req = Request(0, 0, 0.0, longest_in, longest_out)
        reasons: dict[str, list[str]] = {}
        for where, spec in variant.replica_specs_named():
            sched = SCHEDULERS[spec.scheduler.name](spec.scheduler)
            kv = spec.kv_cache
            prompt_only = where.endswith("prefill.")
            reason = sched.refusal(req, kv.capacity_blocks, kv.block_size, prompt_only)
            pool = where.removesuffix(".") or "replica"
            reasons.setdefault(pool, []).append(reason or "")
        # refused where every replica of some pool refuses (a request needs one of each
        # pool in a disaggregated cluster; one replica of any other cluster)
        refused = {p: rs[0] for p, rs in reasons.items() if all(rs)}
        if refused:
            pool, reason = next(iter(refused.items()))
            label = f"{scenario.name}/{variant.label}"
            out.append(
                f"{label}: workload can draw {longest_in} prompt + {longest_out} output "
                f"tokens, which {pool} can never serve ({reason}): such requests will be "
                "rejected"
            )
    return out
