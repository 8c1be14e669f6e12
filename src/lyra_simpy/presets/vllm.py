"""vLLM preset: ``vllm serve`` flags → the simulator's knobs.

Defaults are vLLM V1's (v0.10/v0.11, ``vllm/engine/arg_utils.py``: ``EngineArgs`` and
``get_batch_defaults`` for the ``OPENAI_API_SERVER`` usage context, i.e. ``vllm
serve``; ``vllm/config/compilation.py`` for the CUDA-graph sizes). Where vLLM picks a
default by device, the device is the roofline cost's ``hardware``; with another cost
model vLLM's branch for an unknown device (memory 0) is used.

==================================  =================================================
flag (default)                      knob
==================================  =================================================
enable_chunked_prefill (true)       scheduler.name: chunked_prefill; false (or
                                    ``--no-enable-chunked-prefill``): continuous
max_num_seqs (1024 / 256)           scheduler.max_num_seqs: 1024 on devices of
                                    ≥ 70 GiB that are not A100s, else 256; never more
                                    than max_num_batched_tokens
max_num_batched_tokens (8192/2048)  scheduler.max_num_batched_tokens: with chunking
                                    8192 on ≥ 70 GiB non-A100 devices, else 2048;
                                    without it max_model_len (8192 when not given:
                                    vLLM uses the model's context length)
long_prefill_token_threshold (0)    scheduler.long_prefill_token_threshold (chunked)
scheduling_policy (fcfs)            scheduler.queue_policy (fcfs only: ``priority``
                                    needs per-request priorities, not modelled)
block_size (16)                     kv_cache.block_size
gpu_memory_utilization (0.9)        kv_cache.num_blocks: auto, mem_fraction = the flag
                                    (activation_reserve_gib stays at its default: vLLM's
                                    fraction covers activations and graphs too)
num_gpu_blocks_override (none)      kv_cache.num_blocks (instead of the memory rule)
enable_prefix_caching (true)        prefix_cache: block_hash (None when false)
enforce_eager (false)               cost.padding: none
max_cudagraph_capture_size          cost.padding: vLLM's capture sizes [1, 2, 4,
  (min(2 × max_num_seqs, 512))      8..248 step 8, 256.. step 16] up to it
kv_cache_dtype (auto)               cost.kv_dtype (roofline): fp8 / fp8_e4m3 /
                                    fp8_e5m2 → fp8
tensor_parallel_size (1)            cost.tp (roofline)
quantization (none)                 cost.weight_dtype (roofline): fp8 → fp8
speculative_config (none)           speculative.algorithm = its ``method`` (or
                                    ``draft_model`` with only ``model``),
                                    speculative.num_steps = ``num_speculative_tokens``;
                                    JSON text or a mapping; acceptance from the
                                    scenario's block; a token tree or
                                    ``disable_by_batch_size`` is an error (not modelled)
speculative_model,                  V0 flags, removed in V1: an error naming
  num_speculative_tokens            ``--speculative-config``
==================================  =================================================

vLLM V1 also runs mixed batches through piecewise CUDA graphs padded by token count;
only decode-only batches are padded here (:mod:`~lyra_simpy.cost.padding`).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from lyra_simpy.errors import ScenarioError
from lyra_simpy.presets.common import (
    EngineBlock,
    Flags,
    Knob,
    Knobs,
    cost_of,
    fp8_or_bf16,
    gpu_memory_gib,
    knob,
    memory_knobs,
    roofline_only,
    speculative_knobs,
)

GPU_MEMORY_UTILIZATION = 0.9
"""``CacheConfig.gpu_memory_utilization``."""
BLOCK_SIZE = 16
"""``CacheConfig.block_size`` on CUDA."""
NO_CHUNKING_BUDGET = 8192
"""Token budget without chunking when ``max_model_len`` is not given."""

NO_EFFECT = frozenset(
    {
        "model", "tokenizer", "host", "port", "trust_remote_code", "served_model_name",
        "uvicorn_log_level", "api_key", "seed", "dtype", "revision", "download_dir",
        "disable_log_requests", "disable_log_stats", "enable_log_requests", "max_logprobs",
        "generation_config", "tokenizer_mode", "load_format", "distributed_executor_backend",
        "chat_template", "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser",
    }
)  # fmt: skip
"""Flags accepted and ignored: they do not change what is simulated."""

ALIASES = {"tp": "tensor_parallel_size"}
"""Short spellings vLLM's argparse also accepts (``-tp``)."""


class VLLMFlags(Flags):
    """The vLLM flags that change the simulation (None: vLLM's default)."""

    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None
    max_model_len: PositiveInt | None = None
    enable_chunked_prefill: bool | None = None
    long_prefill_token_threshold: NonNegativeInt | None = None
    scheduling_policy: Literal["fcfs"] | None = None
    block_size: PositiveInt | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    num_gpu_blocks_override: PositiveInt | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    max_cudagraph_capture_size: PositiveInt | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: PositiveInt | None = None
    quantization: str | None = None
    speculative_config: Any = None
    speculative_model: str | None = None
    num_speculative_tokens: int | None = None


class VLLMEngine(EngineBlock):
    """``engine: {name: vllm, flags: {...}, command: ...}``."""

    name: Literal["vllm"] = "vllm"
    flags: dict[str, Any] = Field(default_factory=dict)
    command: str | None = None


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default ``cudagraph_capture_sizes`` up to *max_size*."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size] or [max_size]


def _large_device(raw: dict[str, Any]) -> bool:
    mem = gpu_memory_gib(raw)
    return mem is not None and mem >= 70 and "a100" not in str(cost_of(raw).get("hardware"))


def knobs(f: VLLMFlags, raw: dict[str, Any]) -> Knobs:
    """The knobs of a vLLM launch (see the module docstring)."""
    for name in ("speculative_model", "num_speculative_tokens"):
        if getattr(f, name) is not None:
            raise ScenarioError(
                f"engine.flags.{name}: got {getattr(f, name)!r}, a vLLM V0 flag; V1 takes "
                '--speculative-config \'{"method": ..., "num_speculative_tokens": N}\''
            )
    chunked = f.enable_chunked_prefill is not False
    large = _large_device(raw)
    if chunked:
        budget = f.max_num_batched_tokens or (8192 if large else 2048)
    else:
        budget = f.max_num_batched_tokens or f.max_model_len or NO_CHUNKING_BUDGET
    seqs = f.max_num_seqs or min(1024 if large else 256, budget)
    name = "chunked_prefill" if chunked else "continuous"
    out: Knobs = {
        "scheduler.name": knob(f, "enable_chunked_prefill", name),
        "scheduler.max_num_seqs": knob(f, "max_num_seqs", seqs),
        "scheduler.max_num_batched_tokens": knob(f, "max_num_batched_tokens", budget),
        "scheduler.queue_policy": knob(f, "scheduling_policy", "fcfs"),
        "kv_cache.block_size": knob(f, "block_size", f.block_size or BLOCK_SIZE),
        "prefix_cache": knob(
            f,
            "enable_prefix_caching",
            None if f.enable_prefix_caching is False else {"name": "block_hash"},
        ),
    }
    if chunked:
        threshold = f.long_prefill_token_threshold or 0
        out["scheduler.long_prefill_token_threshold"] = knob(
            f, "long_prefill_token_threshold", threshold
        )
    elif f.long_prefill_token_threshold is not None:
        raise ScenarioError(
            "engine.flags.long_prefill_token_threshold: got "
            f"{f.long_prefill_token_threshold}, only used with enable_chunked_prefill: true"
        )
    frac = f.gpu_memory_utilization
    blocks = f.num_gpu_blocks_override
    pool = None if blocks is None else Knob(blocks, "num_gpu_blocks_override", blocks)
    out.update(
        memory_knobs(raw, "gpu_memory_utilization", frac, GPU_MEMORY_UTILIZATION, None, pool)
    )
    if f.enforce_eager:
        out["cost.padding"] = Knob("none", "enforce_eager", True)
    else:
        graph_max = f.max_cudagraph_capture_size or min(2 * seqs, 512)
        out["cost.padding"] = knob(f, "max_cudagraph_capture_size", capture_sizes(graph_max))
    fp8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
    kv = fp8_or_bf16("kv_cache_dtype", f.kv_cache_dtype, fp8, ("auto", "bfloat16", "bf16"))
    roofline_only(raw, "kv_cache_dtype", f.kv_cache_dtype, out, "kv_dtype", kv)
    roofline_only(
        raw, "tensor_parallel_size", f.tensor_parallel_size, out, "tp", f.tensor_parallel_size or 1
    )
    weights = fp8_or_bf16("quantization", f.quantization, ("fp8",), ())
    roofline_only(raw, "quantization", f.quantization, out, "weight_dtype", weights)
    if f.speculative_config is not None:
        out.update(_speculative(f.speculative_config, raw))
    return out


SPECULATIVE_KEYS = ("method", "num_speculative_tokens")
"""``--speculative-config`` keys that set knobs."""
SPECULATIVE_NO_EFFECT = ("model", "draft_tensor_parallel_size", "quantization", "revision",
                         "max_model_len", "code_revision", "prompt_lookup_max",
                         "prompt_lookup_min")  # fmt: skip
"""Keys accepted with no effect on the simulation (the draft's cost and acceptance come
from the scenario's ``speculative`` block)."""


def _speculative(value: Any, raw: dict[str, Any]) -> Knobs:
    """``--speculative-config`` (vLLM's ``SpeculativeConfig``) → the speculative block."""
    where = "engine.flags.speculative_config"
    config = value
    if isinstance(value, str):
        try:
            config = json.loads(value)
        except json.JSONDecodeError:
            config = None
    if not isinstance(config, dict):
        raise ScenarioError(f"{where}: got {value!r}, must be a JSON object or a mapping")
    for key in config:
        if key not in SPECULATIVE_KEYS + SPECULATIVE_NO_EFFECT:
            raise ScenarioError(
                f"{where}.{key}: not modelled; known: {', '.join(SPECULATIVE_KEYS)} "
                f"(ignored: {', '.join(SPECULATIVE_NO_EFFECT)})"
            )
    steps = config.get("num_speculative_tokens")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ScenarioError(
            f"{where}.num_speculative_tokens: got {steps!r}, must be an integer >= 1"
        )
    method = config.get("method") or ("draft_model" if config.get("model") else None)
    if not isinstance(method, str):
        raise ScenarioError(f"{where}.method: got {method!r}, must name the draft method")
    return speculative_knobs(
        raw, "speculative_config", method, Knob(steps, "speculative_config", value)
    )
