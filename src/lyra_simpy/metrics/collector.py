"""Passive recorder of a run: per-request outcomes, per-iteration series, pooled ITL.

Nothing here is per token. Per request: a few preallocated NumPy columns filled when the
request ends. Per iteration: times, decoding sequences and KV blocks in compact ``array``
columns (a fused run of *k* iterations appends *k* rows at once); the columns that
rarely change (replica, prefill work, queue length) are kept run-length encoded.
Inter-token latencies are kept as (value, weight) pairs: in a decode iteration every
sequence that also emitted in the previous iteration sees the same gap, so one pair
stands for all of them; the summary computes exact weighted percentiles from them.
"""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from lyra_simpy.engine.request import (
    FAIL_REASONS,
    REJECT_REASONS,
    FailReason,
    RejectReason,
    Request,
)

STATUS_CODES = ("ok", "rejected", "unfinished", "failed")
OK, REJECTED, UNFINISHED, FAILED = 0, 1, 2, 3
REASON_CODES: tuple[str | None, ...] = (None, *REJECT_REASONS, *FAIL_REASONS)
"""``reject_reason`` by code: 0 is none (served or unfinished); a refusal's reason, then a
failure's."""
_REASON_CODE = {name: i for i, name in enumerate(REASON_CODES)}

#: Columns of the per-iteration time series (one row per engine iteration).
SERIES_FIELDS = (
    "replica",
    "start_s",
    "end_s",
    "batch_seqs",
    "prefill_tokens",
    "decode_seqs",
    "kv_blocks",
    "waiting",
)


_RLE_FIELDS = ("replica", "prefill_seqs", "prefill_tokens", "waiting")


class _Runs:
    """Run-length encoded rows of the rarely-changing columns (``_RLE_FIELDS``)."""

    __slots__ = ("counts", "last", "rows")

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int]] = []
        self.counts: list[int] = []
        self.last: tuple[int, int, int, int] | None = None

    def add(self, row: tuple[int, int, int, int], count: int) -> None:
        if row == self.last:
            self.counts[-1] += count
        else:
            self.rows.append(row)
            self.counts.append(count)
            self.last = row

    def expand(self) -> dict[str, npt.NDArray[np.int64]]:
        rows = np.array(self.rows, dtype=np.int64).reshape(-1, len(_RLE_FIELDS))
        counts = np.array(self.counts, dtype=np.int64)
        return {name: np.repeat(rows[:, i], counts) for i, name in enumerate(_RLE_FIELDS)}


class RequestLog:
    """What happened to each request between its timestamps, for timelines
    (:mod:`lyra_simpy.output.trace_events`): every prompt chunk an iteration computed and
    every preemption. Kept only when asked for (``Collector.log``): the engine's cost is one
    check per iteration when it is off, and nothing per token either way."""

    def __init__(self) -> None:
        self.chunk_request: array[int] = array("q")
        self.chunk_start_s: array[float] = array("d")
        self.chunk_end_s: array[float] = array("d")
        self.chunk_tokens: array[int] = array("q")
        self.chunk_done: array[int] = array("b")
        """1: the chunk completed the request's prompt (or its recompute)."""
        self.preempt_request: array[int] = array("q")
        self.preempt_s: array[float] = array("d")

    def chunk(self, req: Request, start_s: float, end_s: float, tokens: int, done: bool) -> None:
        self.chunk_request.append(req.index)
        self.chunk_start_s.append(start_s)
        self.chunk_end_s.append(end_s)
        self.chunk_tokens.append(tokens)
        self.chunk_done.append(done)

    def preempt(self, req: Request, now_s: float) -> None:
        self.preempt_request.append(req.index)
        self.preempt_s.append(now_s)

    def arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """The log as columns (``chunk_*`` one row per chunk, ``preempt_*`` one per
        preemption, each in the order they happened)."""
        return {
            "chunk_request": np.frombuffer(self.chunk_request, dtype=np.int64),
            "chunk_start_s": np.frombuffer(self.chunk_start_s, dtype=np.float64),
            "chunk_end_s": np.frombuffer(self.chunk_end_s, dtype=np.float64),
            "chunk_tokens": np.frombuffer(self.chunk_tokens, dtype=np.int64),
            "chunk_done": np.frombuffer(self.chunk_done, dtype=np.int8).astype(bool),
            "preempt_request": np.frombuffer(self.preempt_request, dtype=np.int64),
            "preempt_s": np.frombuffer(self.preempt_s, dtype=np.float64),
        }


class Collector:
    """Records what the engine reports; *n* is the number of requests in the workload."""

    def __init__(self, n: int, record_series: bool = True) -> None:
        self.n = n
        self.record_series = record_series
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.cached_tokens = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, UNFINISHED, dtype=np.int8)
        self.reason = np.zeros(n, dtype=np.int8)
        """Index into ``REASON_CODES`` (0: not rejected)."""
        self.replica = np.full(n, -1, dtype=np.int32)
        self.retries = np.zeros(n, dtype=np.int32)
        """Times each request was sent to another replica after its replica failed."""
        self.start_s: array[float] = array("d")
        self.end_s: array[float] = array("d")
        self.decode_seqs: array[int] = array("q")
        self.kv_blocks: array[int] = array("q")
        self.runs = _Runs()
        self.itl_values: array[float] = array("d")
        self.itl_weights: array[int] = array("q")
        self.iterations = 0
        self.log: RequestLog | None = None
        """Prompt chunks and preemptions per request (None: not kept)."""

    _COLUMNS = (
        ("first_token_s", np.nan),
        ("finish_s", np.nan),
        ("cached_tokens", 0),
        ("preemptions", 0),
        ("status", UNFINISHED),
        ("reason", 0),
        ("replica", -1),
        ("retries", 0),
    )

    def grow(self, n: int) -> None:
        """Room for *n* requests (a closed loop draws its requests as it reaches them)."""
        more = n - self.n
        if more <= 0:
            return
        for name, fill in self._COLUMNS:
            col = getattr(self, name)
            setattr(self, name, np.concatenate((col, np.full(more, fill, dtype=col.dtype))))
        self.n = n

    # -- requests -------------------------------------------------------------------
    def assign(self, req: Request, replica: int) -> None:
        self.replica[req.index] = replica

    def finish(self, req: Request, now_s: float) -> None:
        i = req.index
        self.first_token_s[i] = req.first_token_s
        self.finish_s[i] = now_s
        self.cached_tokens[i] = req.cached_tokens
        self.preemptions[i] = req.preemptions
        self.status[i] = OK

    def reject(self, req: Request, reason: RejectReason) -> None:
        self.status[req.index] = REJECTED
        self.reason[req.index] = _REASON_CODE[reason]

    def fail(self, req: Request, reason: FailReason) -> None:
        """*req* ends ``failed``; it keeps the first token it streamed, if any."""
        i = req.index
        self.status[i] = FAILED
        self.reason[i] = _REASON_CODE[reason]
        if req.first_token_s is not None:
            self.first_token_s[i] = req.first_token_s
        self.cached_tokens[i] = req.cached_tokens
        self.preemptions[i] = req.preemptions

    def retry(self, req: Request) -> None:
        """*req*'s replica failed and it is sent again (counted)."""
        self.retries[req.index] += 1

    def leave_unfinished(self, req: Request) -> None:
        """A request still in the system when the run stopped keeps what it reached."""
        i = req.index
        if req.first_token_s is not None:
            self.first_token_s[i] = req.first_token_s
        self.cached_tokens[i] = req.cached_tokens
        self.preemptions[i] = req.preemptions

    # -- iterations -----------------------------------------------------------------
    def iteration(
        self,
        replica: int,
        start_s: float,
        end_s: float,
        batch_seqs: int,
        prefill_tokens: int,
        decode_seqs: int,
        kv_blocks: int,
        waiting: int,
    ) -> None:
        self.iterations += 1
        if not self.record_series:
            return
        self.start_s.append(start_s)
        self.end_s.append(end_s)
        self.decode_seqs.append(decode_seqs)
        self.kv_blocks.append(kv_blocks)
        self.runs.add((replica, batch_seqs - decode_seqs, prefill_tokens, waiting), 1)

    def span(
        self,
        replica: int,
        ends_s: list[float],
        start_s: float,
        seqs: list[int],
        kv_blocks: list[int],
        waiting: int,
    ) -> None:
        """*k* decode-only iterations ending at *ends_s*, the first starting at *start_s*."""
        k = len(ends_s)
        self.iterations += k
        if not self.record_series:
            return
        starts = self.start_s
        starts.append(start_s)
        starts.fromlist(ends_s[:-1])
        self.end_s.fromlist(ends_s)
        self.decode_seqs.fromlist(seqs)
        self.kv_blocks.fromlist(kv_blocks)
        self.runs.add((replica, 0, 0, waiting), k)

    def itl(self, value_s: float, weight: int) -> None:
        self.itl_values.append(value_s)
        self.itl_weights.append(weight)

    def itl_pairs(self, values_s: list[float], weights: list[int]) -> None:
        """Gaps *values_s*, each seen by the matching number of sequences."""
        self.itl_values.fromlist(values_s)
        self.itl_weights.fromlist(weights)

    def series_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """The per-iteration columns, ordered by start time then replica (replicas of a
        cluster commit their rows in whatever order their events run)."""
        decode = np.frombuffer(self.decode_seqs, dtype=np.int64)
        runs = self.runs.expand()
        cols: dict[str, npt.NDArray[np.generic]] = {
            "replica": runs["replica"],
            "start_s": np.frombuffer(self.start_s, dtype=np.float64),
            "end_s": np.frombuffer(self.end_s, dtype=np.float64),
            "batch_seqs": decode + runs["prefill_seqs"],
            "prefill_tokens": runs["prefill_tokens"],
            "decode_seqs": decode,
            "kv_blocks": np.frombuffer(self.kv_blocks, dtype=np.int64),
            "waiting": runs["waiting"],
        }
        replica = cols["replica"]
        if len(replica) and replica.max() > 0:
            order = np.lexsort((replica, cols["start_s"]))
            cols = {name: col[order] for name, col in cols.items()}
        return cols
