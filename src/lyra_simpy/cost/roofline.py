"""The roofline cost model: hardware catalog × model catalog.

One iteration costs two phases, each ``max(FLOPs / (peak × compute_efficiency), bytes /
(bandwidth × bandwidth_efficiency))`` (Williams et al., "Roofline", CACM 2009), plus
``overhead_ms`` and, with ``tp > 1``, the all-reduces:

- *linear layers*: FLOPs ``2 × body parameters × tokens + 2 × vocabulary × hidden ×
  sequences`` (the LM head runs once per sequence); bytes: the weights, read once per
  iteration.
- *attention*: FLOPs ``4 × heads × head_dim × full-attention layers × (query, key)
  pairs``: the prefill pairs, causal (a sequence's new tokens see the cached ones and
  the earlier new ones: ``new × cached + new²/2``, with ``Σ new²`` taken as ``T²/seqs``,
  exact for one prompt or equal chunks), plus one pair per context token for each
  decode; bytes: the KV each decode reads (its whole context), the KV written for every
  new token, and the fixed state of linear-attention layers per sequence (hybrid
  models). The prefill's read of cached KV is not counted (compute bound there).
- *tensor parallelism*: FLOPs and bytes split over ``tp`` devices (KV heads over
  ``min(tp, kv_heads)``); two ring all-reduces per layer (Megatron-LM: after attention
  and after the MLP), each ``allreduce_latency_us + 2 (tp − 1) / tp × tokens × hidden
  × 2 B / link bandwidth``.

Decode-only batches are padded (CUDA graphs, :mod:`~lyra_simpy.cost.padding`); the
padded rows pay the linear layers, not attention. Speculative drafts being verified
(``BatchShape.verify_tokens``) are tokens through the linear layers, each attending to
its sequence's context; a decode-only iteration with them is still padded and replayed
as a graph. An iteration run eagerly (with prompt tokens, above the largest captured
size, or ``padding: none``) takes at least ``overhead_ms + eager_launch_ms``: the GPU
cannot finish kernels faster than the CPU launches them. Activation traffic, norms and
sampling are left out (they are in ``overhead_ms`` when it is fitted end to end).
The default efficiencies are fitted to published per-op measurements:
``python -m lyra_simpy.calibration.roofline_check`` (``docs/calibration-roofline.md``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import SHORT_SPAN, BatchShape, verify_rows_tokens
from lyra_simpy.cost.catalog import (
    DTYPE_BYTES,
    Dtype,
    hardware_catalog,
    kv_bytes_per_token,
    kv_capacity_blocks,
    model_catalog,
    state_bytes_per_request,
)
from lyra_simpy.cost.jitter import Jitter, refuse_fitted_without_fit
from lyra_simpy.cost.padding import Padder, Padding, check_padding
from lyra_simpy.cost.wake import Wake, refuse_fitted_wake

_ACTIVATION_BYTES = 2
"""All-reduce messages carry bf16 activations (vLLM, SGLang)."""


class RooflineCostConfig(Closed):
    """Roofline of a catalog model on a catalog device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["roofline"] = "roofline"
    hardware: str
    """Key of ``data/hardware.yaml`` (e.g. ``h200_sxm``)."""
    model: str
    """Key of ``data/models.yaml`` (e.g. ``llama_3_8b``)."""
    tp: PositiveInt = 1
    """Tensor-parallel degree (devices per replica)."""
    weight_dtype: Dtype = "bf16"
    """``fp8``: half the weight bytes, FP8 tensor peak where the device has one
    (W8A8 as vLLM's fp8 on Hopper; weight-only FP8 at the BF16 peak elsewhere)."""
    kv_dtype: Dtype = "bf16"
    """``fp8`` halves the KV bytes per token (vLLM ``--kv-cache-dtype fp8``)."""
    compute_efficiency: Annotated[float, Field(gt=0, le=1)] = 0.75
    """Achieved fraction of the dense tensor peak. Default fitted on aiconfigurator's
    Llama-3-8B prefills of 2k-8k tokens on A100/H100/H200/B200 (``--fit``)."""
    bandwidth_efficiency: Annotated[float, Field(gt=0, le=1)] = 0.7
    """Achieved fraction of peak HBM bandwidth. Default fitted on aiconfigurator's
    Llama-3-8B decodes of batch <= 8 on the same devices (weight-read bound)."""
    overhead_ms: NonNegativeFloat = 1.5
    """Fixed time per iteration (kernel launches, norms, sampling, scheduler). Default
    fitted on LLM-Inference-Bench's batch-1 vLLM runs on A100/H100; 0 compares with
    per-op tables."""
    allreduce_latency_us: NonNegativeFloat = 10.0
    """Latency of one all-reduce (aiconfigurator ``p2p_latency``: 10 us)."""
    padding: Annotated[Padding, BeforeValidator(check_padding)] = Field(default="none")
    """CUDA-graph padding of decode-only batches (none, max_batch, or captured sizes)."""
    eager_launch_ms: NonNegativeFloat = 0.0
    """CPU time to launch one forward pass's kernels one by one (no CUDA graph): an
    eager iteration lasts at least ``overhead_ms`` + this. Replaying a captured graph
    launches it once, which is what CUDA graphs buy for small batches. 0 (default)
    treats eager iterations as never launch bound."""
    jitter: Jitter | None = None
    """Seeded step-time noise on every iteration (default none: exact times); see
    :mod:`~lyra_simpy.cost.jitter`."""
    wake: Wake | None = None
    """The first iteration after idle takes longer (default none); see
    :mod:`~lyra_simpy.cost.wake`."""

    @model_validator(mode="after")
    def _jitter_has_no_fit(self) -> RooflineCostConfig:
        refuse_fitted_without_fit(self.jitter, "the roofline cost model")
        refuse_fitted_wake(self.wake, "the roofline cost model")
        return self

    @field_validator("hardware")
    @classmethod
    def _known_hardware(cls, value: str) -> str:
        if value not in hardware_catalog():
            raise ValueError(f"must be one of {sorted(hardware_catalog())}")
        return value

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in model_catalog():
            raise ValueError(f"must be one of {sorted(model_catalog())}")
        return value

    @model_validator(mode="after")
    def _tp_divides_heads(self) -> RooflineCostConfig:
        heads = model_catalog()[self.model].num_heads
        if heads % self.tp:
            raise ValueError(f"tp: got {self.tp}, must divide the model's {heads} heads")
        return self

    def calibration(self) -> str:
        """Where the numbers came from, for the run's manifest."""
        return (
            "package catalogs lyra_simpy/data/hardware.yaml and models.yaml (published "
            "figures, sources inline); efficiencies as in parameters"
        )

    def kv_blocks(
        self, block_size: int, mem_fraction: float, activation_reserve_gib: float, max_running: int
    ) -> int | None:
        """KV blocks that fit beside the weights (``kv_cache.num_blocks: auto``)."""
        return kv_capacity_blocks(
            hardware_catalog()[self.hardware],
            model_catalog()[self.model],
            tp=self.tp,
            weight_dtype=self.weight_dtype,
            kv_dtype=self.kv_dtype,
            block_size=block_size,
            mem_fraction=mem_fraction,
            activation_reserve_gib=activation_reserve_gib,
            max_running=max_running,
        )


class RooflineCost:
    """Iteration time from :class:`RooflineCostConfig`; *max_batch* resolves
    ``max_batch`` padding to the scheduler's batch width."""

    def __init__(self, config: RooflineCostConfig, max_batch: int) -> None:
        self.config = c = config
        hw = hardware_catalog()[c.hardware]
        m = model_catalog()[c.model]
        self.hardware, self.model = hw, m
        self._pad = Padder(c.padding, max_batch)
        tp = c.tp
        fp8 = c.weight_dtype == "fp8" and hw.fp8_tflops is not None
        flops_s = (hw.fp8_tflops if fp8 and hw.fp8_tflops else hw.bf16_tflops) * 1e12
        flops_s *= c.compute_efficiency
        bytes_s = hw.hbm_bandwidth_tbps * 1e12 * c.bandwidth_efficiency
        # Seconds per unit of work, per device.
        self._s_per_token = 2 * m.body_params / tp / flops_s
        self._s_per_seq = 2 * m.head_params / tp / flops_s
        self._weights_s = (m.body_params + m.head_params) * DTYPE_BYTES[c.weight_dtype]
        self._weights_s /= tp * bytes_s
        self._s_per_pair = 4 * m.num_heads * m.head_dim * m.attention_layers / tp / flops_s
        kv_split = min(tp, m.num_kv_heads)
        self._kv_s_per_token = kv_bytes_per_token(m, c.kv_dtype) / kv_split / bytes_s
        self._state_s_per_seq = state_bytes_per_request(m) / tp / bytes_s
        self._fixed_s = c.overhead_ms / 1000.0
        if tp > 1:
            n = 2 * m.num_layers
            self._fixed_s += n * c.allreduce_latency_us * 1e-6
            link = hw.interconnect_gbps * 1e9
            self._ar_s_per_token = n * 2 * (tp - 1) / tp * m.hidden_size * _ACTIVATION_BYTES / link
        else:
            self._ar_s_per_token = 0.0
        launch_s = c.eager_launch_ms / 1000.0
        self._eager_floor_s = self._fixed_s + launch_s if launch_s else 0.0
        self._decode: dict[int, tuple[float, float, float]] = {}
        """Row count → (time apart from attention, attention bytes time apart from the
        context read, the eager launch floor or 0 under a graph), once per row count."""

    def _linear_s(self, tokens: int, seqs: int) -> float:
        compute = self._s_per_token * tokens + self._s_per_seq * seqs
        return compute if compute > self._weights_s else self._weights_s

    def layers_s(self, tokens: int) -> float:
        """The linear layers alone (no LM head, attention or overhead), for comparison
        with per-operator profiles such as Vidur's ``mlp.csv``."""
        m = self.model
        compute = self._s_per_token * tokens
        weights = self._weights_s * m.body_params / (m.body_params + m.head_params)
        return compute if compute > weights else weights

    def iteration_s(self, shape: BatchShape) -> float:
        if not shape.prefill_seqs and not shape.verify_tokens:
            return self.decode_span_s(shape.decode_rows, shape.decode_context_tokens, 0, 1)[0]
        graph = not shape.prefill_seqs and self._pad.captured(shape.decode_rows)
        rows = self._pad(shape.decode_rows) if graph else shape.decode_rows
        verify = verify_rows_tokens(shape, rows)
        tokens = shape.prefill_tokens + rows + verify
        seqs = shape.prefill_seqs + rows
        new = shape.prefill_tokens
        pairs: float = shape.prefill_attention_tokens
        if shape.prefill_seqs:
            pairs -= new * new / (2 * shape.prefill_seqs)
        ctx = shape.decode_context_tokens
        pairs += ctx + (shape.verify_tokens * ctx / shape.decode_seqs if verify else 0)
        attn_compute = self._s_per_pair * pairs
        attn_bytes = self._kv_s_per_token * (ctx + tokens) + self._state_s_per_seq * seqs
        attn = attn_compute if attn_compute > attn_bytes else attn_bytes
        t = self._linear_s(tokens, seqs) + attn + self._fixed_s + self._ar_s_per_token * tokens
        floor = 0.0 if graph else self._eager_floor_s
        return t if t > floor else floor

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        parts = self._decode.get(rows)
        if parts is None:
            padded = self._pad(rows)
            base = self._linear_s(padded, padded) + self._fixed_s + self._ar_s_per_token * padded
            bytes0 = self._kv_s_per_token * padded + self._state_s_per_seq * padded
            floor = 0.0 if self._pad.captured(rows) else self._eager_floor_s
            parts = (base, bytes0, floor)
            self._decode[rows] = parts
        base, bytes0, floor = parts
        per_pair, per_kv = self._s_per_pair, self._kv_s_per_token
        if k <= SHORT_SPAN:
            out = []
            for j in range(k):
                ctx = context_tokens + growth * j
                compute, memory = per_pair * ctx, bytes0 + per_kv * ctx
                t = base + (compute if compute > memory else memory)
                out.append(t if t > floor else floor)
            return out
        ctx_arr = context_tokens + growth * np.arange(k, dtype=np.int64)
        times = base + np.maximum(per_pair * ctx_arr, bytes0 + per_kv * ctx_arr)
        if floor:
            times = np.maximum(times, floor)
        result: list[float] = times.tolist()
        return result

    def describe(self) -> dict[str, object]:
        """Catalog entries and derived per-iteration figures, for the manifest."""
        m, c = self.model, self.config
        return {
            "hardware": self.hardware.model_dump(),
            "model": m.model_dump(),
            "kv_bytes_per_token": kv_bytes_per_token(m, c.kv_dtype),
            "state_bytes_per_request": state_bytes_per_request(m),
            "weights_read_ms": self._weights_s * 1000.0,
        }
