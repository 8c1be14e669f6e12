"""Replay a scenario's workload on a live endpoint and write what a simulation writes.

``lyra-simpy replay SCENARIO --endpoint URL`` sends the requests of
:func:`~lyra_simpy.live.workload.planned_requests` — open loop at their arrival times,
closed loop with the scenario's concurrency — streams every reply
(:mod:`~lyra_simpy.live.client`) and writes ``requests.jsonl``, ``summary.json``,
``itl.csv`` and ``manifest.json`` (DESIGN §4) into one folder, atomically, with the side
file ``tokens.jsonl``: per request that got a token, ``request_id``, ``chunk_s`` (when each
token-carrying chunk arrived, seconds on the clock of ``arrival_s``) and
``chunk_tokens`` (tokens per chunk; null when the count came from ``usage``), from
which ``calibrate --from-runs`` rebuilds engine steps
(:mod:`~lyra_simpy.calibration.runs`).

Bounds: *timeout_s* per request, *time_limit_s* for the whole run, at most
*max_in_flight* requests at once (an open-loop request waiting for a free place is sent
late, and its ``arrival_s`` is when it was sent). A failed request ends ``unfinished``
with an extra ``error`` key (a stream with no countable token too: ``no tokens ...``);
a request whose count came from ``usage.completion_tokens`` because the stream's chunks
disagreed has ``counted_by: usage`` and ``stream_tokens`` (and no ITLs: see
:mod:`~lyra_simpy.live.client`); the manifest's ``token_counting`` says how many
requests were counted each way. A token count that differs from the one asked for is kept
(``output_tokens`` is what the server produced) with the asked count as the extra key
``requested_output_tokens`` (``requested_input_tokens`` likewise). Open loop: the extra
key ``send_late_ms`` says how late the client sent a request (a loaded client CPU).
When the time limit or Ctrl-C stops the run, the requests in flight end ``unfinished``
(``error``: ``stopped``), requests not yet sent are not arrivals, and the manifest says
``complete: false``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, NonNegativeInt, PositiveFloat, PositiveInt

from lyra_simpy.calibration.streams import TOKENS_FILE
from lyra_simpy.engine.request import RECORD_FIELDS
from lyra_simpy.live.client import (
    Api,
    Outcome,
    check_endpoint,
    engine_info,
    new_client,
    send,
)
from lyra_simpy.live.limits import (
    Limits,
    check_lengths,
    endpoint_limits,
    token_range,
    with_vocab,
)
from lyra_simpy.live.workload import Plan, TokenIds, planned_requests
from lyra_simpy.metrics.io import atomic_dir, write_itl_csv, write_json, write_jsonl
from lyra_simpy.metrics.summary import summarize
from lyra_simpy.scenario import Scenario


class ReplayConfig(BaseModel):
    """How to reach the endpoint and how long to wait for it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str
    api: Api = "openai"
    timeout_s: PositiveFloat = 60.0
    """Per request, from send to the end of its stream."""
    time_limit_s: PositiveFloat = 1800.0
    """Whole run: requests in flight then end ``unfinished``."""
    max_in_flight: PositiveInt = 256
    token_ids: TokenIds | None = None
    """Prompt id range (None: the default, fitted to the vocabulary; :mod:`.limits`)."""
    vocab_size: PositiveInt | None = None
    """The model's vocabulary size, when the endpoint does not report it (vLLM)."""
    extra_body: dict[str, Any] = {}
    """Extra JSON fields for every request (e.g. ``{"cache_prompt": false}``)."""
    prompt_seed: NonNegativeInt | None = None
    """Seed of the prompts' token ids (None: the scenario's, the same ids every replay);
    the lengths, times and outputs stay the scenario's. Give each repeat its own against
    a server that keeps the prompts it has seen (llama-server's prompt cache in RAM:
    :mod:`~lyra_simpy.live.workload`)."""


@dataclass
class _Run:
    plan: Plan
    limits: Limits = field(default_factory=Limits)
    token_ids: TokenIds = field(default_factory=TokenIds)
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    stopped: str | None = None


async def _drive(run: _Run, cfg: ReplayConfig, t0: float) -> None:
    plan = run.plan
    gate = asyncio.Semaphore(cfg.max_in_flight)
    url = cfg.endpoint.rstrip("/")
    extra = run.limits.body(cfg.extra_body)
    client = new_client()

    async def one(i: int) -> None:
        async with gate:
            task = send(
                client,
                url,
                cfg.api,
                plan.prompts[i],
                plan.output_tokens[i],
                cfg.timeout_s,
                t0,
                extra,
            )
            placeholder = Outcome(sent_s=time.perf_counter() - t0, error="stopped")
            run.outcomes[i] = placeholder
            run.outcomes[i] = await task

    async def open_loop() -> None:
        assert plan.arrival_s is not None
        tasks = []
        try:
            for i, at_s in enumerate(plan.arrival_s):
                delay = at_s - (time.perf_counter() - t0)
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        finally:  # stopped: end the requests in flight (their records say so)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def closed_loop() -> None:
        counter = iter(range(len(plan.prompts)))

        async def client_loop() -> None:
            for i in counter:
                if plan.stop_s is not None and time.perf_counter() - t0 >= plan.stop_s:
                    return
                await one(i)
                if plan.think_time_s:
                    await asyncio.sleep(plan.think_time_s)

        await asyncio.gather(*(client_loop() for _ in range(plan.concurrency)))

    try:
        body = open_loop() if plan.arrival_s is not None else closed_loop()
        await asyncio.wait_for(body, cfg.time_limit_s)
    except asyncio.TimeoutError:
        run.stopped = f"time limit {cfg.time_limit_s:g} s"
    except asyncio.CancelledError:
        run.stopped = "interrupted"
        raise
    finally:
        await client.aclose()


def records(run: _Run) -> tuple[list[dict[str, Any]], list[float]]:
    """Per-request records (JSONL contract plus extra keys) and the pooled ITLs (s)."""
    rows: list[dict[str, Any]] = []
    gaps: list[float] = []
    plan = run.plan
    for i in sorted(run.outcomes):
        o = run.outcomes[i]
        asked_in, asked_out = len(plan.prompts[i]), plan.output_tokens[i]
        if o.error is None and not o.chunk_s:  # the client settles this; never trust it
            o.error = "no tokens"
        ok = o.error is None
        first = o.chunk_s[0] if o.chunk_s else None
        # The last token's arrival ends the request, as the simulator's finish_s does.
        finish = o.chunk_s[-1] if ok else None
        out_tok = o.tokens
        row: dict[str, Any] = {
            "request_id": i,
            "arrival_s": o.sent_s,
            "input_tokens": o.reported_input_tokens or asked_in,
            "output_tokens": out_tok if ok else asked_out,
            "cached_tokens": o.cached_tokens,
            "first_token_s": first,
            "finish_s": finish,
            "ttft_ms": (first - o.sent_s) * 1000.0 if first is not None else None,
            "tpot_ms": None,
            "e2el_ms": (finish - o.sent_s) * 1000.0 if finish is not None else None,
            "status": "ok" if ok else "unfinished",
            "reject_reason": None,
            "replica": 0,
            "preemptions": 0,
        }
        if ok and out_tok > 1 and first is not None and finish is not None:
            row["tpot_ms"] = (finish - first) * 1000.0 / (out_tok - 1)
        if ok and o.itl_known:
            gaps.extend(np.diff(o.chunk_s).tolist())
        if ok and o.counted_by == "usage":  # the stream disagreed with usage (client.py)
            row["counted_by"] = "usage"
            row["stream_tokens"] = o.stream_tokens
        if not ok:
            row["error"] = o.error
            row["received_tokens"] = o.tokens
        if ok and out_tok != asked_out:
            row["requested_output_tokens"] = asked_out
        if row["input_tokens"] != asked_in:
            row["requested_input_tokens"] = asked_in
        if plan.arrival_s is not None:  # how late the client sent it (CPU contention)
            row["send_late_ms"] = (o.sent_s - plan.arrival_s[i]) * 1000.0
        if o.timings is not None:
            row["engine_timings"] = o.timings
        rows.append(row)
    return rows, gaps


def token_rows(run: _Run) -> list[dict[str, Any]]:
    """Per request with a token: its chunks' arrival times and token counts."""
    return [
        {
            "request_id": i,
            "chunk_s": o.chunk_s,
            "chunk_tokens": o.chunk_tokens,
        }
        for i, o in sorted(run.outcomes.items())
        if o.chunk_s
    ]


def counting(run: _Run) -> dict[str, int]:
    """How many requests were counted each way (``Outcome.counted_by``)."""
    ways: dict[str, int] = {}
    for o in run.outcomes.values():
        key = o.counted_by or "none"
        ways[key] = ways.get(key, 0) + 1
    return dict(sorted(ways.items()))


def _columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    cols: dict[str, np.ndarray] = {}
    for name in RECORD_FIELDS:
        values = [r[name] for r in rows]
        if name in ("status", "reject_reason"):
            cols[name] = np.array(values, dtype=object)
        elif name in ("request_id", "input_tokens", "output_tokens", "cached_tokens"):
            cols[name] = np.array(values, dtype=np.int64)
        elif name in ("replica", "preemptions"):
            cols[name] = np.zeros(len(values), dtype=np.int64)
        else:
            cols[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    return cols


def summary_of(rows: list[dict[str, Any]], gaps_s: list[float], scenario: Scenario) -> Any:
    """The summary JSON of replayed *rows* (the simulator's own :func:`summarize`)."""
    gaps = np.asarray(gaps_s, dtype=np.float64)
    itl = (gaps, np.ones(len(gaps), dtype=np.int64))
    return summarize(_columns(rows), itl, scenario.slo.model_dump())


def write_run(
    out: Path,
    run: _Run,
    scenario: Scenario,
    cfg: ReplayConfig,
    props: dict[str, Any],
    source_file: str | None,
) -> dict[str, Any]:
    """Write the run's four files into *out* atomically; return the summary."""
    from lyra_simpy.output.provenance import manifest

    rows, gaps = records(run)
    summary = summary_of(rows, gaps, scenario)
    tokens = token_rows(run)
    info = manifest(scenario, engine_info(cfg.endpoint, cfg.api, props), source_file)
    info["cost_model"] = "none: measured on a live endpoint (see engine)"
    info["complete"] = run.stopped is None
    info["stopped"] = run.stopped
    info["planned_requests"] = len(run.plan.prompts)
    info["token_counting"] = counting(run)
    info["token_ids"] = {
        "low": run.token_ids.low,
        "high": run.token_ids.high,
        "vocab_size": run.limits.vocab_size,
        "vocab_source": run.limits.vocab_source,
        "max_model_len": run.limits.max_model_len,
        "served_model": run.limits.model,
        "prompt_seed": cfg.prompt_seed,
    }
    with atomic_dir(out) as tmp:
        write_jsonl(tmp / "requests.jsonl", rows)
        write_json(tmp / "summary.json", summary)
        gap_arr = np.asarray(gaps, dtype=np.float64)
        write_itl_csv(tmp / "itl.csv", gap_arr, np.ones(len(gap_arr), dtype=np.int64))
        write_json(tmp / "manifest.json", info)
        write_jsonl(tmp / TOKENS_FILE, tokens)
    return dict(summary)


def replay(
    scenario: Scenario, cfg: ReplayConfig, out: Path, source_file: str | None = None
) -> tuple[dict[str, Any], bool]:
    """Replay *scenario* on the endpoint, write *out*; return (summary, complete).

    An unreachable endpoint, prompt ids outside the model's vocabulary or a request
    longer than its context raise :class:`~lyra_simpy.errors.LyraError` before any
    request is sent (:mod:`.limits`). Ctrl-C writes what was gathered, then raises
    KeyboardInterrupt."""
    props = check_endpoint(cfg.endpoint.rstrip("/"))
    limits = with_vocab(endpoint_limits(cfg.endpoint), cfg.vocab_size)
    ids = token_range(cfg.token_ids, limits)
    run = _Run(planned_requests(scenario, ids, cfg.prompt_seed), limits, ids)
    check_lengths(run.plan, limits)
    t0 = time.perf_counter()
    try:
        asyncio.run(_drive(run, cfg, t0))
    except KeyboardInterrupt:
        run.stopped = "interrupted"
        write_run(out, run, scenario, cfg, props, source_file)
        raise
    return write_run(out, run, scenario, cfg, props, source_file), run.stopped is None
