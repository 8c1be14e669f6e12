"""Chunked prefill, "stall-free" (Sarathi-Serve, OSDI'24; vLLM V1 with chunked prefill).

Every iteration fills one token budget ``max_num_batched_tokens`` (vLLM V1's scheduler,
``vllm/v1/core/sched/scheduler.py``, with ``--enable-chunked-prefill``):

1. Running requests first, in admission order (not decodes first). A decoding request
   takes one token; a request part-way through its prompt takes its next chunk,
   ``min(pending, budget left, long_prefill_token_threshold)`` tokens. A request that
   gets no budget this iteration is skipped (not preempted): with a threshold several
   prompts chunk at once, and when older requests' chunks take the whole budget a newer
   request's decode waits an iteration. KV blocks and recompute preemption of the
   newest running request work as in :mod:`~lyra_simpy.policies.continuous`.
2. Then, unless something was preempted, waiting requests in queue order while the
   budget lasts, ``max_num_seqs`` is not reached and the KV pool holds the chunk: each
   takes ``min(pending, budget left, threshold)`` tokens, so a long prompt starts with
   whatever budget the decodes left and goes on over the next iterations. Its first
   token comes at the end of the iteration that computes its last chunk.

An iteration is at most the budget of tokens, decodes included, so a long prompt no
longer makes one long iteration that every decode waits for (Sarathi's "stall-free"
property); a decode older than every prompt being chunked is never skipped. Unlike plain
continuous batching, a prompt longer than the budget is served (in chunks), so only the
KV pool bounds what is accepted.
"""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeInt, PositiveInt

from lyra_simpy.policies.continuous import ContinuousBatching, TokenBudgetConfig


class ChunkedPrefillConfig(TokenBudgetConfig):
    """Knobs of chunked prefill (vLLM names)."""

    name: Literal["chunked_prefill"] = "chunked_prefill"
    max_num_batched_tokens: PositiveInt = 2048
    """Token budget of one iteration, decodes and prefill chunks together (vLLM
    ``--max-num-batched-tokens``; 2048 is vLLM V1's default for online serving with
    chunked prefill on most GPUs; smaller budgets protect TPOT, larger ones TTFT)."""
    long_prefill_token_threshold: NonNegativeInt = 0
    """Cap on one request's chunk in an iteration (vLLM
    ``--long-prefill-token-threshold``; 0 = no cap beyond the budget)."""

    @property
    def alone_chunk_tokens(self) -> int | None:
        """The token budget, or ``long_prefill_token_threshold`` if smaller (vLLM)."""
        threshold = self.long_prefill_token_threshold
        budget = self.max_num_batched_tokens
        return min(budget, threshold) if threshold else budget


class ChunkedPrefill(ContinuousBatching):
    """Stall-free batching: running requests in admission order (decodes take a token,
    prompts part-way through their next chunk), then new prompt chunks fill the budget.

    The running step is :class:`ContinuousBatching`'s (a request part-way through its
    prompt takes its next chunk there); admission differs: a prompt need not fit the
    budget whole."""

    chunks = True

    def __init__(self, config: ChunkedPrefillConfig) -> None:
        super().__init__(config)
        if config.long_prefill_token_threshold:
            self._cap = min(self._cap, config.long_prefill_token_threshold)
