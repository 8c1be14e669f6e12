"""SGLang preset: ``python -m sglang.launch_server`` flags → the simulator's knobs.

Defaults and derivations are SGLang v0.5's (``python/sglang/srt/server_args.py``,
``ServerArgs`` and ``_handle_gpu_memory_settings``; ``model_executor/cuda_graph_runner.py``;
``managers/scheduler.py``). Where SGLang derives a default from the GPU, the GPU is the
roofline cost's ``hardware`` (its ``memory_gib``); with another cost model SGLang's
fallback for an unknown device is used.

=============================  ====================================================
flag (default)                 knob
=============================  ====================================================
max_running_requests (2048)    scheduler.max_running_requests. SGLang derives it as
                               ``min(max_total_tokens // 2, request-pool size)``, the
                               pool holding 2048-4096 requests (``model_runner.py``);
                               2048 is the pool's floor, and the KV pool binds first
                               under any real load. Give the value the server logs;
                               required for hybrid models (one state slot per request).
chunked_prefill_size (by GPU)  scheduler.chunked_prefill_size; -1 → None (off).
                               < 20 GiB or < 35 GiB: 2048; < 60: 4096; < 160: 8192;
                               larger: 16384; unknown device: 4096.
max_prefill_tokens (16384)     scheduler.max_prefill_tokens
enable_mixed_chunk (false)     scheduler.enable_mixed_chunk
schedule_policy (fcfs)         scheduler.schedule_policy (fcfs | lpm modelled; SGLang
                               before v0.4 defaulted to lpm)
schedule_conservativeness (1)  scheduler.new_token_ratio = min(0.1 × value, 1): the
                               floor SGLang's adaptive ratio decays to (its
                               ``min_new_token_ratio`` scales with this flag)
page_size (1)                  kv_cache.block_size (our cache unit is the page)
mem_fraction_static (by GPU)   kv_cache.num_blocks: auto, mem_fraction = the flag,
                               activation_reserve_gib = 0 (the static fraction holds
                               weights + KV only; activations live in the rest).
                               Default ``(mem − reserved) / mem``, reserved MB = 512 +
                               1.5 × max(chunk, 2048) + 2 × cuda_graph_max_bs +
                               1024 × tp / 8, at least 10240 above 60 GiB; 0.88 for an
                               unknown device.
max_total_tokens (none)        kv_cache.num_blocks = max_total_tokens // page_size
                               (SGLang caps the memory-sized pool at it; taken as the
                               pool, assuming the cap is below what memory allows)
disable_radix_cache (false)    prefix_cache: radix (None when set)
cuda_graph_max_bs (by GPU)     cost.padding: SGLang's captured sizes [1, 2, 4, 8, 12,
                               16..256 step 8, 272..496 step 16, 512.. step 32] up to
                               it, cut at max_running_requests (which is added when the
                               graphs go beyond it). < 20 GiB: 8; < 35: 24 (80 with
                               tp ≥ 4); < 60: 32 (160); < 160: 256 (512); larger: 512;
                               unknown device: 160.
cuda_graph_bs (list)           cost.padding: exactly these sizes (cut as above)
disable_cuda_graph (false)     cost.padding: none (eager)
disable_cuda_graph_padding     cost.padding: every size 1..cuda_graph_max_bs
kv_cache_dtype (auto)          cost.kv_dtype (roofline): fp8_e4m3 / fp8_e5m2 → fp8
tp_size (1)                    cost.tp (roofline)
quantization (none)            cost.weight_dtype (roofline): fp8 → fp8
speculative_algorithm (none)   speculative.algorithm (acceptance from the scenario's block)
speculative_num_steps (3)      speculative.num_steps (topk must be 1, draft tokens steps + 1)
mamba_scheduler_strategy       hybrid models only (alias ``mamba_radix_cache_strategy``);
(no_buffer)                    see "Mamba state" below: prefix_cache stays radix;
                               no_buffer with speculative decoding and the radix cache
                               is refused, as SGLang refuses it
mamba_track_interval (256),    accepted, not modelled (see below)
mamba_full_memory_ratio (0.9),
max_mamba_cache_size, mamba_ssm_dtype
=============================  ====================================================

Mamba state (hybrid models: linear-attention / state-space layers). A cached prefix of
a hybrid model is reusable only with the recurrent state at its end, so SGLang's radix
cache for these models (``mem_cache/mamba_radix_cache.py``, ``MambaRadixCache``) keeps
state checkpoints in the tree. ``--mamba-scheduler-strategy`` says where they come
from (``server_args.py``, ``ServerArgs._handle_mamba_radix_cache``):

- ``no_buffer`` (default): no spare state slot per request; with the radix cache on
  SGLang turns the overlap scheduler off, and with speculative decoding it refuses to
  start ("not compatible with radix cache when using --mamba-scheduler-strategy
  no_buffer ... use extra_buffer") — refused here too, in one line;
- ``extra_buffer``: two spare "ping-pong" state slots per running request
  (``mem_cache/common.py``: ``MAMBA_STATE_PER_REQ_PREFIX_CACHE = 3`` against
  ``MAMBA_STATE_PER_REQ_NO_CACHE = 1``, charged in ``alloc_req_slots``) into which the
  state is copied every ``mamba_track_interval`` tokens, so prefix caching runs with
  speculative decoding and the overlap scheduler;
- ``auto``: taken as ``extra_buffer`` when speculative decoding and the radix cache are
  both on, else ``no_buffer`` (the rule SGLang applies to NemotronH in its model
  defaults; ASSUMED for other hybrid models).

Modelled: which launches run at all, and that the radix cache is on for hybrid models
(``prefix_cache: radix``, unless ``--disable-radix-cache``). Not modelled, and why:
the spare slots' memory (SGLang sizes its state pool from ``mamba_full_memory_ratio``
and ``max_mamba_cache_size`` in ``model_runner_kv_cache_mixin.py``, not per running
request; the catalog reserves one state per running-request slot, ``cost/catalog.py``):
for Qwen3.5-4B, 2 × 16 requests × 51.5 MB = 1.6 GB, about 1 % of the B200 KV pool of
``scenarios/sglang_qwen35_4b_b200.yaml``, which none of its workloads fills; the
checkpoint granularity (``mamba_track_interval``: a hit is reusable at a tracked
position only; our radix cache matches whole pages); the state dtype
(``mamba_ssm_dtype``: the catalog's state bytes are fixed); the overlap scheduler
(not modelled by the engine for any strategy).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from lyra_simpy.cost.catalog import model_catalog
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

MAX_RUNNING_REQUESTS = 2048
"""Default ``max_running_requests`` (see the module docstring)."""
MAX_PREFILL_TOKENS = 16384
"""``ServerArgs.max_prefill_tokens``."""

NO_EFFECT = frozenset(
    {
        "model_path", "tokenizer_path", "host", "port", "trust_remote_code", "served_model_name",
        "log_level", "log_requests", "api_key", "random_seed", "context_length", "dtype",
        "revision", "download_dir", "enable_metrics", "show_time_cost", "skip_server_warmup",
        "attention_backend", "sampling_backend", "grammar_backend", "disable_overlap_schedule",
        "enable_cache_report", "watchdog_timeout", "tokenizer_mode", "load_format",
        "mamba_track_interval", "mamba_full_memory_ratio", "max_mamba_cache_size",
        "mamba_ssm_dtype",
    }
)  # fmt: skip
"""Flags accepted and ignored: they do not change what is simulated (``dtype`` is the
activation dtype; bf16 and fp16 have the same bytes). ``context_length`` only limits
what a request may hold; the workload sets the lengths. The ``mamba_*`` sizing flags:
see "Mamba state" in the module docstring."""

ALIASES = {
    "tp": "tp_size",
    "model": "model_path",
    "mamba_radix_cache_strategy": "mamba_scheduler_strategy",
}
"""Short spellings SGLang's argparse also accepts."""


class SGLangFlags(Flags):
    """The SGLang flags that change the simulation (None: SGLang's default)."""

    max_running_requests: PositiveInt | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: PositiveInt | None = None
    enable_mixed_chunk: bool | None = None
    schedule_policy: Literal["fcfs", "lpm"] | None = None
    schedule_conservativeness: PositiveFloat | None = None
    page_size: PositiveInt | None = None
    mem_fraction_static: float | None = None
    max_total_tokens: PositiveInt | None = None
    disable_radix_cache: bool | None = None
    cuda_graph_max_bs: PositiveInt | None = None
    cuda_graph_bs: list[PositiveInt] | None = None
    disable_cuda_graph: bool | None = None
    disable_cuda_graph_padding: bool | None = None
    kv_cache_dtype: str | None = None
    tp_size: PositiveInt | None = None
    quantization: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    mamba_scheduler_strategy: Literal["auto", "no_buffer", "extra_buffer"] | None = None


class SGLangEngine(EngineBlock):
    """``engine: {name: sglang, flags: {...}, command: ...}``."""

    name: Literal["sglang"] = "sglang"
    flags: dict[str, Any] = Field(default_factory=dict)
    command: str | None = None


def gpu_defaults(mem_gib: float | None, tp: int) -> tuple[int, int]:
    """SGLang's (chunked_prefill_size, cuda_graph_max_bs) for a device of *mem_gib*."""
    if mem_gib is None:
        return 4096, 160
    if mem_gib < 20:
        return 2048, 8
    if mem_gib < 35:
        return 2048, 24 if tp < 4 else 80
    if mem_gib < 60:
        return 4096, 32 if tp < 4 else 160
    if mem_gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def mem_fraction_default(
    mem_gib: float | None, chunk: int | None, max_prefill: int, graph_bs: int, tp: int
) -> float:
    """SGLang's ``mem_fraction_static`` when the flag is left out."""
    if mem_gib is None:
        return 0.88
    mem_mb = mem_gib * 1024
    reserved = 512 + max(chunk if chunk is not None else max_prefill, 2048) * 1.5
    reserved += graph_bs * 2 + tp / 8 * 1024
    if mem_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem_mb - reserved) / mem_mb, 3)


def capture_sizes(max_bs: int, max_running: int, every: bool = False) -> list[int]:
    """SGLang's CUDA-graph batch sizes up to *max_bs*, cut at *max_running*."""
    if every:
        sizes = list(range(1, max_bs + 1))
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max_bs + 1, 32))
        sizes = [s for s in sizes if s <= max_bs]
    return cut_at(sizes, max_running)


def cut_at(sizes: list[int], max_running: int) -> list[int]:
    """``cuda_graph_runner.get_batch_sizes_to_capture``: sizes above the request pool
    are dropped, and the pool size captured instead."""
    if max(sizes) > max_running:
        sizes = [*sizes, max_running]
    return sorted({s for s in sizes if s <= max_running})


def _hybrid(raw: dict[str, Any]) -> bool:
    """Whether the roofline model keeps a state per request (linear-attention layers)."""
    cost = cost_of(raw)
    model = model_catalog().get(str(cost.get("model")))
    return cost.get("name") == "roofline" and model is not None and model.linear_layers > 0


SPECULATIVE_NUM_STEPS = 3
"""Draft steps when ``--speculative-num-steps`` is left out (SGLang picks per model;
3 is its common choice for EAGLE/NEXTN)."""


def knobs(f: SGLangFlags, raw: dict[str, Any]) -> Knobs:
    """The knobs of an SGLang launch (see the module docstring)."""
    spec = _speculative(f, raw)
    tp = f.tp_size or 1
    mem = gpu_memory_gib(raw)
    chunk_default, graph_default = gpu_defaults(mem, tp)
    chunk: int | None = chunk_default if f.chunked_prefill_size is None else f.chunked_prefill_size
    if chunk is not None and chunk <= 0:
        if chunk != -1:
            raise ScenarioError(
                f"engine.flags.chunked_prefill_size: got {chunk}, must be > 0 or -1 (off)"
            )
        chunk = None
    if f.mem_fraction_static is not None and not 0 < f.mem_fraction_static <= 1:
        raise ScenarioError(
            f"engine.flags.mem_fraction_static: got {f.mem_fraction_static}, must be in (0, 1]"
        )
    if f.max_running_requests is None and _hybrid(raw):
        raise ScenarioError(
            f"engine.flags.max_running_requests: required with the hybrid model "
            f"{cost_of(raw)['model']!r} (SGLang sizes its state pool for these itself; "
            f"{MAX_RUNNING_REQUESTS} state slots would not fit): give the value the server logs"
        )
    max_running = f.max_running_requests or MAX_RUNNING_REQUESTS
    max_prefill = f.max_prefill_tokens or MAX_PREFILL_TOKENS
    ratio = min(0.1 * (f.schedule_conservativeness or 1.0), 1.0)
    out: Knobs = {
        "scheduler.name": Knob("prefill_first"),
        "scheduler.max_running_requests": knob(f, "max_running_requests", max_running),
        "scheduler.chunked_prefill_size": knob(f, "chunked_prefill_size", chunk),
        "scheduler.max_prefill_tokens": knob(f, "max_prefill_tokens", max_prefill),
        "scheduler.enable_mixed_chunk": knob(f, "enable_mixed_chunk", bool(f.enable_mixed_chunk)),
        "scheduler.schedule_policy": knob(f, "schedule_policy", f.schedule_policy or "fcfs"),
        "scheduler.new_token_ratio": knob(f, "schedule_conservativeness", ratio),
        "kv_cache.block_size": knob(f, "page_size", f.page_size or 1),
        "prefix_cache": knob(
            f, "disable_radix_cache", None if f.disable_radix_cache else {"name": "radix"}
        ),
    }
    mamba_strategy(f, raw, bool(spec))
    graph_bs = f.cuda_graph_max_bs or (max(f.cuda_graph_bs) if f.cuda_graph_bs else graph_default)
    fraction = mem_fraction_default(mem, chunk, max_prefill, graph_bs, tp)
    page = f.page_size or 1
    cap = f.max_total_tokens
    pool = None if cap is None else Knob(max(cap // page, 1), "max_total_tokens", cap)
    out.update(memory_knobs(raw, "mem_fraction_static", f.mem_fraction_static, fraction, 0.0, pool))
    if f.disable_cuda_graph:
        out["cost.padding"] = Knob("none", "disable_cuda_graph", True)
    elif f.cuda_graph_bs:
        out["cost.padding"] = Knob(
            cut_at(f.cuda_graph_bs, max_running), "cuda_graph_bs", f.cuda_graph_bs
        )
    else:
        sizes = capture_sizes(graph_bs, max_running, bool(f.disable_cuda_graph_padding))
        out["cost.padding"] = knob(f, "cuda_graph_max_bs", sizes)
    fp8 = ("fp8_e4m3", "fp8_e5m2", "fp8")
    kv = fp8_or_bf16("kv_cache_dtype", f.kv_cache_dtype, fp8, ("auto", "bf16", "bfloat16"))
    roofline_only(raw, "kv_cache_dtype", f.kv_cache_dtype, out, "kv_dtype", kv)
    roofline_only(raw, "tp_size", f.tp_size, out, "tp", tp)
    weights = fp8_or_bf16("quantization", f.quantization, ("fp8",), ())
    roofline_only(raw, "quantization", f.quantization, out, "weight_dtype", weights)
    out.update(spec)
    return out


def mamba_strategy(f: SGLangFlags, raw: dict[str, Any], speculative: bool) -> str | None:
    """The ``--mamba-scheduler-strategy`` a hybrid model runs with (None: not hybrid);
    refuses what SGLang refuses (see "Mamba state" in the module docstring)."""
    if not _hybrid(raw):
        return None
    radix = not f.disable_radix_cache
    strategy = f.mamba_scheduler_strategy or "no_buffer"
    if strategy == "auto":
        strategy = "extra_buffer" if speculative and radix else "no_buffer"
    if strategy == "no_buffer" and speculative and radix:
        given = f.mamba_scheduler_strategy
        shown = f"{given!r}" if given is not None else "'no_buffer' (SGLang's default)"
        raise ScenarioError(
            f"engine.flags.mamba_scheduler_strategy: got {shown}, which SGLang refuses with "
            "speculative decoding and the radix cache on a hybrid model "
            "(server_args.py, _handle_mamba_radix_cache): use extra_buffer, or "
            "--disable-radix-cache"
        )
    return strategy


def _speculative(f: SGLangFlags, raw: dict[str, Any]) -> Knobs:
    """``--speculative-*`` → the scenario's ``speculative`` block. A chain only
    (``--speculative-eagle-topk 1``, ``--speculative-num-draft-tokens`` = steps + 1, as
    SGLang requires then); acceptance is not a launch flag but a property of model and
    traffic: the scenario's ``speculative`` block must give it."""
    names = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
    if f.speculative_algorithm is None:
        for name in (*names, "speculative_draft_model_path"):
            if getattr(f, name) is not None:
                raise ScenarioError(
                    f"engine.flags.{name}: got {getattr(f, name)!r}, must come with "
                    "--speculative-algorithm"
                )
        return {}
    if (f.speculative_eagle_topk or 1) != 1:
        raise ScenarioError(
            f"engine.flags.speculative_eagle_topk: got {f.speculative_eagle_topk}, must be 1 "
            "(tree drafts are not modelled; see lyra_simpy.engine.speculative)"
        )
    steps = f.speculative_num_steps or SPECULATIVE_NUM_STEPS
    drafts = f.speculative_num_draft_tokens
    if drafts is not None and drafts != steps + 1:
        raise ScenarioError(
            f"engine.flags.speculative_num_draft_tokens: got {drafts}, must be "
            f"speculative_num_steps + 1 ({steps + 1}) with topk 1, as SGLang requires"
        )
    steps_knob = knob(f, "speculative_num_steps", steps)
    return speculative_knobs(raw, "speculative_algorithm", f.speculative_algorithm, steps_knob)
