"""Prefill-first batching, as SGLang's scheduler does it by default.

SGLang (``python/sglang/srt/managers/scheduler.py``, ``get_next_batch_to_run``; the
admission rules in ``schedule_policy.py``, ``PrefillAdder``) runs *separate* prefill
and decode iterations: whenever a prefill batch can be formed it runs one, prefill
only, and decodes only when none can. With ``enable_mixed_chunk`` the running decodes
join the prefill batch instead (one token each, taken from the chunk budget), which is
close to vLLM's stall-free batching (:mod:`~lyra_simpy.policies.chunked`).

A prefill batch, each iteration:

1. The request part-way through a chunked prefill (at most one) continues first with
   ``min(pending, chunked_prefill_size)`` tokens.
2. Waiting requests in queue order while ``max_running_requests`` is not reached, the
   input budget ``max_prefill_tokens`` and the chunk budget ``chunked_prefill_size``
   last (the first request may exceed ``max_prefill_tokens``, as in SGLang) and the KV
   pool passes SGLang's conservative check: the request's remaining prompt plus its
   whole remaining output (clipped at ``clip_max_new_tokens``) must fit in the free
   KV left after reserving ``new_token_ratio`` × each running request's remaining
   output. A prompt larger than the chunk budget left is cut to a whole number of
   pages and finishes in later prefill iterations (nothing else is admitted meanwhile).

A decode iteration decodes every running request. When the KV pool cannot hold the
next token of each, requests are *retracted* (SGLang ``retract_decode``): fewest
output tokens first, ties to the longest prompt, keeping at least one; their KV is
dropped and they go to the *back* of the queue (recompute, as vLLM's preemption but
re-queued behind the others). If that is still not enough, the prompt being chunked
is retracted as well (modelling choice: SGLang keeps it and can stall there).

Modelling choice: SGLang adapts ``new_token_ratio`` (0.7 after a retraction, decaying
by 0.001 per decode step to 0.1 with the default ``--schedule-conservativeness 1``);
here it is one fixed value, defaulting to that floor, which is where a busy server sits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.policies.base import BatchPlan, EngineView, preempt_gain, prefix_hit


class PrefillFirstConfig(Closed):
    """Knobs of SGLang's scheduler (SGLang server-argument names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["prefill_first"] = "prefill_first"
    max_running_requests: PositiveInt = 256
    """Most requests running at once (``--max-running-requests``; SGLang derives it
    from the KV pool when unset, so give the value the server logs)."""
    chunked_prefill_size: PositiveInt | None = 8192
    """Most prompt tokens in one prefill iteration (``--chunked-prefill-size``; SGLang
    picks 8192 on 80 GB-class GPUs, 2048-4096 on smaller ones; None (SGLang: -1)
    turns chunking off)."""
    max_prefill_tokens: PositiveInt = 16384
    """Input-token budget of one prefill batch (``--max-prefill-tokens``, default 16384)."""
    enable_mixed_chunk: bool = False
    """Run the decodes inside prefill iterations (``--enable-mixed-chunk``, off by default)."""
    new_token_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1
    """Share of each running request's remaining output reserved in KV when admitting
    (SGLang's adaptive ratio, held fixed; see the module docstring)."""
    clip_max_new_tokens: PositiveInt = 4096
    """Remaining outputs are counted at most this long in the reservation (SGLang
    ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``, default 4096)."""
    schedule_policy: Literal["fcfs", "lpm"] = "fcfs"
    """Queue order (``--schedule-policy``): ``fcfs``, or ``lpm`` — longest cached
    prefix first (needs a prefix cache; ties keep arrival order). SGLang's default is
    ``fcfs`` since v0.4; ``lpm`` was the earlier default."""
    lpm_max_queue: PositiveInt = 128
    """``lpm`` falls back to FCFS while more requests than this wait (SGLang skips the
    costly matching then; 128 in ``schedule_policy.py``)."""

    @property
    def max_batch(self) -> int:
        return self.max_running_requests

    @property
    def token_budget(self) -> int | None:
        """No budget shared by decodes and prompts: prefill iterations have their own
        (``max_prefill_tokens``)."""
        return None

    @property
    def alone_chunk_tokens(self) -> int | None:
        """``chunked_prefill_size`` (None: whole prompts)."""
        return self.chunked_prefill_size


class PrefillFirst:
    """Separate prefill and decode iterations, prefill first (SGLang's default)."""

    holds_back_until_change = False
    """A waiting prompt may be admitted whenever a prefill iteration fits it, so decodes
    that follow a plan admitting nothing are not fused while requests wait."""
    fusable = True
    """Decode iterations may be fused (``Scheduler``)."""

    def __init__(self, config: PrefillFirstConfig) -> None:
        self.config = config

    @property
    def max_batch(self) -> int:
        """Most requests it runs at once (``Scheduler``)."""
        return self.config.max_batch

    def refusal(
        self, request: Request, num_blocks: int, block_size: int, prompt_only: bool = False
    ) -> RejectReason | None:
        # The KV check at admission wants the prompt (plus, after a retraction, what was
        # generated) and the rest of the output at once: at most input + output tokens,
        # on a prefill replica too (SGLang reserves the output there as well).
        fits = request.input_tokens + request.output_tokens <= num_blocks * block_size
        return None if fits else "never_fits_kv"

    def plan(self, view: EngineView) -> BatchPlan:
        running = view.running
        if view.decode_blocks is not None:  # every running request is decoding
            decoding: list[Request] = list(running)
            partial = None
        else:
            decoding = [r for r in running if r.decoding]
            partial = next((r for r in running if not r.decoding), None)
        if view.waiting or partial is not None:
            plan = self._prefill(view, decoding, partial)
            if not plan.empty:
                return plan
        return self._decode(view, decoding, partial)

    # -- prefill iterations ------------------------------------------------------------
    def _prefill(
        self, view: EngineView, decoding: list[Request], partial: Request | None
    ) -> BatchPlan:
        c = self.config
        bs = view.block_size
        plan = BatchPlan()
        free = view.free_blocks
        chunk = c.chunked_prefill_size
        rem_input = c.max_prefill_tokens
        if c.enable_mixed_chunk and decoding:
            need = _decode_need(decoding, bs, view.lookahead)
            if need > free:
                return plan  # decode first (and retract) before mixing more in
            free -= need
            rem_input -= len(decoding)
            if chunk is not None:
                chunk -= len(decoding)
            plan.decode.extend(decoding)
        clip = c.clip_max_new_tokens
        reserved = c.new_token_ratio * sum(
            min(r.output_tokens - r.generated_tokens, clip) for r in decoding
        )
        rem_total = free * bs - reserved
        if partial is not None:
            tokens = _pending(partial)
            if chunk is not None and tokens > chunk:
                tokens = max(chunk, 0)
            need = blocks_for(partial.computed_tokens + tokens, bs) - partial.blocks
            if tokens == 0 or need > free:
                return _mixed_or_empty(plan)
            plan.prefill.append((partial, tokens))
            free -= need
            rem_total -= tokens
            rem_input -= tokens
            if chunk is not None:
                chunk -= tokens
            if tokens < _pending(partial):
                return plan  # still chunking: nothing else joins
        slots = c.max_running_requests - len(view.running)
        for req in self._order(view):
            if slots <= 0 or rem_total <= 0 or rem_input <= 0:
                break
            if chunk is not None and chunk <= 0:
                break
            hit, hit_free = prefix_hit(view, req)
            pending = _pending(req) - hit
            future = min(req.output_tokens - req.generated_tokens, clip)
            if pending + future + hit_free * bs > rem_total:
                break
            paged = blocks_for(pending, bs) * bs
            if plan.prefill and paged > rem_input:
                break
            if chunk is not None and paged > chunk:
                tokens = chunk // bs * bs
                if tokens <= 0:
                    break
                need = blocks_for(hit + tokens, bs) - hit // bs + hit_free
                if need > free:
                    break
                plan.prefill.append((req, tokens))
                break  # the new chunked request ends the batch
            need = blocks_for(hit + pending, bs) - hit // bs + hit_free
            if need > free:
                break
            plan.prefill.append((req, pending))
            free -= need
            rem_total -= paged + future + hit_free * bs
            rem_input -= paged
            if chunk is not None:
                chunk -= paged
            slots -= 1
        return _mixed_or_empty(plan)

    def _order(self, view: EngineView) -> list[Request] | Sequence[Request]:
        """The queue in scheduling order (``schedule_policy``)."""
        waiting = view.waiting
        c = self.config
        lpm = c.schedule_policy == "lpm" and view.prefix is not None
        if lpm and len(waiting) <= c.lpm_max_queue:
            return sorted(waiting, key=lambda r: -prefix_hit(view, r)[0])
        return waiting

    # -- decode iterations -------------------------------------------------------------
    def _decode(
        self, view: EngineView, decoding: list[Request], partial: Request | None
    ) -> BatchPlan:
        plan = BatchPlan(preempt_to_back=True)
        if not decoding:
            return plan
        bs = view.block_size
        need = view.decode_blocks
        if need is None:
            need = _decode_need(decoding, bs, view.lookahead)
        free = view.free_blocks
        if need > free:
            # Retraction order: fewest output tokens first, ties to the longest prompt.
            order = sorted(decoding, key=lambda r: (r.generated_tokens, -r.input_tokens))
            keep = set(map(id, decoding))
            dropped: dict[int, int] = {}
            for victim in order[:-1]:
                plan.preempt.append(victim)
                keep.discard(id(victim))
                free += preempt_gain(view, victim, dropped)
                need -= _decode_need([victim], bs, view.lookahead)
                if need <= free:
                    break
            if need > free and partial is not None:
                # Still short: the prompt being chunked holds the rest. SGLang never
                # retracts it (and can stall here); it goes back to the queue instead.
                plan.preempt.append(partial)
                free += preempt_gain(view, partial, dropped)
            if need > free:
                return plan  # cannot happen: an accepted request fits the pool alone
            decoding = [r for r in decoding if id(r) in keep]
        plan.decode.extend(decoding)
        return plan


def _pending(req: Request) -> int:
    return req.input_tokens + req.generated_tokens - req.computed_tokens


def _decode_need(decoding: list[Request], bs: int, lookahead: int = 0) -> int:
    """Blocks the decoding requests need, together, for one more token each (and the
    speculative *lookahead* slots each can still use)."""
    return sum(
        blocks_for(
            r.computed_tokens + 1 + min(lookahead, r.output_tokens - r.generated_tokens - 1), bs
        )
        - r.blocks
        for r in decoding
    )


def _mixed_or_empty(plan: BatchPlan) -> BatchPlan:
    """A prefill plan; without any prefill it is empty (the decodes run on their own)."""
    if not plan.prefill:
        plan.decode.clear()
    return plan
