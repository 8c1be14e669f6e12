"""Passive recorder of a run: per-request outcomes, per-iteration series, pooled ITL.

Nothing here is per token. Per request: a few preallocated NumPy columns filled when the
request ends. Per iteration: one row in compact ``array`` columns (a fused span of *k*
iterations appends *k* rows at once from NumPy). Inter-token latencies are kept as
(value, weight) pairs: in a decode iteration every sequence that also emitted in the
previous iteration sees the same gap, so one pair stands for all of them; the summary
computes exact weighted percentiles from these pairs.
"""

from __future__ import annotations

from array import array

import numpy as np
import numpy.typing as npt

from lyra_simpy.request import Request

STATUS_CODES = ("ok", "rejected", "unfinished")
OK, REJECTED, UNFINISHED = 0, 1, 2

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
        self.replica = np.full(n, -1, dtype=np.int32)
        self.times: dict[str, array[float]] = {"start_s": array("d"), "end_s": array("d")}
        self.counts: dict[str, array[int]] = {
            name: array("q") for name in SERIES_FIELDS if not name.endswith("_s")
        }
        self.itl_values: array[float] = array("d")
        self.itl_weights: array[int] = array("q")
        self.iterations = 0

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

    def reject(self, req: Request) -> None:
        self.status[req.index] = REJECTED

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
        s = self.counts
        self.times["start_s"].append(start_s)
        self.times["end_s"].append(end_s)
        s["replica"].append(replica)
        s["batch_seqs"].append(batch_seqs)
        s["prefill_tokens"].append(prefill_tokens)
        s["decode_seqs"].append(decode_seqs)
        s["kv_blocks"].append(kv_blocks)
        s["waiting"].append(waiting)

    def span(
        self,
        replica: int,
        ends_s: list[float],
        start_s: float,
        seqs: list[int],
        kv_blocks: list[int],
        waiting: int,
    ) -> None:
        """*k* decode-only iterations ending at *ends_s*, the first starting at *start_s*
        (Python lists: spans are short, and ``array`` takes lists at C speed)."""
        k = len(ends_s)
        self.iterations += k
        if not self.record_series:
            return
        times, counts = self.times, self.counts
        starts = times["start_s"]
        starts.append(start_s)
        starts.fromlist(ends_s[:-1])
        times["end_s"].fromlist(ends_s)
        counts["replica"].fromlist([replica] * k)
        counts["batch_seqs"].fromlist(seqs)
        counts["decode_seqs"].fromlist(seqs)
        counts["prefill_tokens"].fromlist([0] * k)
        counts["kv_blocks"].fromlist(kv_blocks)
        counts["waiting"].fromlist([waiting] * k)

    def itl(self, value_s: float, weight: int) -> None:
        self.itl_values.append(value_s)
        self.itl_weights.append(weight)

    def itl_pairs(self, values_s: list[float], weights: list[int]) -> None:
        """Gaps *values_s*, each seen by the matching number of sequences."""
        self.itl_values.fromlist(values_s)
        self.itl_weights.fromlist(weights)

    def series_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        out: dict[str, npt.NDArray[np.generic]] = {}
        for name in SERIES_FIELDS:
            if name in self.times:
                out[name] = np.frombuffer(self.times[name], dtype=np.float64)
            else:
                out[name] = np.frombuffer(self.counts[name], dtype=np.int64)
        return out
