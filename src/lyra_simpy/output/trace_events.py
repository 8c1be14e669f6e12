"""A run as a timeline for Perfetto (ui.perfetto.dev) and chrome://tracing.

Writes the Chrome Trace Event Format (JSON object form, ``{"traceEvents": [...]}``;
timestamps in microseconds) from what :class:`~lyra_simpy.simulation.Results` holds —
nothing is recorded for it during the run, so it costs the simulation nothing:

- one process per replica (``pid`` = replica + 1) whose thread ``iterations`` holds every
  engine iteration as a complete slice (``ph: "X"``) named by its composition
  (``prefill``, ``decode``, ``mixed``) with ``batch_seqs``, ``prefill_tokens`` and
  ``decode_seqs`` as args, and two counters (``ph: "C"``): ``kv_blocks`` (in use) and
  ``waiting`` (queue length), emitted when they change;
- one process ``requests`` with a thread per request (``tid`` = ``request_id``):
  ``waiting`` from arrival to its first prompt chunk, one ``prefill`` slice per chunk
  an iteration computed (its ``tokens`` as an arg; chunked prefill shows every chunk),
  ``decode`` from the first token to the last, then an instant ``finished``; a
  preemption ends the slice under way with an instant ``preempted``, and the request
  waits again until its recompute's chunks (``recompute: true``); a rejected request
  is an instant ``rejected`` at its arrival with its ``reject_reason``. The chunks and
  preemptions come from the run's request log (``simulate(..., request_log=True)``,
  which ``--trace-events`` and ``output.trace_events`` switch on); results without one
  show a single ``prefill`` slice, the iteration that emitted the first token;
- in a disaggregated run, ``handoff_wait`` and ``kv_transfer`` slices on the request's
  thread between its first token and its decode, and a process ``kv link`` with each
  transfer as an async slice (transfers may overlap on the link).

A fused run records every iteration it advances (its time series equals a stepped
run's), so the trace of a fused run is byte-identical to the unfused one. Without a
time series (``simulation.timeseries: false``) there are no replica tracks and a
request's ``waiting`` slice runs to its first token.

The file is written as a stream of one event per line, formatted without building the
event list in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from lyra_simpy.simulation import Results

_US = 1_000_000.0


def _us(seconds: float) -> str:
    """Microseconds with nanosecond resolution, formatted the same everywhere."""
    return f"{seconds * _US:.3f}"


def _meta(pid: int, tid: int | None, what: str, name: str) -> str:
    where = f'"pid":{pid}' + (f',"tid":{tid}' if tid is not None else "")
    return f'{{"ph":"M","name":"{what}",{where},"args":{{"name":{json.dumps(name)}}}}}'


def _replica_count(res: Results) -> int:
    found = [0]
    for col in (res.timeseries.get("replica"), res.records.get("replica"),
                res.transfers.get("decode_replica")):  # fmt: skip
        if col is not None and len(col):
            found.append(int(np.max(col)) + 1)
    return max(found)


def _iteration_events(res: Results) -> Iterator[str]:
    ts = res.timeseries
    if not ts or not len(ts.get("start_s", ())):
        return
    replica = ts["replica"]
    for r in np.unique(replica).tolist():
        mine = replica == r
        pid = int(r) + 1
        cols = [ts[k][mine].tolist() for k in (
            "start_s", "end_s", "batch_seqs", "prefill_tokens", "decode_seqs", "kv_blocks",
            "waiting")]  # fmt: skip
        last_kv: int | None = None
        last_wait: int | None = None
        for start, end, batch, prefill, decode, kv, wait in zip(*cols, strict=True):
            kind = "mixed" if prefill and decode else ("prefill" if prefill else "decode")
            t = _us(start)
            yield (
                f'{{"ph":"X","name":"{kind}","pid":{pid},"tid":0,"ts":{t},'
                f'"dur":{(end - start) * _US:.3f},"args":{{"batch_seqs":{batch},'
                f'"prefill_tokens":{prefill},"decode_seqs":{decode}}}}}'
            )
            if kv != last_kv:
                yield f'{{"ph":"C","name":"kv_blocks","pid":{pid},"ts":{t},"args":{{"kv_blocks":{kv}}}}}'  # noqa: E501
                last_kv = kv
            if wait != last_wait:
                yield f'{{"ph":"C","name":"waiting","pid":{pid},"ts":{t},"args":{{"waiting":{wait}}}}}'  # noqa: E501
                last_wait = wait


def _prefill_start(res: Results) -> npt.NDArray[np.float64]:
    """Per request, the start of the iteration whose end emitted its first token on its
    (prefill) replica; NaN where unknown."""
    rec = res.records
    first = rec["first_token_s"]
    out = np.full(len(first), np.nan)
    ts = res.timeseries
    if not ts or not len(ts.get("end_s", ())):
        return out
    for r in np.unique(ts["replica"]).tolist():
        mine = ts["replica"] == r
        ends, starts = ts["end_s"][mine], ts["start_s"][mine]
        order = np.argsort(ends, kind="stable")
        ends, starts = ends[order], starts[order]
        who = np.flatnonzero((rec["replica"] == r) & ~np.isnan(first))
        idx = np.clip(np.searchsorted(ends, first[who]), 0, len(ends) - 1)
        hit = ends[idx] == first[who]
        out[who[hit]] = starts[idx[hit]]
    return out


def _slice(name: str, pid: int, tid: int, start: float, end: float, args: str = "") -> str:
    extra = f',"args":{{{args}}}' if args else ""
    return (
        f'{{"ph":"X","name":"{name}","pid":{pid},"tid":{tid},"ts":{_us(start)},'
        f'"dur":{(end - start) * _US:.3f}{extra}}}'
    )


def _by_request(log: dict[str, npt.NDArray[Any]], n: int) -> list[list[tuple[Any, ...]]]:
    """Each request's chunks ``("c", start, end, tokens, done)`` and preemptions
    ``("p", at)``, in the order they happened."""
    out: list[list[tuple[Any, ...]]] = [[] for _ in range(n)]
    cols = [log[k].tolist() for k in (
        "chunk_request", "chunk_start_s", "chunk_end_s", "chunk_tokens", "chunk_done")]  # fmt: skip
    for rid, start, end, tokens, done in zip(*cols, strict=True):
        if rid < n:
            out[rid].append(("c", start, end, tokens, done))
    for rid, at in zip(log["preempt_request"].tolist(), log["preempt_s"].tolist(), strict=True):
        if rid < n:
            out[rid].append(("p", at))
    for events in out:
        if len(events) > 1:
            # (a preemption happens at a scheduling point: before the chunks that start then)
            events.sort(key=lambda e: (e[1], e[0] == "c"))
    return out


def _logged(
    pid: int, rid: int, arrival: float, info: str, events: list[tuple[Any, ...]],
    decode_from: float, finish: float, end_s: float,
) -> Iterator[str]:  # fmt: skip
    """A request's thread from its log: waiting, each chunk, decoding, preemptions."""
    t, state, recompute, first = arrival, "waiting", False, True
    for event in events:
        at = event[1]
        if at > t:
            yield _slice(state, pid, rid, t, at, info if first else "")
            first = False
        if event[0] == "p":
            yield f'{{"ph":"i","name":"preempted","s":"t","pid":{pid},"tid":{rid},"ts":{_us(at)}}}'
            t, state, recompute = at, "waiting", True
            continue
        _, start, end, tokens, done = event
        args = f'"tokens":{tokens}' + (',"recompute":true' if recompute else "")
        yield _slice("prefill", pid, rid, start, end, f"{info},{args}" if first else args)
        first = False
        t, state = end, ("decode" if done else "waiting")
    stop = finish if finish == finish else end_s
    if state == "decode" and decode_from > t:  # (disaggregated: it decodes elsewhere)
        t = decode_from
    if stop > t:
        yield _slice(state, pid, rid, t, stop, info if first else "")


def _request_events(res: Results, pid: int, link_pid: int) -> Iterator[str]:
    rec = res.records
    n = len(rec["request_id"])
    prefill_start = _prefill_start(res).tolist()
    reasons = rec.get("reject_reason")
    reason = reasons.tolist() if reasons is not None else [None] * n
    handed: dict[int, tuple[int, float, float]] = {}
    if res.transfers:
        t = res.transfers
        for rid, dec, wait, xfer in zip(t["request_id"].tolist(), t["decode_replica"].tolist(),
                                        t["handoff_wait_ms"].tolist(),
                                        t["kv_transfer_ms"].tolist(), strict=True):  # fmt: skip
            handed[rid] = (dec, wait / 1000.0, xfer / 1000.0)
    end_s = float(res.engine.get("end_s", np.nanmax(rec["finish_s"], initial=0.0)))
    logs = _by_request(res.request_log, n) if res.request_log else None
    cols = [rec[k].tolist() for k in (
        "request_id", "arrival_s", "first_token_s", "finish_s", "status", "replica",
        "input_tokens", "output_tokens", "cached_tokens", "preemptions")]  # fmt: skip
    for row in zip(*cols, prefill_start, reason, strict=True):
        rid, arrival, first, finish, status, replica, n_in, n_out, cached, preempt = row[:10]
        pstart, why = row[10:]
        yield _meta(pid, rid, "thread_name", f"request {rid}")
        if status == "rejected":
            yield (
                f'{{"ph":"i","name":"rejected","s":"t","pid":{pid},"tid":{rid},'
                f'"ts":{_us(arrival)},"args":{{"reject_reason":{json.dumps(why)}}}}}'
            )
            continue
        info = (
            f'"replica":{replica},"input_tokens":{n_in},"output_tokens":{n_out},'
            f'"cached_tokens":{cached},"preemptions":{preempt},"status":"{status}"'
        )
        if logs is not None and rid not in handed:
            yield from _logged(pid, rid, arrival, info, logs[rid], first, finish, end_s)
            if finish == finish:
                yield (
                    f'{{"ph":"i","name":"finished","s":"t","pid":{pid},"tid":{rid},'
                    f'"ts":{_us(finish)}}}'
                )
            continue
        if first != first:  # NaN: never produced a token (unfinished)
            yield _slice("waiting", pid, rid, arrival, end_s, info)
            continue
        if pstart == pstart:
            yield _slice("waiting", pid, rid, arrival, pstart, info)
            yield _slice("prefill", pid, rid, pstart, first)
        else:
            yield _slice("waiting", pid, rid, arrival, first, info)
        decode_from = first
        if rid in handed:
            decode_replica, wait_s, xfer_s = handed[rid]
            sent = first + wait_s
            arrived = sent + xfer_s
            yield _slice("handoff_wait", pid, rid, first, sent)
            to = f'"decode_replica":{decode_replica}'
            yield _slice("kv_transfer", pid, rid, sent, arrived, to)
            yield (
                f'{{"ph":"b","cat":"kv_transfer","name":"request {rid}","id":{rid},'
                f'"pid":{link_pid},"tid":0,"ts":{_us(sent)}}}'
            )
            yield (
                f'{{"ph":"e","cat":"kv_transfer","name":"request {rid}","id":{rid},'
                f'"pid":{link_pid},"tid":0,"ts":{_us(arrived)}}}'
            )
            decode_from = arrived
        done = finish == finish
        yield _slice("decode", pid, rid, decode_from, finish if done else end_s)
        if done:
            yield (
                f'{{"ph":"i","name":"finished","s":"t","pid":{pid},"tid":{rid},"ts":{_us(finish)}}}'
            )


def trace_events(res: Results) -> Iterator[str]:
    """The trace's events of *res*, each one JSON object as a string (file order)."""
    replicas = _replica_count(res)
    req_pid = replicas + 1
    link_pid = replicas + 2
    for r in range(replicas):
        yield _meta(r + 1, None, "process_name", f"replica {r}")
        yield f'{{"ph":"M","name":"process_sort_index","pid":{r + 1},"args":{{"sort_index":{r}}}}}'
        yield _meta(r + 1, 0, "thread_name", "iterations")
    yield _meta(req_pid, None, "process_name", "requests")
    if res.transfers:
        yield _meta(link_pid, None, "process_name", "kv link")
    yield from _iteration_events(res)
    yield from _request_events(res, req_pid, link_pid)


def write_trace_events(res: Results, path: Path) -> int:
    """Write *res* as a Chrome Trace Event Format file at *path*; return the number of
    events written."""
    with path.open("w") as fh:
        return _write(fh, trace_events(res), res)


def _write(fh: IO[str], events: Iterator[str], res: Results) -> int:
    fh.write('{"displayTimeUnit":"ms","otherData":')
    fh.write(json.dumps({"scenario": res.scenario.name, "variant": res.scenario.label}))
    fh.write(',"traceEvents":[\n')
    n = 0
    batch: list[str] = []
    for event in events:
        batch.append(event)
        if len(batch) == 4096:
            fh.write((",\n" if n else "") + ",\n".join(batch))
            n += len(batch)
            batch.clear()
    if batch:
        fh.write((",\n" if n else "") + ",\n".join(batch))
        n += len(batch)
    fh.write("\n]}\n")
    return n


def load_trace_events(path: Path) -> dict[str, Any]:
    """Read a trace file back (tests, the explorer)."""
    with path.open() as fh:
        data: dict[str, Any] = json.load(fh)
    return data
