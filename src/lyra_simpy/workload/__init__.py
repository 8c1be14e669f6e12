"""Workloads: when requests arrive and how long their prompts and outputs are.

``ARRIVALS`` and ``LENGTHS`` map the YAML ``name`` of an arrival process or a length
distribution to its config class. :func:`build_source` turns a :class:`WorkloadConfig`
into the request source of a run, drawing from the named streams ``arrivals``,
``input_tokens``, ``output_tokens`` and ``trace_rows`` of the run's generator tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.errors import ScenarioError, TraceError
from lyra_simpy.rng import Streams
from lyra_simpy.workload.arrivals import (
    ArrivalConfig,
    ClosedLoopArrivals,
    TraceArrivals,
    open_loop_times,
    trace_times,
)
from lyra_simpy.workload.lengths import (
    EmpiricalLength,
    LengthConfig,
    LengthContext,
    MixtureLength,
    TraceLength,
    read,
    sample_lengths,
)
from lyra_simpy.workload.prefixes import (
    ConversationPrefix,
    NoPrefix,
    PrefixConfig,
    SystemPromptPrefix,
    TracePrefix,
    conversation_keys,
    system_prompt_keys,
    trace_keys,
)
from lyra_simpy.workload.rate import RateSchedule
from lyra_simpy.workload.source import ClosedLoopSource, Drawn, Ints, Keys, OpenLoopSource, Source
from lyra_simpy.workload.traces import Trace, TraceFormat


class WorkloadConfig(Closed):
    """Arrivals, lengths, and how many requests (or for how long)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival: ArrivalConfig
    input_tokens: LengthConfig
    output_tokens: LengthConfig
    num_requests: PositiveInt | None = None
    """Requests to send (with a ``trace`` arrival, or a ``closed_loop`` one with a
    ``path``: at most this many rows)."""
    duration_s: PositiveFloat | None = None
    """Send requests arriving before this time (with ``num_requests``: whichever first)."""
    prefix: PrefixConfig = Field(default_factory=NoPrefix)
    """Which prompts share prefixes (for the prefix cache); see
    :mod:`lyra_simpy.workload.prefixes`."""
    max_total_tokens: PositiveInt | None = None
    """Cap on input + output per request: longer requests are scaled down in proportion
    (both lengths × cap / total, floored, at least 1 each) — as a server's
    ``max_model_len`` bounds them. None: no cap."""
    rate_schedule: RateSchedule | None = None
    """The arrival rate's factor over time, step or linear (a load step, a burst, a
    daily ramp), applied to any open-loop arrival as a time warp that keeps the shape
    of its gaps (:mod:`~lyra_simpy.workload.rate`). None: the rate as configured."""
    request_path_ms: NonNegativeFloat = 0.0
    """What a request spends outside the engine, once: from the client's send to the
    engine taking it in (HTTP, the API server, tokenizing, the hand-off to the engine
    process) plus from the engine's token to the client reading it (detokenizing, the
    stream). Arrivals (the arrival process, a trace's times, a closed-loop client's
    sends) are the client's sends, the engine sees each request this much later, and
    TTFT and E2E count it: the records' ``arrival_s`` is the send. The two ways are
    folded into the way in; TPOT and the gaps between tokens, which it does not touch,
    are the same either way, and so is a closed-loop client's cycle (its next send
    follows the last token it read). Default 0: the client sits at the engine. A
    ``vllm`` profile measures it (``lyra-simpy profile``: the client's TTFT less the
    engine's own prefill time), as the profile's ``request_path_ms``."""
    request_path_cpu_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    """Share of ``request_path_ms`` that is work on the engine's own cores: each request
    reaching the engine while an iteration runs lengthens that iteration by this share
    of its path (one charge per request; an idle engine loses nothing). 0 (default): the
    API server and the client run elsewhere, as on a GPU server. 1: all of the path is
    CPU work on the cores the engine computes on — a CPU engine whose threads fill the
    host's cores beside its HTTP threads and the client (``llama-server -t 2`` on 2
    cores: the replayed runs' decode steps during which a request arrived took 0.06-0.30
    x the fit longer than the others, docs/VALIDATION-llamacpp.md items 13 and 18). A
    single engine only (a cluster is refused); iterations are not fused while it is on."""

    @model_validator(mode="after")
    def _bounded(self) -> WorkloadConfig:
        if (
            self.num_requests is None
            and self.duration_s is None
            and _trace_rows(self.arrival) is None
        ):
            raise ValueError("set num_requests or duration_s (or both)")
        if self.request_path_cpu_share > 0 and self.request_path_ms == 0:
            raise ValueError(
                f"request_path_cpu_share: got {self.request_path_cpu_share} with "
                "request_path_ms 0, must be used with a request path to charge"
            )
        if getattr(self.arrival, "exact_rate", False) and self.num_requests is None:
            raise ValueError("arrival.exact_rate needs num_requests")
        loop = self.arrival if isinstance(self.arrival, ClosedLoopArrivals) else None
        if loop is not None and self.rate_schedule is not None:
            raise ValueError(
                "rate_schedule: got a schedule with arrival closed_loop, must be used with "
                "an open-loop arrival (poisson, gamma, constant, trace): a closed loop has "
                "no arrival rate"
            )
        if loop is not None and self.num_requests is None and loop.path is None:
            raise ValueError(
                "closed_loop needs num_requests or a path (duration_s may stop it earlier)"
            )
        uses_trace = any(
            isinstance(d, TraceLength) for d in (self.input_tokens, self.output_tokens)
        )
        if uses_trace and _trace_rows(self.arrival) is None:
            raise ValueError(
                "length 'trace' needs arrival.name 'trace', or 'closed_loop' with a path"
            )
        if loop is not None and loop.path is not None and not uses_trace:
            raise ValueError(
                "arrival.path: a closed_loop trace gives the lengths: set input_tokens "
                "and/or output_tokens to {name: trace}"
            )
        if isinstance(self.prefix, TracePrefix) and not (
            isinstance(self.arrival, TraceArrivals)
            and self.arrival.format == "mooncake"
            and isinstance(self.input_tokens, TraceLength)
        ):
            raise ValueError(
                "prefix 'trace' needs a mooncake trace arrival with input_tokens 'trace' "
                "(the block ids describe the trace's own prompts)"
            )
        if not isinstance(self.prefix, NoPrefix) and self.max_total_tokens is not None:
            raise ValueError("max_total_tokens would cut shared prefixes: unset it with prefix")
        return self


def _trace_rows(arrival: Any) -> tuple[str, TraceFormat, int] | None:
    """(path, format, skip_rows) of the trace whose rows the arrival process sends in
    order (a ``trace`` arrival, or a ``closed_loop`` with a path), else None."""
    if isinstance(arrival, TraceArrivals):
        return arrival.path, arrival.format, arrival.skip_rows
    if isinstance(arrival, ClosedLoopArrivals) and arrival.path is not None:
        return arrival.path, arrival.format, arrival.skip_rows
    return None


def trace_files(cfg: WorkloadConfig) -> list[tuple[str, str, TraceFormat]]:
    """(field path, file, format) of every trace file the workload reads."""
    out: list[tuple[str, str, TraceFormat]] = []
    rows = _trace_rows(cfg.arrival)
    if rows is not None:
        out.append(("workload.arrival.path", rows[0], rows[1]))

    def walk(dist: Any, where: str) -> None:
        if isinstance(dist, EmpiricalLength):
            out.append((f"{where}.path", dist.path, dist.format))
        elif isinstance(dist, MixtureLength):
            for i, comp in enumerate(dist.components):
                walk(comp.dist, f"{where}.components[{i}].dist")

    walk(cfg.input_tokens, "workload.input_tokens")
    walk(cfg.output_tokens, "workload.output_tokens")
    return out


def check_files(cfg: WorkloadConfig, base_dir: Path) -> None:
    """Read every trace the workload names, so a missing or malformed file fails
    before anything is simulated (with the field path in the message)."""
    for where, path, fmt in trace_files(cfg):
        try:
            trace = read(path, fmt, base_dir)
        except TraceError as exc:
            raise ScenarioError(f"{where}: {exc}") from None
        rows = _trace_rows(cfg.arrival)
        if where == "workload.arrival.path" and rows is not None and rows[2] >= len(trace):
            raise ScenarioError(
                f"workload.arrival.skip_rows: got {rows[2]}, "
                f"must be < the trace's {len(trace)} rows"
            )


def _cap(inp: np.ndarray, out: np.ndarray, cap: int | None) -> tuple[np.ndarray, np.ndarray]:
    if cap is None:
        return inp, out
    total = inp + out
    over = total > cap
    if over.any():
        inp, out = inp.copy(), out.copy()
        inp[over] = np.maximum(inp[over] * cap // total[over], 1)
        out[over] = np.maximum(np.minimum(out[over] * cap // total[over], cap - inp[over]), 1)
    return inp, out


def _drawn_in_order(cfg: WorkloadConfig) -> bool:
    """Whether the first k requests' lengths (and prefixes) are the same however many
    requests one chunk draws: true of fixed, uniform, normal, lognormal and empirical
    lengths (numpy draws them one after another from their stream), not of a mixture
    (each component draws after every pick is made) nor of shared prefixes (the
    unlimited-cache hit-rate bound is taken over every drawn request)."""

    def ordered(dist: Any) -> bool:
        return not isinstance(dist, (MixtureLength, TraceLength))

    return (
        isinstance(cfg.prefix, NoPrefix)
        and ordered(cfg.input_tokens)
        and ordered(cfg.output_tokens)
    )


def build_source(
    cfg: WorkloadConfig,
    streams: Streams,
    base_dir: Path,
    block_size: int = 16,
    horizon_s: float | None = None,
    spare: int = 1,
) -> Source:
    """Draw the workload and return the source that feeds it to a replica
    (*block_size*: the KV block, the unit of synthetic shared prefixes).

    *horizon_s* is when the run stops (``simulation.until_s``): an open-loop workload
    then draws only the requests arriving by it and *spare* after it (what the replicas
    and the router may look at before the stop), so ``num_requests: 300000000`` with
    ``until_s: 0.01`` holds a handful of requests, not every one. Lengths and prefixes
    are drawn in chunks (:data:`~lyra_simpy.workload.source.CHUNK` requests), as far as
    the run reaches: a closed loop draws the next chunk when its clients reach it. The
    requests drawn are the first ones of the full draw, value for value: a chunk is
    drawn whole where its first requests would otherwise differ (see
    :func:`_drawn_in_order`)."""
    row_cache: dict[tuple[str, str], np.ndarray] = {}

    def rows(path: str, fmt: TraceFormat, n: int) -> tuple[Trace, np.ndarray]:
        trace = read(path, fmt, base_dir)
        key = (path, fmt)
        idx = row_cache.get(key)
        if idx is None or len(idx) < n:
            idx = streams.get("trace_rows").integers(0, len(trace), size=n)
            row_cache[key] = idx
        return trace, idx[:n]

    arrival = cfg.arrival
    n = cfg.num_requests
    warp = cfg.rate_schedule.warp() if cfg.rate_schedule is not None else None
    times: np.ndarray | None = None
    columns: Any = None  # field → the replayed trace rows' lengths, from the first
    hash_ids = None
    if isinstance(arrival, TraceArrivals):
        trace = read(arrival.path, arrival.format, base_dir)
        times = trace_times(arrival, trace.arrival_s, n)
        if warp is not None:
            times = warp.inverse(times)
        if cfg.duration_s is not None:
            times = times[times < cfg.duration_s]
        if n is not None:
            times = times[:n]
        skip = arrival.skip_rows

        def columns(field: str) -> np.ndarray:
            col = trace.input_tokens if field == "input" else trace.output_tokens
            return col[skip:]

        hash_ids = trace.hash_ids[skip:] if trace.hash_ids is not None else None

        n = len(times)
    elif isinstance(arrival, ClosedLoopArrivals) and arrival.path is not None:
        # The rows in trace order, as a trace arrival takes them; the loop times them.
        looped = read(arrival.path, arrival.format, base_dir)
        skip = arrival.skip_rows
        n = len(looped) - skip if n is None else min(n, len(looped) - skip)

        def columns(field: str) -> np.ndarray:
            col = looped.input_tokens if field == "input" else looped.output_tokens
            return col[skip:]

    elif not isinstance(arrival, ClosedLoopArrivals):
        rng = streams.get("arrivals")
        in_order = _drawn_in_order(cfg)
        total = None
        if horizon_s is not None and not in_order:
            # A chunk is drawn whole: how many requests the workload has decides how
            # big its last chunk is (counted from the same stream, nothing kept).
            total = n if cfg.duration_s is None else None
        if horizon_s is not None and not in_order and total is None:
            state = rng.bit_generator.state
            total = len(open_loop_times(arrival, rng, n, cfg.duration_s, warp=warp))
            rng.bit_generator.state = state
        times = open_loop_times(arrival, rng, n, cfg.duration_s, horizon_s, spare, warp)
        n = len(times) if total is None else total
    assert n is not None
    keys_so_far: dict[int, int] = {}  # a conversation's tokens, across chunks

    def draw_chunk(start: int, size: int) -> tuple[Ints, Ints, Keys | None]:
        row_cache.clear()

        def from_start(field: str) -> np.ndarray:
            rest: np.ndarray = columns(field)[start:]
            return rest

        def draw(dist: Any, stream: str, field: Any) -> np.ndarray:
            trace_lengths = None if columns is None else from_start
            ctx = LengthContext(streams.get(stream), base_dir, rows, trace_lengths, field)
            return sample_lengths(dist, ctx, size)

        inp = draw(cfg.input_tokens, "input_tokens", "input")
        out = draw(cfg.output_tokens, "output_tokens", "output")
        inp, out = _cap(inp, out, cfg.max_total_tokens)
        keys = None
        prefix = cfg.prefix
        if isinstance(prefix, SystemPromptPrefix):
            inp, keys = system_prompt_keys(prefix, streams.get("prefixes"), inp, block_size, start)
        elif isinstance(prefix, ConversationPrefix):
            inp, keys = conversation_keys(prefix, inp, out, block_size, start, keys_so_far)
        elif isinstance(prefix, TracePrefix):
            assert hash_ids is not None
            keys = trace_keys(list(hash_ids[start : start + size]), inp, prefix.unit_tokens)
        return inp, out, keys

    requests = Drawn(int(n), draw_chunk)
    path_s = cfg.request_path_ms / 1000.0
    if isinstance(arrival, ClosedLoopArrivals):
        return ClosedLoopSource(
            arrival.concurrency, arrival.think_time_s, requests, cfg.duration_s, path_s
        )
    assert times is not None
    requests.ensure(len(times))
    source = OpenLoopSource(
        times, requests.input_tokens, requests.output_tokens, requests.keys, path_s
    )
    source.warp = warp
    return source


__all__ = ["WorkloadConfig", "build_source", "check_files"]
