"""Speculative decoding (MTP / EAGLE / NEXTN): several tokens per decode step.

Each decode iteration a draft (an MTP head or a small model) proposes ``num_steps``
tokens per sequence, one draft forward pass each; the target model verifies them in
the same iteration and keeps the longest accepted prefix plus one token of its own, so
a sequence emits ``1 + accepted`` tokens (at most what it has left), as one chunk (one
inter-token gap, as vLLM's benchmark counts ITL). Acceptance: draft position *j* is
accepted with probability ``acceptance_rates[j]`` given that positions before it were
(a chain: SGLang ``--speculative-eagle-topk 1``); or give ``mean_accepted_tokens`` and
every position gets the same conditional rate α with α + α² + … + α^k equal to it.
Draws come from the run's ``speculative`` stream, one per sequence and position.

Costs, added to the iteration's: the verify pass computes the ``num_steps`` draft
tokens of every decoding sequence like prompt tokens reading the sequence's context
(``BatchShape.verify_tokens``: a decode-only iteration stays a decode iteration, padded
and replayed as a CUDA graph as SGLang does), and the draft runs ``num_steps``
forward passes of ``draft_step_ms`` each. KV: a decoding sequence reserves blocks for
its next ``1 + num_steps`` tokens (vLLM's lookahead slots), and uses
``1 + num_steps`` tokens of the iteration's budget.

Modelling choices: a fixed chain (no tree drafts: ``topk > 1`` is not modelled); the
draft's own KV is not counted; iterations with speculation are stepped one by one (no
fused runs: sequences advance by different numbers of tokens).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, NonNegativeFloat, PositiveInt, model_validator

from lyra_simpy.config import Closed


class SpeculativeConfig(Closed):
    """Draft length, acceptance and draft cost (SGLang ``--speculative-*`` names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: str = "NEXTN"
    """A label (SGLang ``--speculative-algorithm``: NEXTN / EAGLE / EAGLE3 / MTP)."""
    num_steps: PositiveInt = 3
    """Draft tokens proposed per sequence and iteration (``--speculative-num-steps``)."""
    acceptance_rates: list[Annotated[float, Field(ge=0.0, le=1.0)]] | None = None
    """Per draft position, the probability it is accepted given the earlier ones were."""
    mean_accepted_tokens: Annotated[float, Field(ge=0.0)] | None = None
    """Mean accepted draft tokens per iteration (instead of ``acceptance_rates``)."""
    draft_step_ms: NonNegativeFloat = 0.0
    """Time of one draft forward pass (an MTP head is about one decoder layer)."""

    @model_validator(mode="after")
    def _one_acceptance(self) -> SpeculativeConfig:
        if (self.acceptance_rates is None) == (self.mean_accepted_tokens is None):
            raise ValueError("set exactly one of acceptance_rates and mean_accepted_tokens")
        if self.acceptance_rates is not None and len(self.acceptance_rates) != self.num_steps:
            raise ValueError(
                f"acceptance_rates: got {len(self.acceptance_rates)} rates, must be "
                f"num_steps ({self.num_steps})"
            )
        m = self.mean_accepted_tokens
        if m is not None and m > self.num_steps:
            raise ValueError(f"mean_accepted_tokens: got {m}, must be <= num_steps")
        return self

    def rates(self) -> npt.NDArray[np.float64]:
        """The conditional acceptance rate of every draft position."""
        if self.acceptance_rates is not None:
            return np.asarray(self.acceptance_rates, dtype=np.float64)
        target = float(self.mean_accepted_tokens or 0.0)
        k = self.num_steps
        lo, hi = 0.0, 1.0
        for _ in range(100):  # bisection: α + … + α^k is increasing in α
            mid = (lo + hi) / 2
            if sum(mid**j for j in range(1, k + 1)) < target:
                lo = mid
            else:
                hi = mid
        return np.full(k, (lo + hi) / 2)


class Speculator:
    """Draws how many draft tokens each decoding sequence gets accepted."""

    DRAWN_ROWS = 4096
    """Sequences' draws taken from the stream at once (:meth:`accepted`)."""

    def __init__(self, config: SpeculativeConfig, rng: np.random.Generator) -> None:
        self.config = config
        self.lookahead = config.num_steps
        self.draft_s = config.num_steps * config.draft_step_ms / 1000.0
        self._rates = config.rates()
        self._rng = rng
        self._taken: list[int] = []
        """Accepted drafts of sequences drawn ahead, not yet handed out (from ``_next``)."""
        self._next = 0

    def accepted(self, n: int) -> list[int]:
        """Accepted draft tokens for *n* sequences (leading accepted positions: a draft
        position is accepted when its uniform draw is below its rate), ``num_steps``
        uniforms a sequence in the stream's order. Drawn :data:`DRAWN_ROWS` sequences at
        a time and counted by numpy, then handed out a step at a time: the same numbers
        as one draw per step (the stream is the speculator's own and yields its uniforms
        in order whatever the shape asked), without numpy's per-call cost at every step
        (a step holds a few sequences: that cost was a fifth of a speculative scenario's
        time; counting in Python after one draw a step, 7 % of ``sglang_qwen35_4b_b200
        --quick`` under cProfile)."""
        start = self._next
        if start + n > len(self._taken):
            rows = self._rng.random((max(self.DRAWN_ROWS, n), self.lookahead))
            taken = np.cumprod(rows < self._rates, axis=1).sum(axis=1)
            self._taken = self._taken[start:] + taken.tolist()
            start = 0
        self._next = start + n
        return self._taken[start : start + n]
