"""llama.cpp preset: ``llama-server`` flags → the ``llamacpp`` scheduler and its KV pool.

Defaults are llama.cpp's at commit 0c1e570 (``common/common.h`` ``common_params``,
``common/arg.cpp`` for the spellings, ``tools/server/server.cpp`` ``main`` for the
server's own defaults); the mechanics are in :mod:`~lyra_simpy.policies.llamacpp`.

=================================  =====================================================
flag (default)                     knob
=================================  =====================================================
-np, --parallel (auto)             scheduler.n_parallel; auto (left out or -1): 4 slots
                                   and a unified KV buffer (``main``)
-kvu / -no-kvu (off once -np is    scheduler.kv_unified (``common_params.kv_unified =
  given)                           false``; only auto -np turns it on)
-c, --ctx-size (0)                 scheduler.n_ctx (0: the model's training context,
                                   scheduler.n_ctx_train, which the scenario gives)
-b, --batch-size (2048)            scheduler.n_batch
-ub, --ubatch-size (512)           scheduler.n_ubatch
-ctxcp, --ctx-checkpoints (32)     scheduler.ctx_checkpoints (made only on a model with
                                   sliding-window attention: scheduler.sliding_window,
                                   which the scenario gives)
--swa-full (off)                   scheduler.sliding_window: false (a full-size SWA
                                   cache needs no checkpoints, ``n_swa = 0``)
-cb / -nocb (on)                   scheduler.cont_batching
--cache-prompt / --no-cache-prompt scheduler.cache_prompt (the requests' default; a
  (on)                             request's own ``cache_prompt`` wins in llama.cpp)
-cram, --cache-ram (8192)          scheduler.cache_ram_mib (which slot states are
--cache-idle-slots /               copied into the cache at each request's launch, and
  --no-cache-idle-slots (on)       with ``-kvu`` whether idle slots are cleared then,
                                   which sets the cells a prompt attends over);
                                   scheduler.cache_idle_slots
(all of the above)                 kv_cache: block_size 1 (llama.cpp allocates cells,
                                   not blocks), num_blocks = the server's cells
                                   (``LlamaCppConfig.ctx_total``)
=================================  =====================================================

Accepted with no effect on the model (:data:`NO_EFFECT`): where the server runs and logs,
sampling, the chat template; ``-t``/``-tb`` threads and ``-fa`` flash attention (they
change step times, which the ``profile`` cost model takes from a profile measured with
the same flags: profile the server as it is launched); ``--cache-reuse`` and
``--slot-prompt-similarity`` (prompt reuse: not modelled, and without shared prefixes
they reuse nothing). Of the prompt cache in RAM, what it does to the KV cells and the
copy of slot states into it at each launch (:mod:`~lyra_simpy.policies.llamacpp_save`,
priced by the profile's prompt-cache probe) are modelled; its load of a similar cached
prompt is not.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator

from lyra_simpy.errors import ScenarioError
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.presets.common import EngineBlock, Flags, Knob, Knobs, knob

AUTO_PARALLEL = 4
"""Slots when ``-np`` is left out (``main``: "n_parallel is set to auto, using n_parallel =
4 and kv_unified = true")."""

NO_EFFECT = frozenset(
    {
        "model", "alias", "host", "port", "api_key", "threads", "threads_batch",
        "flash_attn", "n_gpu_layers", "mlock", "no_mmap", "mmap", "verbose", "log_disable",
        "log_file", "log_verbosity", "log_colors", "log_prefix", "log_timestamps", "metrics",
        "slots", "props", "jinja", "chat_template", "chat_template_file", "temp", "top_k",
        "top_p", "min_p", "seed", "n_predict", "timeout", "threads_http",
        "cache_reuse", "slot_prompt_similarity", "no_webui", "webui",
        "reasoning_format", "no_warmup", "warmup",
    }
)  # fmt: skip
"""Flags accepted and ignored (module docstring)."""

ALIASES = {
    "m": "model", "np": "n_parallel", "parallel": "n_parallel", "c": "ctx_size",
    "b": "batch_size", "ub": "ubatch_size", "kvu": "kv_unified",
    "ctxcp": "ctx_checkpoints", "swa_checkpoints": "ctx_checkpoints",
    "cb": "cont_batching", "t": "threads", "tb": "threads_batch", "fa": "flash_attn",
    "ngl": "n_gpu_layers", "gpu_layers": "n_gpu_layers", "cram": "cache_ram",
    "sps": "slot_prompt_similarity", "a": "alias", "to": "timeout", "n": "n_predict",
    "predict": "n_predict", "s": "seed",
}  # fmt: skip
"""llama.cpp's short and alternative spellings (``common/arg.cpp``)."""


class LlamaCppFlags(Flags):
    """The ``llama-server`` flags that change the simulation (None: llama.cpp's default)."""

    n_parallel: int | None = None
    ctx_size: NonNegativeInt | None = None
    batch_size: PositiveInt | None = None
    ubatch_size: PositiveInt | None = None
    kv_unified: bool | None = None
    ctx_checkpoints: NonNegativeInt | None = None
    swa_full: bool | None = None
    cont_batching: bool | None = None
    nocb: bool | None = None
    """``-nocb`` (= ``--no-cont-batching``)."""
    cache_prompt: bool | None = None
    cache_ram: int | None = None
    cache_idle_slots: bool | None = None

    @field_validator("cache_ram")
    @classmethod
    def _cache_ram(cls, value: int | None) -> int | None:
        if value is not None and value < -1:
            raise ValueError("must be >= 0 (MiB), or -1 (no limit)")
        return value

    @field_validator("n_parallel")
    @classmethod
    def _slots(cls, value: int | None) -> int | None:
        if value is not None and (value == 0 or value < -1):
            raise ValueError("must be >= 1, or -1 (auto)")  # arg.cpp refuses 0
        return value


class LlamaCppEngine(EngineBlock):
    """``engine: {name: llamacpp, flags: {...}, command: ...}``."""

    name: Literal["llamacpp"] = "llamacpp"
    flags: dict[str, Any] = Field(default_factory=dict)
    command: str | None = None


def knobs(f: LlamaCppFlags, raw: dict[str, Any]) -> Knobs:
    """The knobs of a ``llama-server`` launch (see the module docstring)."""
    auto = f.n_parallel is None or f.n_parallel == -1
    slots = AUTO_PARALLEL if auto else f.n_parallel
    unified = f.kv_unified if f.kv_unified is not None else auto
    if f.nocb and f.cont_batching:
        raise ScenarioError("engine.flags.nocb: got true with cont_batching: true; give one")
    cont = not f.nocb if f.nocb is not None else f.cont_batching is not False
    cont_flag = "nocb" if f.nocb is not None else "cont_batching"
    sched = raw.get("scheduler")
    own = sched if isinstance(sched, dict) else {}
    values: dict[str, Any] = {
        "n_parallel": slots,
        "n_ctx": f.ctx_size or 0,
        "kv_unified": unified,
        "n_batch": f.batch_size or 2048,
        "n_ubatch": f.ubatch_size or 512,
        "ctx_checkpoints": 32 if f.ctx_checkpoints is None else f.ctx_checkpoints,
        "cont_batching": cont,
        "cache_prompt": f.cache_prompt is not False,
        "cache_ram_mib": 8192 if f.cache_ram is None else f.cache_ram,
        "cache_idle_slots": f.cache_idle_slots is not False,
    }
    out: Knobs = {
        "scheduler.name": Knob("llamacpp"),
        "scheduler.n_parallel": knob(f, "n_parallel", slots),
        "scheduler.n_ctx": knob(f, "ctx_size", values["n_ctx"]),
        "scheduler.kv_unified": knob(f, "kv_unified", unified),
        "scheduler.n_batch": knob(f, "batch_size", values["n_batch"]),
        "scheduler.n_ubatch": knob(f, "ubatch_size", values["n_ubatch"]),
        "scheduler.ctx_checkpoints": knob(f, "ctx_checkpoints", values["ctx_checkpoints"]),
        "scheduler.cont_batching": knob(f, cont_flag, cont),
        "scheduler.cache_prompt": knob(f, "cache_prompt", values["cache_prompt"]),
        "scheduler.cache_ram_mib": knob(f, "cache_ram", values["cache_ram_mib"]),
        "scheduler.cache_idle_slots": knob(f, "cache_idle_slots", values["cache_idle_slots"]),
    }
    if f.swa_full:
        out["scheduler.sliding_window"] = Knob(False, "swa_full", True)
    train = own.get("n_ctx_train")
    try:
        config = LlamaCppConfig(
            **values, **({"n_ctx_train": train} if isinstance(train, int) else {})
        )
    except ValueError as exc:  # (the scenario's own fields are checked again on load)
        raise ScenarioError(f"engine.flags: {exc}") from None
    given = "ctx_size" if f.ctx_size is not None else "n_parallel" if not auto else None
    cells = config.ctx_total
    out["kv_cache.block_size"] = Knob(1)
    out["kv_cache.num_blocks"] = (
        Knob(cells, given, getattr(f, given)) if given is not None else Knob(cells)
    )
    return out
