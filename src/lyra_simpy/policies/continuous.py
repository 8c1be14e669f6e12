"""Continuous (iteration-level) batching, as vLLM's V1 scheduler does it without chunking.

Every iteration (Orca, OSDI'22; vLLM ``vllm/v1/core/sched/scheduler.py``):

1. Running requests first, in admission order: each decodes one token and gets the KV
   block it needs. When the pool is out of blocks, the *newest* running request is
   preempted by recompute (its KV dropped, back to the front of the queue; vLLM's
   default preemption mode) until the allocation succeeds or the request being served
   is itself the one preempted.
2. Then, only if nothing was preempted this iteration, waiting requests in queue order
   while ``max_num_seqs`` sequences are not reached, the whole prompt fits in the rest
   of the token budget ``max_num_batched_tokens`` (no chunking: a prompt that does not
   fit waits) and the KV pool has blocks for the prompt. The first one that does not fit
   stops admission (head-of-line order is kept). Queue order is ``queue_policy``'s:
   FCFS by default (see :mod:`~lyra_simpy.policies.queue`).

Prefills and decodes share the iteration (a "mixed" batch); ``prefills_per_iteration``
gives prefill-only iterations instead (not vLLM: SGLang's loop, Lab 02's engine's prose);
``prefill_beside_decode`` runs the prompts beside the decodes, delaying only themselves
(not vLLM either: what Lab 02's published throughputs and TPOTs imply, docs/guide/lab02.md).

A request whose longest possible prefill (prompt plus all but one output token, after a
recompute) exceeds the token budget can never run and is rejected on arrival, as vLLM
refuses prompts longer than ``max_model_len`` (which it requires to be ≤ the budget when
chunking is off).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, PositiveInt, model_validator

from lyra_simpy.config import Closed
from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.policies.base import BatchPlan, EngineView, preempt_gain, prefix_hit
from lyra_simpy.policies.queue import QueuePolicy, ordered


class TokenBudgetConfig(Closed):
    """Knobs shared by the iteration-level schedulers (vLLM names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: PositiveInt = 256
    """Most sequences running at once (vLLM ``--max-num-seqs``, default 256)."""
    max_num_batched_tokens: PositiveInt = 8192
    """Token budget of one iteration (vLLM ``--max-num-batched-tokens``; 8192 is its
    online-serving default on GPUs)."""
    queue_policy: QueuePolicy = "fcfs"
    """Order in which waiting requests are admitted (vLLM ``--scheduling-policy``; see
    :mod:`~lyra_simpy.policies.queue`)."""

    @model_validator(mode="after")
    def _budget_covers_seqs(self) -> TokenBudgetConfig:
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}), as vLLM requires"
            )
        return self

    @property
    def max_batch(self) -> int:
        return self.max_num_seqs

    @property
    def token_budget(self) -> int | None:
        """Tokens one iteration may compute (None: no budget)."""
        return self.max_num_batched_tokens

    @property
    def alone_chunk_tokens(self) -> int | None:
        """The largest prompt chunk a request alone runs in one iteration (None: its
        whole prompt): the budget (without chunking a prompt that fits runs whole, and
        a longer one is refused)."""
        return self.max_num_batched_tokens

    @property
    def prefills_alone(self) -> int | None:
        """Prompts a prefill-only iteration computes (None: prompts join the decodes)."""
        return None

    @property
    def prefill_beside(self) -> bool:
        """Prompts run beside the decodes (``ContinuousConfig.prefill_beside_decode``)."""
        return False


class ContinuousConfig(TokenBudgetConfig):
    """Continuous batching without chunking."""

    name: Literal["continuous"] = "continuous"
    prefills_per_iteration: PositiveInt | None = None
    """None (vLLM): waiting prompts join the running requests' decodes in one mixed
    iteration. A number: an iteration either computes the prompts of up to that many
    waiting requests, alone, or decodes the running ones, prompts first whenever one can
    be admitted. That is the prefill-only iteration of SGLang's prefill-first loop and
    the rule of Lab 02's classroom engine (an iteration "advances every sequence in the
    batch one decode step, or processes a prefill"; ``static`` has the same field). Not
    vLLM's behaviour, so off by default; KV for the decodes that follow is not held back
    (a full pool preempts them as usual)."""

    prefill_beside_decode: bool = False
    """False (vLLM, and ``prefills_per_iteration``): an iteration's prompts cost its
    decodes their time. True: the prompts admitted in an iteration run beside its
    decodes, on a unit of their own — the iteration lasts the longer of its decodes and
    its prompts (the prompts costed as a prefill-only iteration of theirs, the decodes as a
    decode-only one), each prompt's first token comes when the prompts' part ends, and a
    prompt never delays a running request. An idealisation no engine named here runs on
    one GPU (vLLM mixes, SGLang and llama.cpp stall the decodes); it is what Lab 02's
    published tables imply — its saturated throughputs (209 and 337 tok/s at depths 4 and
    8) exceed what any reading that charges decodes for prompts gives, and its p50 TPOTs
    print the bare decode iteration, 31 ms (docs/guide/lab02.md). Exclusive with
    ``prefills_per_iteration``."""

    @model_validator(mode="after")
    def _one_prefill_rule(self) -> ContinuousConfig:
        if self.prefill_beside_decode and self.prefills_per_iteration is not None:
            raise ValueError(
                "prefill_beside_decode: true runs prompts beside the decodes, "
                f"prefills_per_iteration: {self.prefills_per_iteration} gives them "
                "iterations of their own; set one of them"
            )
        return self

    @property
    def prefills_alone(self) -> int | None:
        return self.prefills_per_iteration

    @property
    def prefill_beside(self) -> bool:
        return self.prefill_beside_decode


class ContinuousBatching:
    """Iteration-level scheduling under a sequence cap, a token budget and KV blocks."""

    holds_back_until_change = True
    """Admission needs a free slot, budget and KV (see ``Scheduler``)."""
    fusable = True
    """Decode iterations may be fused (``Scheduler``)."""
    chunks = False
    """Whether a prompt may start with a part of it (chunked prefill)."""

    def __init__(self, config: TokenBudgetConfig) -> None:
        self.config = config
        self._alone = config.prefills_alone
        """Prompts of a prefill-only iteration (None: mixed iterations, vLLM's way)."""
        self._beside = config.prefill_beside
        """Admitted prompts run beside the decodes (the plan says so: ``BatchPlan.beside``)."""
        self._cap = config.max_num_batched_tokens
        """Most prompt tokens one request computes in an iteration (the budget here:
        running requests are always decoding without chunking)."""

    @property
    def max_batch(self) -> int:
        """Most requests it runs at once (``Scheduler``)."""
        return self.config.max_batch

    def refusal(
        self, request: Request, num_blocks: int, block_size: int, prompt_only: bool = False
    ) -> RejectReason | None:
        # The longest prefill: the prompt plus all but one output token (a recompute
        # after a preemption late in the output); only the prompt on a prefill replica.
        longest = request.input_tokens
        if not prompt_only:
            longest += request.output_tokens - 1
        if blocks_for(longest, block_size) > num_blocks:
            return "never_fits_kv"
        if not self.chunks and longest > self.config.max_num_batched_tokens:
            return "exceeds_token_budget"
        return None

    def plan(self, view: EngineView) -> BatchPlan:
        bs = view.block_size
        free = view.free_blocks
        budget = self.config.max_num_batched_tokens
        plan = BatchPlan()
        running = view.running
        n = len(running)  # requests not preempted: victims are taken from the end
        if self._alone is not None and view.waiting:
            self._admit(view, plan, n, budget, free, self._alone)
            if plan.prefill:
                return plan
        decode, prefill, preempt = plan.decode, plan.prefill, plan.preempt
        decodes = decode.append
        need_all = view.decode_blocks
        plan.beside = self._beside
        if need_all is not None and need_all <= free:  # all decode, nothing to preempt
            decode.extend(running)
            if self._alone is not None:
                return plan
            return self._admit(view, plan, n, budget - n, free - need_all)
        cap = self._cap
        prefix = view.prefix
        lookahead = view.lookahead
        dropped: dict[int, int] = {}
        for i, req in enumerate(running):
            if i == n:
                break
            if budget <= 0:
                continue  # no budget left (chunked prefill only): skipped, keeps its KV
            total = req.input_tokens + req.generated_tokens  # computed + pending
            pending = total - req.computed_tokens
            tokens = min(pending, budget, cap)
            extra = 0
            if lookahead and pending == 1 and req.generated_tokens:  # (draft slots it can use)
                extra = min(lookahead, req.output_tokens - req.generated_tokens - 1)
            need = (req.computed_tokens + tokens + extra + bs - 1) // bs - req.blocks
            while need > free:
                n -= 1
                victim = running[n]
                preempt.append(victim)
                free += victim.blocks if prefix is None else preempt_gain(view, victim, dropped)
                if n == i:
                    break
            if n == i:  # the request itself was preempted
                break
            free -= need
            budget = max(budget - tokens - extra, 0)
            if pending == 1 and req.generated_tokens:
                decodes(req)
            else:
                prefill.append((req, tokens))
        if preempt or self._alone is not None:
            # vLLM admits nothing in an iteration that preempted; prompts alone were
            # tried first
            return plan
        return self._admit(view, plan, n, budget, free)

    def _admit(
        self,
        view: EngineView,
        plan: BatchPlan,
        n_running: int,
        budget: int,
        free: int,
        most: int | None = None,
    ) -> BatchPlan:
        """Waiting requests in queue order while they fit (step 2 of the docstring), at
        most *most* of them; with ``chunks``, each takes as large a chunk as the budget
        has left."""
        bs = view.block_size
        slots = self.config.max_num_seqs - n_running
        if most is not None:
            slots = min(slots, most)
        prefix = view.prefix
        chunks, cap = self.chunks, self._cap
        for req in ordered(view.waiting, self.config.queue_policy):
            if slots <= 0 or budget <= 0:
                break
            hit, hit_free = prefix_hit(view, req) if prefix is not None else (0, 0)
            tokens = req.input_tokens + req.generated_tokens - req.computed_tokens - hit
            if chunks:
                tokens = min(tokens, budget, cap)
            elif tokens > budget:
                break
            need = blocks_for(hit + tokens, bs) - hit // bs + hit_free
            if need > free:
                break
            plan.prefill.append((req, tokens))
            budget -= tokens
            free -= need
            slots -= 1
        return plan
