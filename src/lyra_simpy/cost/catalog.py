"""Hardware and model catalogs (package data) and the memory arithmetic built on them.

``data/hardware.yaml`` holds published device figures (memory, HBM bandwidth, dense
BF16/FP8 peaks, tensor-parallel link bandwidth) and ``data/models.yaml`` model shapes
from their ``config.json``; every number carries its source in a comment there.

KV bytes per token (DESIGN §3) = 2 (K and V) × full-attention layers × KV heads ×
head dim × dtype bytes (FP8 KV halves it). Layers that are linear attention or state
space (hybrid models such as Qwen3.5) hold a fixed state per request instead.
KV capacity follows vLLM's ``gpu_memory_utilization`` accounting: device memory ×
``mem_fraction`` − weights − activation reserve, less (for hybrid models) one state slot
per running-request slot, as SGLang preallocates its Mamba state pool
(``max_running_requests`` slots); what remains, in blocks of ``block_size`` tokens.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.errors import LyraError, from_validation_error
from lyra_simpy.files import package_yaml

Dtype = Literal["bf16", "fp8"]
DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp8": 1}
"""Bytes per element of each weight / KV dtype."""
GIB = 1024**3


class CatalogError(LyraError):
    """A catalog entry that is missing or malformed (one line, naming the entry)."""


class Hardware(Closed):
    """One device: published peak figures (see ``data/hardware.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    memory_gib: PositiveFloat
    hbm_bandwidth_tbps: PositiveFloat
    """Peak device-memory bandwidth, 1e12 B/s."""
    bf16_tflops: PositiveFloat
    """Dense BF16 tensor peak, 1e12 FLOP/s."""
    fp8_tflops: PositiveFloat | None = None
    """Dense FP8 tensor peak; None where the device has no FP8 units."""
    interconnect_gbps: PositiveFloat
    """Tensor-parallel link bandwidth per device, one direction, 1e9 B/s."""


class Model(Closed):
    """One model's shape (see ``data/models.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    num_layers: PositiveInt
    full_attention_layers: PositiveInt | None = None
    """Layers with softmax attention (and a KV cache); None: all of them."""
    hidden_size: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    params_b: PositiveFloat
    """Parameters of the model that runs every step, 1e9."""
    tied_embeddings: bool = False
    linear_state_bytes: NonNegativeInt = 0
    """State held per request by each non-full-attention layer."""
    mtp_params_b: NonNegativeFloat = 0.0
    """Parameters of a multi-token-prediction draft head (held in memory)."""

    @model_validator(mode="after")
    def _hybrid_is_complete(self) -> Model:
        full = self.full_attention_layers
        if full is not None and full > self.num_layers:
            raise ValueError(f"full_attention_layers: got {full}, must be <= num_layers")
        if self.linear_layers and not self.linear_state_bytes:
            raise ValueError("linear_state_bytes: must be > 0 when some layers are linear")
        return self

    @property
    def attention_layers(self) -> int:
        return self.num_layers if self.full_attention_layers is None else self.full_attention_layers

    @property
    def linear_layers(self) -> int:
        return self.num_layers - self.attention_layers

    @property
    def head_params(self) -> int:
        """The LM head (vocabulary × hidden), read every step."""
        return self.vocab_size * self.hidden_size

    @property
    def body_params(self) -> float:
        """Parameters of the layers (everything but the embedding and LM head)."""
        embeddings = self.head_params * (1 if self.tied_embeddings else 2)
        return self.params_b * 1e9 - embeddings


def kv_bytes_per_token(model: Model, kv_dtype: str) -> int:
    """KV-cache bytes one token holds across all full-attention layers."""
    return 2 * model.attention_layers * model.num_kv_heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def state_bytes_per_request(model: Model) -> int:
    """Fixed state one request holds in the linear-attention / state-space layers."""
    return model.linear_layers * model.linear_state_bytes


def weight_bytes(model: Model, weight_dtype: str) -> float:
    """Bytes of weights held in memory (the model plus any MTP head)."""
    return (model.params_b + model.mtp_params_b) * 1e9 * DTYPE_BYTES[weight_dtype]


def kv_capacity_blocks(
    hardware: Hardware,
    model: Model,
    *,
    tp: int,
    weight_dtype: str,
    kv_dtype: str,
    block_size: int,
    mem_fraction: float,
    activation_reserve_gib: float,
    max_running: int,
) -> int:
    """KV blocks of *block_size* tokens that fit beside the weights on *tp* devices.

    ``(tp × memory × mem_fraction − weights − tp × activation reserve − max_running ×
    state per request) // (KV bytes per token × block_size)``; raises
    :class:`CatalogError` (one line) when nothing is left.
    """
    budget = tp * (hardware.memory_gib * mem_fraction - activation_reserve_gib) * GIB
    free = budget - weight_bytes(model, weight_dtype) - max_running * state_bytes_per_request(model)
    blocks = int(free // (kv_bytes_per_token(model, kv_dtype) * block_size))
    if blocks < 1:
        raise CatalogError(
            f"{model.label} ({weight_bytes(model, weight_dtype) / GIB:.1f} GiB of "
            f"{weight_dtype} weights) leaves no KV memory on {tp} x {hardware.label} at "
            f"mem_fraction {mem_fraction}; raise tp or mem_fraction, or use fp8 weights"
        )
    return blocks


def _parse(raw: Any, kind: type[BaseModel], where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or not raw:
        raise CatalogError(f"{where}: must be a mapping of entry name -> fields")
    out = {}
    for key, entry in raw.items():
        try:
            out[str(key)] = kind.model_validate(entry)
        except ValidationError as exc:
            raise CatalogError(str(from_validation_error(exc, f"{where}: {key}"))) from None
    return out


def parse_hardware(raw: Any, where: str = "hardware.yaml") -> dict[str, Hardware]:
    """Validate a hardware catalog given as a mapping (one-line :class:`CatalogError`)."""
    return _parse(raw, Hardware, where)


def parse_models(raw: Any, where: str = "models.yaml") -> dict[str, Model]:
    """Validate a model catalog given as a mapping (one-line :class:`CatalogError`)."""
    return _parse(raw, Model, where)


def _read(name: str) -> Any:
    return package_yaml(resources.files("lyra_simpy").joinpath("data").joinpath(name).read_text())


@functools.cache
def hardware_catalog() -> dict[str, Hardware]:
    """The packaged hardware catalog, keyed by the name a scenario uses."""
    return parse_hardware(_read("hardware.yaml"))


@functools.cache
def model_catalog() -> dict[str, Model]:
    """The packaged model catalog, keyed by the name a scenario uses."""
    return parse_models(_read("models.yaml"))
