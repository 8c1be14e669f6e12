"""Admission control: the part in front of the scheduler that may turn a request away.

``always`` (the default) admits every arrival; the engine does not even ask it
(:attr:`Admission.admits_all`), so the default costs nothing per request.

``slo`` admits a request only if, by a prediction made when the engine takes it, it
would meet the scenario's SLO and would not push the running requests past the TPOT
SLO (the admission control of SLO-aware serving, e.g. DistServe OSDI'24 and Mooncake's
early rejection, FAST'25). The prediction is a *replay* of continuous batching's rules
on the replica's state at that moment, with the scenario's cost model:

- every running request decodes one token per iteration until it has emitted its
  ``output_tokens``; waiting requests, then the new one, join in FCFS order when a slot
  (``max_num_seqs``) is free and their whole prompt fits in the iteration's token
  budget (``max_num_batched_tokens`` less one token per decode); each iteration costs
  ``cost.iteration_s`` of its shape (decode-only stretches up to the next completion
  cost ``cost.decode_span_s``).
- predicted TTFT = time already waited + end of the iteration that prefills the
  request; predicted TPOT = the first decode-only iteration after it joined (the batch
  only shrinks after that, as no later arrival is foreseen): what it and every running
  request would see per token.

With ``chunked_prefill`` the replay chunks as the scheduler does (``Limits.chunk_tokens``),
iteration by iteration under the budget: the decodes take one token each, the prompts
part-way through their prefill continue in admission order with ``min(pending, budget
left, chunk)`` tokens, then queued requests start with what is left while a slot is
free; a request's first token comes at the end of the iteration of its last chunk. So a
prompt longer than the budget is predicted over the iterations it takes, not refused.

Named approximations (why the SLO is kept with a ``*_slack`` margin): no further
arrivals (under FCFS they cannot delay this request, but they add rows to the
iterations it shares with them); no KV preemption; prefills mixed into later decode
iterations are not charged to the TPOT; ``output_tokens`` is read as the ``max_tokens``
the client sent (vLLM's ``bench serve`` sends the output length with ``ignore_eos``), so
with real traffic stopping early on EOS the prediction is an upper bound. With static
batching the replay still follows continuous rules (optimistic: no head-of-line wait);
with ``prefill_first`` it prefills each prompt whole in mixed iterations (SGLang's
separate prefill and decode iterations and its chunks are not replayed); it does not
count prefix-cache hits (pessimistic: a hit prefills less).
Cost: a decision replays events up to the TTFT SLO's horizon at most; with only a TPOT
SLO it replays the whole queue ahead, unless no batch could break the TPOT at all (then
it admits without a replay).

A request that fails is rejected (``mode: reject``) or, with ``mode: defer``, held
outside the scheduler's queue and decided again at every later scheduling point; it is
rejected once it has waited ``max_defer_ms``, when the replica has nothing running or
queued (waiting cannot change the prediction), or when its TTFT can no longer be met
even on an empty engine. It keeps its arrival time: its TTFT counts the deferral.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import ConfigDict, Field, PositiveFloat

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import BatchShape, CostModel
from lyra_simpy.engine.request import Request
from lyra_simpy.metrics.fairness import prefill_alone_s
from lyra_simpy.policies.base import EngineView

Decision = Literal["admit", "reject", "defer", "timeout"]
"""``reject``: predicted to miss the SLO (``reject_reason`` ``slo``); ``timeout``: a
deferred request that waited ``max_defer_ms`` (``slo_defer_timeout``)."""


class AlwaysConfig(Closed):
    """Admit every request (no admission control, as vLLM and SGLang by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["always"] = "always"


class SLOAdmissionConfig(Closed):
    """Admit what is predicted to meet the SLO (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["slo"] = "slo"
    mode: Literal["reject", "defer"] = "reject"
    """What happens to a request predicted to miss: rejected at once, or deferred and
    decided again at later scheduling points."""
    ttft_slack: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Fraction of ``slo.ttft_ms`` held back for what the prediction does not see
    (admit when predicted TTFT ≤ (1 − slack) × SLO)."""
    tpot_slack: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Fraction of ``slo.tpot_ms`` held back (prefills mixed into decode iterations)."""
    max_defer_ms: PositiveFloat = 1000.0
    """``mode: defer``: a deferred request is rejected at the first scheduling point at
    which it has waited this long since its arrival (nothing waits forever; with a TTFT
    SLO it is rejected sooner, once the SLO is out of reach)."""


@dataclass(slots=True, frozen=True)
class Limits:
    """What an admission policy reads of the scenario besides its own config."""

    ttft_ms: float | None
    tpot_ms: float | None
    max_num_seqs: int
    max_num_batched_tokens: int | None
    """The scheduler's token budget (None: the scheduler has none)."""
    kv_capacity_tokens: int | None = None
    """Tokens the KV cache holds: a bound on the context of any batch (None: unknown)."""
    chunk_tokens: int | None = None
    """Chunked prefill: the most prompt tokens one request computes in an iteration (the
    budget, or ``long_prefill_token_threshold`` if smaller); None: prompts are never
    split (a prompt joins only when it fits the budget left whole)."""


class Admission(Protocol):
    """Decides, at a scheduling point, whether a request enters the waiting queue."""

    admits_all: bool
    """True when :meth:`decide` always admits: the engine then does not ask."""

    def decide(self, request: Request, view: EngineView) -> Decision:
        """``admit``, ``reject``, ``defer`` or ``timeout`` (reject after a deferral
        that lasted too long) *request* on the replica seen in *view*."""
        ...


class AlwaysAdmission:
    """Admits everything (the engine skips the call: see ``admits_all``)."""

    admits_all = True

    def __init__(self, config: AlwaysConfig, cost: CostModel, limits: Limits) -> None:
        self.config = config

    def decide(self, request: Request, view: EngineView) -> Decision:
        return "admit"


_INF = float("inf")


def _limit_s(slo_ms: float | None, slack: float) -> float:
    return _INF if slo_ms is None else slo_ms * (1.0 - slack) / 1000.0


class SLOAdmission:
    """Admits a request when its predicted TTFT and TPOT meet the SLO less the slack."""

    admits_all = False

    def __init__(self, config: SLOAdmissionConfig, cost: CostModel, limits: Limits) -> None:
        if limits.ttft_ms is None and limits.tpot_ms is None:
            raise ValueError("admission slo needs slo.ttft_ms or slo.tpot_ms")
        self.config = config
        self.cost = cost
        self.limits = limits
        self._ttft_s = _limit_s(limits.ttft_ms, config.ttft_slack)
        """Predicted TTFT admitted, in seconds (infinite without a TTFT SLO)."""
        self._tpot_s = _limit_s(limits.tpot_ms, config.tpot_slack)
        """Predicted TPOT admitted, in seconds (infinite without a TPOT SLO)."""
        seqs, kv_tokens = limits.max_num_seqs, limits.kv_capacity_tokens
        self._tpot_safe = limits.tpot_ms is None or (
            kv_tokens is not None
            and cost.decode_span_s(seqs, kv_tokens, seqs, 1)[0] <= self._tpot_s
        )
        """No batch can break the TPOT SLO (the fullest batch over the whole KV cache
        meets it; iteration time taken as non-decreasing in rows and context)."""

    def decide(self, request: Request, view: EngineView) -> Decision:
        if self._tpot_safe and self._ttft_s == _INF:
            return "admit"  # nothing to predict: no replay of a queue that may be long
        waited_s = view.now_s - request.arrival_s
        wait_s, tpot_s = self.predict(request, view.running, view.waiting, self._ttft_s - waited_s)
        if waited_s + wait_s <= self._ttft_s and tpot_s <= self._tpot_s:
            return "admit"
        if self.config.mode == "reject" or not (view.running or view.waiting):
            return "reject"
        if waited_s * 1000.0 >= self.config.max_defer_ms:
            return "timeout"
        if waited_s + self._alone_s(request) > self._ttft_s:
            return "reject"  # even an empty engine could not meet the TTFT any more
        return "defer"

    def _alone_s(self, request: Request) -> float:
        """Time of the request's prefill on an empty engine (in chunks when chunking)."""
        pending = request.pending_tokens
        chunk = self.limits.chunk_tokens
        if chunk is not None and pending > chunk:
            return prefill_alone_s(self.cost, request.computed_tokens + pending, chunk,
                                   request.computed_tokens)  # fmt: skip
        total = request.computed_tokens + pending
        return self.cost.iteration_s(BatchShape(1, pending, pending * total, 0, 0, 0))

    def predict(
        self,
        request: Request,
        running: Sequence[Request],
        waiting: Sequence[Request],
        horizon_s: float = _INF,
    ) -> tuple[float, float]:
        """(seconds from now to the end of *request*'s prefill, decode iteration time
        once it joined; 0 when it emits a single token) by the replay of the module
        docstring. Infinite when it could never be scheduled, or not within *horizon_s*
        (the replay stops there: its cost is bounded by the TTFT SLO when one is set;
        with only a TPOT SLO it replays the whole queue ahead)."""
        if self.limits.chunk_tokens is not None:
            return self._predict_chunked(request, running, waiting, horizon_s)
        max_seqs = self.limits.max_num_seqs
        budget_cap = self.limits.max_num_batched_tokens
        cost = self.cost
        # running: [tokens still to emit, context of its next decode]
        run = [[r.output_tokens - r.generated_tokens, r.computed_tokens + 1] for r in running]
        queue = [*waiting, request]
        qi, t = 0, 0.0
        while True:
            n = len(run)
            slots = max_seqs - n
            budget = _INF if budget_cap is None else budget_cap - n
            pre_seqs = pre_tokens = attention = 0
            joined: list[list[int]] = []
            mine = False
            while qi < len(queue) and slots > 0:
                req = queue[qi]
                pending = req.pending_tokens
                if pending > budget:
                    break
                total = req.computed_tokens + pending
                pre_seqs += 1
                pre_tokens += pending
                attention += pending * total
                budget -= pending
                slots -= 1
                joined.append([req.output_tokens - req.generated_tokens - 1, total + 1])
                mine = req is request
                qi += 1
                if mine:
                    break
            context = sum(c for _, c in run)
            if pre_seqs:
                t += cost.iteration_s(BatchShape(pre_seqs, pre_tokens, attention, n, n, context))
                if t > horizon_s:
                    return _INF, _INF
                run = [[rem - 1, c + 1] for rem, c in run if rem > 1]
                run.extend(j for j in joined if j[0] > 0)
                if mine:
                    if not joined[-1][0]:
                        return t, 0.0
                    rows = len(run)
                    ctx = sum(c for _, c in run)
                    return t, cost.decode_span_s(rows, ctx, rows, 1)[0]
            elif not run:
                return _INF, _INF  # the head can never fit the token budget
            else:  # only a completion can let the head in: decode up to the next one
                k = min(rem for rem, _ in run)
                t += sum(cost.decode_span_s(n, context, n, k))
                if t > horizon_s:
                    return _INF, _INF
                run = [[rem - k, c + k] for rem, c in run if rem > k]

    def _predict_chunked(
        self,
        request: Request,
        running: Sequence[Request],
        waiting: Sequence[Request],
        horizon_s: float,
    ) -> tuple[float, float]:
        """:meth:`predict` under chunked prefill (see the module docstring)."""
        limits = self.limits
        max_seqs = limits.max_num_seqs
        cap = limits.max_num_batched_tokens
        chunk = limits.chunk_tokens
        assert cap is not None
        assert chunk is not None
        cost = self.cost
        # decoding: [tokens still to emit, context of its next decode]
        run = [[r.output_tokens - r.generated_tokens, r.computed_tokens + 1]
               for r in running if r.decoding]  # fmt: skip
        # part-way through a prefill: [tokens pending, tokens computed, output left, mine]
        partial = [[r.pending_tokens, r.computed_tokens, r.output_tokens - r.generated_tokens, 0]
                   for r in running if not r.decoding]  # fmt: skip
        queue = [*waiting, request]
        qi, t = 0, 0.0
        while True:
            n = len(run)
            budget = cap - n
            slots = max_seqs - n - len(partial)
            pre_seqs = pre_tokens = attention = 0
            i = 0
            while budget > 0:
                if i == len(partial):  # the running ones had their chunks: start one
                    if qi == len(queue) or slots <= 0:  # (*request* is the last one)
                        break
                    req = queue[qi]
                    qi += 1
                    slots -= 1
                    left = req.output_tokens - req.generated_tokens
                    partial.append(
                        [req.pending_tokens, req.computed_tokens, left, int(req is request)]
                    )
                p = partial[i]
                i += 1
                take = min(p[0], budget, chunk)
                p[0] -= take
                p[1] += take
                budget -= take
                pre_seqs += 1
                pre_tokens += take
                attention += take * p[1]
            context = sum(c for _, c in run)
            if pre_seqs:
                shape = BatchShape(pre_seqs, pre_tokens, attention, n, n, context)
                t += cost.iteration_s(shape)
                if t > horizon_s:
                    return _INF, _INF
                run = [[rem - 1, c + 1] for rem, c in run if rem > 1]
                done = [p for p in partial if not p[0]]
                partial = [p for p in partial if p[0]]
                for _, total, left, mine in done:
                    if left > 1:
                        run.append([left - 1, total + 1])
                    if mine:
                        if left <= 1:
                            return t, 0.0
                        rows = len(run)
                        ctx = sum(c for _, c in run)
                        return t, cost.decode_span_s(rows, ctx, rows, 1)[0]
            elif not run:
                return _INF, _INF  # nothing can run (no budget, no slot): never
            else:  # only a completion can free a slot: decode up to the next one
                k = min(rem for rem, _ in run)
                t += sum(cost.decode_span_s(n, context, n, k))
                if t > horizon_s:
                    return _INF, _INF
                run = [[rem - k, c + k] for rem, c in run if rem > k]
