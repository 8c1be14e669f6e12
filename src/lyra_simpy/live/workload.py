"""The scenario's workload as a live replay sends it: the simulator's own draws.

:func:`planned_requests` draws the workload exactly as :func:`~lyra_simpy.simulate`
does (same seed, same named streams, :func:`~lyra_simpy.workload.build_source`), so a
replay sends the requests the simulator sees: the same open-loop arrival times (or the
same closed-loop concurrency and think time) and the same input and output lengths.

Prompts are token-id arrays, so their lengths are exact without a tokenizer. Ids are
drawn uniformly from ``[TokenIds.low, TokenIds.high)`` — fresh per request from the
stream ``prompt_ids`` — except that a prompt's shared-prefix units (the workload's
``prefix`` keys, one per ``unit`` tokens) take ids that depend only on the key, so two
prompts sharing a key share those tokens and a real prefix cache can hit them.

Every replay of a scenario sends the same ids unless it is given its own *prompt_seed*
(``lyra-simpy replay --prompt-seed N``): the ids, shared units included, are then drawn
from *N* instead of the scenario's seed, and the lengths, times and outputs stay the
scenario's. A server that keeps the prompts it has seen meets a second replay of the same
ids as a return visit: llama-server's prompt cache in RAM (``--cache-ram``, on by default)
restores a cached state whose tokens cover the new prompt into its slot at the launch,
even with ``cache_prompt: false``, and frees its buffer for the next save
(``server_prompt_cache::load``, ``tools/server/server-task.cpp``, llama.cpp 0c1e570;
docs/VALIDATION-llamacpp.md item 84).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, PositiveInt, model_validator

from lyra_simpy.rng import Streams
from lyra_simpy.scenario import Scenario
from lyra_simpy.workload import build_source
from lyra_simpy.workload.prefixes import unit_tokens
from lyra_simpy.workload.source import ClosedLoopSource

_MASK = (1 << 63) - 1


class TokenIds(BaseModel):
    """Range of the random prompt token ids (the default stays clear of the special
    tokens at the start of common vocabularies and inside every vocabulary of ≥ 32k)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: PositiveInt = 1000
    high: PositiveInt = 30000

    @model_validator(mode="after")
    def _ordered(self) -> TokenIds:
        if self.high <= self.low:
            raise ValueError(f"high: got {self.high}, must be > low ({self.low})")
        return self


@dataclass(frozen=True)
class Plan:
    """What to send: per request its prompt ids and output length; open loop also its
    send time, closed loop the number of clients and their think time."""

    prompts: list[list[int]]
    output_tokens: list[int]
    arrival_s: list[float] | None
    """Open loop: send times from the start (None for closed loop)."""
    concurrency: int = 0
    think_time_s: float = 0.0
    stop_s: float | None = None
    """Closed loop: send nothing after this time."""


def planned_requests(
    scenario: Scenario, ids: TokenIds | None = None, prompt_seed: int | None = None
) -> Plan:
    """The requests of *scenario*'s workload, drawn as the simulator draws them, their
    prompt ids from *prompt_seed* (None: the scenario's seed; module docstring)."""
    ids = ids or TokenIds()
    streams = Streams(scenario.seed)
    block_size = scenario.replica_specs()[0].kv_cache.block_size
    source = build_source(scenario.workload, streams, scenario.base_dir, block_size)
    if isinstance(source, ClosedLoopSource):
        source.draw_all()  # the replay sends them all: no chunk left to draw as it goes
    unit = unit_tokens(scenario.workload.prefix, block_size)
    seed = scenario.seed if prompt_seed is None else prompt_seed
    rng = Streams(seed).get("prompt_ids")  # (a stream of its own: none other draws from it)
    keys = getattr(source, "keys", None)
    prompts = []
    for i, n in enumerate(source.input_tokens.tolist()):
        fresh = rng.integers(ids.low, ids.high, size=n).tolist()
        if keys is not None:
            for u, key in enumerate(keys[i]):
                lo, hi = u * unit, min((u + 1) * unit, n)
                if lo >= n:
                    break
                shared = np.random.Generator(np.random.PCG64([seed, int(key) & _MASK]))
                fresh[lo:hi] = shared.integers(ids.low, ids.high, size=hi - lo).tolist()
        prompts.append(fresh)
    outputs = source.output_tokens.tolist()
    if isinstance(source, ClosedLoopSource):
        return Plan(
            prompts,
            outputs,
            None,
            min(scenario.workload.arrival.concurrency, len(prompts)),  # type: ignore[union-attr]
            source.think_time_s,
            source.stop_s,
        )
    return Plan(prompts, outputs, source.arrival_s.tolist())
