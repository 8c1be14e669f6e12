"""The linear ("classroom") cost model.

``t_ms = base_ms + per_seq_ms × seqs + per_prefill_token_ms × prefill tokens
+ per_context_token_ms × decode context tokens``, where *seqs* counts the prefill
sequences plus the decode rows, the latter padded (see :mod:`~lyra_simpy.cost.padding`)
in decode-only iterations. With ``base_ms: 15, per_seq_ms: 1`` and padding to the batch
width it is the lab's "15 ms + 1 ms per sequence" engine (add ``pad_prefill: true`` for
its rule that a prefill takes an iteration of the same cost); with the per-token terms it
approximates a real model (Llama-2-7B on an A100: ≈ 7 ms per iteration to read the
weights, ≈ 0.09 ms per prefill token, ≈ 0.00026 ms per context token read).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, NonNegativeFloat, model_validator

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import BatchShape, affine_span_s, verify_rows_tokens
from lyra_simpy.cost.jitter import Jitter, refuse_fitted_without_fit
from lyra_simpy.cost.padding import Padder, Padding, check_padding
from lyra_simpy.cost.wake import Wake, refuse_fitted_wake


class LinearCostConfig(Closed):
    """Coefficients of the linear cost model, in milliseconds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["linear"] = "linear"
    base_ms: NonNegativeFloat = 0.0
    """Fixed time per iteration (weights read once, launch and scheduler overhead)."""
    per_seq_ms: NonNegativeFloat = 0.0
    """Time per sequence in the batch (per padded row for decode-only iterations)."""
    per_prefill_token_ms: NonNegativeFloat = 0.0
    """Time per prompt token computed."""
    per_context_token_ms: NonNegativeFloat = 0.0
    """Time per context token read by decode attention."""
    padding: Annotated[Padding, BeforeValidator(check_padding)] = Field(default="none")
    """CUDA-graph padding of decode-only batches (none, max_batch, or captured sizes)."""
    pad_prefill: bool = False
    """Pad iterations that carry prefill too (default off: real engines run prefill and
    mixed iterations eagerly, see :mod:`~lyra_simpy.cost.padding`). On, every iteration
    charges ``per_seq_ms`` × the padded count of all its sequences, prefilling or
    decoding, so a prefill iteration costs what a decode of that width does: the
    classroom engine of Lab 02 ("each iteration advances every sequence one decode
    step, or processes a prefill, and costs 15 ms + 1 ms × batch width")."""
    jitter: Jitter | None = None
    """Seeded step-time noise on every iteration (default none: exact times); see
    :mod:`~lyra_simpy.cost.jitter`."""
    wake: Wake | None = None
    """The first iteration after idle takes longer (default none); see
    :mod:`~lyra_simpy.cost.wake`."""

    def calibration(self) -> str:
        """Where the coefficients came from, for the run's manifest."""
        return "coefficients given in the scenario YAML"

    def kv_blocks(
        self, block_size: int, mem_fraction: float, activation_reserve_gib: float, max_running: int
    ) -> int | None:
        """None: no model or device to size the KV pool from (``num_blocks: auto``)."""
        return None

    @model_validator(mode="after")
    def _jitter_has_no_fit(self) -> LinearCostConfig:
        refuse_fitted_without_fit(self.jitter, "the linear cost model")
        refuse_fitted_wake(self.wake, "the linear cost model")
        return self


class LinearCost:
    """Iteration time from :class:`LinearCostConfig`; *max_batch* resolves ``max_batch``
    padding to the scheduler's batch width."""

    def __init__(self, config: LinearCostConfig, max_batch: int) -> None:
        self.config = config
        self._pad = Padder(config.padding, max_batch)
        self._fixed: dict[int, float] = {}
        """Row count → fixed part of a decode iteration (ms), computed once."""

    def iteration_s(self, shape: BatchShape) -> float:
        c = self.config
        if not shape.prefill_seqs:
            rows = self._pad(shape.decode_rows)
            seqs = rows
        else:
            rows = shape.decode_rows
            seqs = shape.prefill_seqs + rows
            if c.pad_prefill:
                seqs = self._pad(seqs)
        verify = verify_rows_tokens(shape, rows)
        ms = (
            c.base_ms
            + c.per_seq_ms * seqs
            + c.per_prefill_token_ms * (shape.prefill_tokens + verify)
            + c.per_context_token_ms * shape.decode_context_tokens
        )
        return ms / 1000.0

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        c = self.config
        fixed = self._fixed.get(rows)
        if fixed is None:
            fixed = c.base_ms + c.per_seq_ms * self._pad(rows)
            self._fixed[rows] = fixed
        return affine_span_s(fixed, c.per_context_token_ms, context_tokens, growth, k)
