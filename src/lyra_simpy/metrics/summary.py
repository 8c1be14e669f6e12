"""The summary of a run, named as vLLM's serving benchmark names its results.

Definitions (DESIGN §4; vLLM ``benchmarks/serve``): ``duration`` = last finish − first
arrival; throughputs = counts / duration; TPOT = (e2el − ttft) / (output_tokens − 1) over
completed requests with more than one output token; ITL = gaps between consecutive
token-carrying chunks of a request, pooled over all requests (kept as weighted pairs,
see :mod:`~lyra_simpy.metrics.collector`); percentiles use NumPy's default (linear)
interpolation and std the population std, as vLLM does. A request is *good* when it
completed and met every SLO set; ``slo_attainment`` is good / all arrivals (a rejected
or unfinished request misses). Without SLOs every completed request is good.
``rejection_rate`` (not a vLLM name) is rejected / all arrivals; ``rejected_<reason>``
counts the rejections of each ``reject_reason`` (:data:`~lyra_simpy.engine.request.REJECT_REASONS`;
every reason always present, 0 when none, so the summary stays flat and every run has
the same keys), and ``unfinished`` the requests the run's end cut off. ``failed`` counts
the requests a replica failure or the lack of a serving replica ended
(:mod:`lyra_simpy.processes`), ``failed_<reason>`` each of
:data:`~lyra_simpy.engine.request.FAIL_REASONS` (always present, 0 when none); a failed
request misses every SLO.

A statistic over nothing is None (``null`` in JSON, "—" in tables), never 0: the
latency statistics of a run that completed no request (TPOT: none with more than one
output token), throughputs of a run of zero duration, ``slo_attainment`` and
``rejection_rate`` without arrivals, ``prefix_cache_hit_rate`` without prompt tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from lyra_simpy.engine.request import FAIL_REASONS, REJECT_REASONS

PERCENTILES = (("median", 50.0), ("p90", 90.0), ("p99", 99.0))


def weighted_percentiles(
    values: npt.NDArray[np.float64], weights: npt.NDArray[np.int64], qs: tuple[float, ...]
) -> list[float]:
    """``np.percentile(np.repeat(values, weights), q)`` for each *q*, without expanding
    the pairs (one sort for all of them)."""
    if len(values) > 1 and not bool(np.all(values[1:] >= values[:-1])):
        order = np.argsort(values, kind="stable")
        values, weights = values[order], weights[order]
        del order
    v = values
    cum = np.cumsum(weights)
    total = int(cum[-1])
    out = []
    for q in qs:
        pos = q / 100.0 * (total - 1)
        lo = int(np.floor(pos))
        hi = min(lo + 1, total - 1)
        v_lo = v[np.searchsorted(cum, lo, side="right")]
        v_hi = v[np.searchsorted(cum, hi, side="right")]
        frac = pos - lo
        out.append(float(v_lo + (v_hi - v_lo) * frac) if frac else float(v_lo))
    return out


def weighted_percentile(
    values: npt.NDArray[np.float64], weights: npt.NDArray[np.int64], q: float
) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` without expanding the pairs."""
    return weighted_percentiles(values, weights, (q,))[0]


def _stats(
    name: str, values_ms: npt.NDArray[np.float64], weights: npt.NDArray[np.int64] | None = None
) -> dict[str, float | None]:
    keys = [f"{stat}_{name}_ms" for stat in ("mean", "median", "std", "p90", "p99")]
    if weights is None:
        weights = np.ones(len(values_ms), dtype=np.int64)
    keep = weights > 0
    if not keep.all():  # (a copy only when some weight is 0: ITL pairs hold millions)
        values_ms, weights = values_ms[keep], weights[keep]
    del keep
    if len(values_ms) == 0:
        return dict.fromkeys(keys, None)
    # Sums in a fixed order (NumPy's pairwise sum of the products), never ``np.dot``: a
    # BLAS dot product sums in an order that depends on its thread count and kernel, so
    # the last digits would move between an in-process run and a Dask worker
    # (OPENBLAS_NUM_THREADS=1).
    total = float(weights.sum())
    mean = float(np.sum(values_ms * weights) / total)
    dev = values_ms - mean
    np.square(dev, out=dev)
    dev *= weights
    std = float(np.sqrt(np.sum(dev) / total))
    del dev
    median, p90, p99 = weighted_percentiles(values_ms, weights, tuple(q for _, q in PERCENTILES))
    # vLLM's order: mean, median, std, p90, p99.
    return dict(zip(keys, (mean, median, std, p90, p99), strict=True))


def good_mask(
    records: dict[str, npt.NDArray[Any]], slo: dict[str, float | None]
) -> npt.NDArray[np.bool_]:
    """Requests that completed and met every SLO that is set."""
    ok = records["status"] == "ok"
    for key in ("ttft_ms", "tpot_ms", "e2el_ms"):
        limit = slo.get(key)
        if limit is not None:
            vals = np.nan_to_num(records[key], nan=0.0)
            ok &= vals <= limit
    return np.asarray(ok, dtype=np.bool_)


def summarize(
    records: dict[str, npt.NDArray[Any]],
    itl_s: tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]],
    slo: dict[str, float | None],
) -> dict[str, Any]:
    """The summary dict of one run from its request records and ITL pairs."""
    status = records["status"]
    done = status == "ok"
    n_arrivals = len(status)
    if n_arrivals:
        first_arrival = float(np.min(records["arrival_s"]))
        last_finish = float(np.nanmax(records["finish_s"])) if done.any() else first_arrival
        duration = max(last_finish - first_arrival, 0.0)
    else:
        duration = 0.0
    out_tok = records["output_tokens"][done]
    in_tok = records["input_tokens"][done]
    good = good_mask(records, slo)

    def per_s(count: Any) -> float | None:
        return float(count) / duration if duration > 0 else None

    summary: dict[str, Any] = {
        "duration": duration,
        "completed": int(done.sum()),
        "rejected": int((status == "rejected").sum()),
        **rejected_by_reason(records),
        "unfinished": int((status == "unfinished").sum()),
        "failed": int((status == "failed").sum()),
        **failed_by_reason(records),
        "total_input_tokens": int(in_tok.sum()),
        "total_output_tokens": int(out_tok.sum()),
        "request_throughput": per_s(done.sum()),
        "output_throughput": per_s(out_tok.sum()),
        "total_token_throughput": per_s(out_tok.sum() + in_tok.sum()),
        "request_goodput": per_s(good.sum()),
        "goodput_token_throughput": per_s(records["output_tokens"][good].sum()),
        "slo_attainment": float(good.sum() / n_arrivals) if n_arrivals else None,
    }
    summary.update(_stats("ttft", records["ttft_ms"][done]))
    multi = done & (records["output_tokens"] > 1)
    summary.update(_stats("tpot", records["tpot_ms"][multi]))
    values, weights = itl_s
    summary.update(_stats("itl", values * 1000.0, weights))
    summary.update(_stats("e2el", records["e2el_ms"][done]))
    summary["total_preemptions"] = int(records["preemptions"].sum())
    # Prefix cache: prompt tokens served from it (vLLM's prompt_tokens_details), over
    # the prompt tokens of the completed requests.
    cached_col = records.get("cached_tokens")
    cached = int(cached_col[done].sum()) if cached_col is not None else 0
    summary["total_cached_tokens"] = cached
    summary["prefix_cache_hit_rate"] = cached / int(in_tok.sum()) if in_tok.sum() else None
    summary["rejection_rate"] = summary["rejected"] / n_arrivals if n_arrivals else None
    return summary


def failure_summary(
    records: dict[str, npt.NDArray[Any]],
    retries: npt.NDArray[np.int32],
    slo: dict[str, float | None],
    duration: float,
) -> dict[str, Any]:
    """``retried``: times requests were routed again after their replica failed;
    ``goodput_lost_to_failures``: requests a failure touched — ended ``failed``, or
    retried — that are not good, per second of ``duration`` (the direct loss, in the
    unit of ``request_goodput``; the indirect loss, queueing behind the capacity a
    failure takes away, shows against the same scenario without failures). None over
    a run of no duration."""
    touched = (records["status"] == "failed") | ((retries > 0) & ~good_mask(records, slo))
    lost = int(touched.sum())
    return {
        "retried": int(retries.sum()),
        "goodput_lost_to_failures": lost / duration if duration > 0 else None,
    }


def number(value: Any) -> float:
    """A summary value as a float for arithmetic and plots: NaN for None (over nothing)."""
    return float("nan") if value is None else float(value)


def rejected_by_reason(records: dict[str, npt.NDArray[Any]]) -> dict[str, int]:
    """``rejected_<reason>`` → count for every reason (records without a
    ``reject_reason`` column count none)."""
    col = records.get("reject_reason")
    if col is None:
        return {f"rejected_{name}": 0 for name in REJECT_REASONS}
    return {f"rejected_{name}": int((col == name).sum()) for name in REJECT_REASONS}


def failed_by_reason(records: dict[str, npt.NDArray[Any]]) -> dict[str, int]:
    """``failed_<reason>`` → count for every failure reason (records without a
    ``reject_reason`` column count none)."""
    col = records.get("reject_reason")
    status = records["status"]
    if col is None:
        return {f"failed_{name}": 0 for name in FAIL_REASONS}
    failed = status == "failed"
    return {f"failed_{name}": int((failed & (col == name)).sum()) for name in FAIL_REASONS}


def refusals_line(label: str, summary: dict[str, Any]) -> str | None:
    """One line saying how many requests *label*'s run refused and why (None: none),
    e.g. ``lab: refused 11 of 20 requests: never_fits_kv 11``; the failed ones (and
    the retries), and the cut-off ones too."""
    rejected = int(summary.get("rejected", 0))
    unfinished = int(summary.get("unfinished", 0))
    failed = int(summary.get("failed") or 0)
    retried = int(summary.get("retried") or 0)
    if not rejected and not unfinished and not failed and not retried:
        return None
    total = int(summary.get("completed", 0)) + rejected + unfinished + failed
    parts = []

    def why(status: str, names: Iterable[str]) -> str:
        counts = ((name, summary.get(f"{status}_{name}")) for name in names)
        return ", ".join(f"{name} {n}" for name, n in counts if n)

    if rejected:
        parts.append(f"refused {rejected} of {total} requests: {why('rejected', REJECT_REASONS)}")
    if failed:
        parts.append(f"failed {failed} of {total} requests: {why('failed', FAIL_REASONS)}")
    if retried:
        parts.append(f"{retried} retries after replica failures")
    if unfinished:
        parts.append(f"{unfinished} of {total} unfinished when the run stopped")
    return f"{label}: " + "; ".join(parts)
