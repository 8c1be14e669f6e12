"""Slowdown and fairness: how much longer each request took than it would alone.

A request's *unloaded service time* is its end-to-end latency on an idle replica with
the run's cost model: its prompt prefilled alone (one iteration, or chunks of at most
the scheduler's token budget when the prompt is longer — the split a chunking
scheduler would make alone — less the tokens it found in the prefix cache, so a hit
does not count as going faster than alone), then ``output_tokens − 1`` decode
iterations at one row whose context grows by one token each (``input + 1`` …
``input + output − 1``), exactly as the engine charges them. A static batch's
``max_wait_ms`` is not part of it (alone, nothing is worth waiting for). Its
*slowdown* is ``e2el / unloaded`` — at least 1, except where CUDA-graph ``padding``
charges a lone decode the padded width while a mixed (prefill + decode) iteration runs
eagerly and costs less, or where speculative decoding emits several tokens a step
(the unloaded time assumes one) — the standard per-job fairness measure of size-based
scheduling (Wierman & Harchol-Balter, "Classifying scheduling policies with respect to
unfairness in an M/GI/1", SIGMETRICS 2003).

Jain's fairness index over the slowdowns of the completed requests,
``J = (Σx)² / (n Σx²)`` (Jain, Chiu & Hawe, DEC-TR-301, 1984), is 1 when every request
is slowed down equally and 1/n when one request takes all the slowdown.

Summary keys added (besides vLLM's names, DESIGN §4): ``fairness_jain_slowdown``,
``mean_slowdown``, ``median_slowdown``, ``p90_slowdown``, ``p99_slowdown``,
``max_slowdown``, over completed (``ok``) requests with a positive unloaded time (a
cost model that charges nothing gives none). With no such request they are 0.0, as the
latency statistics of an empty set are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from lyra_simpy.cost.base import BatchShape, CostModel

Floats = npt.NDArray[np.float64]


def jain_index(values: npt.ArrayLike) -> float:
    """Jain's fairness index ``(Σx)² / (n Σx²)`` of *values* (0.0 when empty or all 0)."""
    x = np.asarray(values, dtype=np.float64)
    square_sum = float(np.sum(x * x))  # not np.dot: BLAS order moves with threads
    if len(x) == 0 or square_sum == 0.0:
        return 0.0
    return float(x.sum()) ** 2 / (len(x) * square_sum)


def prefill_alone_s(
    cost: CostModel, prompt_tokens: int, chunk_tokens: int | None, cached_tokens: int = 0
) -> float:
    """Time to prefill *prompt_tokens* alone, *cached_tokens* of them already in the
    prefix cache: one iteration, or chunks of at most *chunk_tokens* (None: never split)."""
    new = prompt_tokens - cached_tokens
    step = new if chunk_tokens is None else chunk_tokens
    done = cached_tokens
    total = 0.0
    while done < prompt_tokens:
        tokens = min(step, prompt_tokens - done)
        done += tokens
        total += cost.iteration_s(BatchShape(1, tokens, tokens * done, 0, 0, 0))
    return total


def unloaded_service_s(
    cost: CostModel,
    input_tokens: npt.NDArray[np.int64],
    output_tokens: npt.NDArray[np.int64],
    chunk_tokens: int | None = None,
    cached_tokens: npt.NDArray[np.int64] | None = None,
) -> Floats:
    """Unloaded service time (s) of every request (see the module docstring).

    Vectorised: one prefill cost per distinct prompt length, and one
    ``decode_span_s`` call over the whole range of contexts met, whose prefix sums give
    each request's decode time."""
    inp = np.asarray(input_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    if len(inp) == 0:
        return np.zeros(0, dtype=np.float64)
    hit = np.zeros_like(inp) if cached_tokens is None else np.asarray(cached_tokens, np.int64)
    pairs, where = np.unique(np.stack([inp, hit], axis=1), axis=0, return_inverse=True)
    prefill = np.array([prefill_alone_s(cost, int(p), chunk_tokens, int(c)) for p, c in pairs])
    total = prefill[where.reshape(-1)]
    decodes = out > 1
    if decodes.any():
        lo = inp[decodes] + 1  # context of the first decode iteration
        hi = inp[decodes] + out[decodes] - 1  # ... and of the last one
        first = int(lo.min())
        steps = cost.decode_span_s(1, first, 1, int(hi.max()) - first + 1)
        cum = np.concatenate(([0.0], np.cumsum(np.asarray(steps, dtype=np.float64))))
        total[decodes] += cum[hi - first + 1] - cum[lo - first]
    return np.asarray(total, dtype=np.float64)


def fairness_summary(
    records: dict[str, npt.NDArray[Any]], unloaded_s: Floats
) -> dict[str, float | None]:
    """The slowdown statistics and Jain's index of a run (summary keys, see above; None
    over no completed request)."""
    ok = (records["status"] == "ok") & (unloaded_s > 0)
    slowdown = records["e2el_ms"][ok] / 1000.0 / unloaded_s[ok]
    keys = ("mean", "median", "p90", "p99", "max")
    if len(slowdown) == 0:
        out: dict[str, float | None] = dict.fromkeys((f"{k}_slowdown" for k in keys), None)
        return {"fairness_jain_slowdown": None, **out}
    median, p90, p99 = np.percentile(slowdown, (50.0, 90.0, 99.0))
    values = (slowdown.mean(), median, p90, p99, slowdown.max())
    return {
        "fairness_jain_slowdown": jain_index(slowdown),
        **{f"{k}_slowdown": float(v) for k, v in zip(keys, values, strict=True)},
    }
