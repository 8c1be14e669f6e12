"""The knobs of llama.cpp's server (``llama-server``) as the ``llamacpp`` engine model reads
them (:class:`LlamaCppConfig`, its flag names and defaults at commit 0c1e570), and the
model properties that size its caches; the mechanics they switch are in
:mod:`~lyra_simpy.policies.llamacpp`."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from lyra_simpy.config import Closed
from lyra_simpy.policies.llamacpp_attention import PAD

END_STOP = 4
"""Tokens before a prompt's end where the prompt loop stops for a checkpoint (with a
second stop ``4 + n_ubatch`` before it; ``update_slots``, ``checkpoint_offsets``)."""


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


class LlamaCppConfig(Closed):
    """Knobs of ``llama-server`` (its flag names; defaults at commit 0c1e570)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["llamacpp"] = "llamacpp"
    n_parallel: PositiveInt = 4
    """Slots (``-np``/``--parallel``; left out, the server uses 4 with ``-kvu``)."""
    n_ctx: NonNegativeInt = 0
    """KV cells of all slots together (``-c``/``--ctx-size``; 0: the model's training
    context, ``n_ctx_train``)."""
    n_ctx_train: PositiveInt = 32768
    """The model's training context (GGUF ``context_length``; 32768 for Gemma 3 270M):
    ``-c 0`` means it, and it caps a slot's context."""
    kv_unified: bool = False
    """One KV buffer shared by all slots (``-kvu``); False: a KV stream per slot."""
    n_batch: PositiveInt = 2048
    """Logical batch: tokens per step (``-b``/``--batch-size``, default 2048)."""
    n_ubatch: PositiveInt = 512
    """Physical batch: tokens per forward pass (``-ub``/``--ubatch-size``, default 512)."""
    ctx_checkpoints: NonNegativeInt = 32
    """Context checkpoints per slot (``--ctx-checkpoints``, default 32; 0: none)."""
    sliding_window: bool = False
    """The model has sliding-window attention layers (Gemma 2/3, ...; not a flag: a
    property of the model) and the server runs without ``--swa-full``: only then are
    checkpoints made."""
    swa_window: PositiveInt = 512
    """The model's sliding window (GGUF ``sliding_window``, the server's ``n_swa``; 512 on
    Gemma 3 270M): its sliding-window cache holds ``min(cells, window × slots +
    n_ubatch)`` cells with ``-kvu`` (``llama_kv_cache_iswa``) and reuses a cell once its
    position leaves the window. Read only with ``sliding_window`` and ``kv_layout:
    placed``."""
    swa_layer_share: float = Field(5 / 6, ge=0.0, le=1.0)
    """Share of the layers with sliding-window attention (not a flag: a property of the
    model; Gemma 3: five of every six, 15 of 18 on 270M, the server's ``is_swa`` per
    layer). A prompt's attention counts are the layers' mean over the two caches. Read only
    with ``sliding_window`` and ``kv_layout: placed``."""
    kv_layout: Literal["placed", "packed"] = "placed"
    """Where ``-kvu``'s cells lie when a step's prompt attention is counted: ``placed``,
    as llama.cpp places them (:class:`~lyra_simpy.policies.kvcells.KvCells`: a decode
    step's tokens interleave, a new prompt fills the holes its slot's last request left,
    so its cells spread over more 64-cell tiles than it needs); ``packed``, each
    sequence's cells one block, the buffer filled from cell 0 (the model before
    ``placed``; :func:`step_attention`). Per-slot KV is packed either way (a slot's
    stream holds one request, cleared when the next one starts)."""
    cont_batching: bool = True
    """New prompts join steps that decode (``-cb``, default; ``-nocb``: only steps
    without a generating slot take prompt tokens)."""
    cache_prompt: bool = True
    """The requests' ``cache_prompt`` (default true); see the module docstring."""
    cache_ram_mib: int = Field(8192, ge=-1)
    """Host RAM for the prompt cache (``--cache-ram``/``-cram``, MiB; default 8192; 0:
    off, -1: no limit): with it, ``cache_idle_slots`` is in force."""
    cache_idle_slots: bool = True
    """Save idle slots to the prompt cache and, with ``-kvu``, clear them when a request
    is given a slot (``--cache-idle-slots``, default; ``server-context.cpp`` turns it off
    when ``cache_ram_mib`` is 0)."""
    kv_kib_per_cell: PositiveFloat | None = None
    """K and V of one cell over all the model's layers, KiB (not a flag: a property of
    the model and the cache type; GGUF ``block_count`` × ``attention.head_count_kv`` ×
    (``attention.key_length`` + ``attention.value_length``) × the type's bytes (f16: 2)
    / 1024: 18 on Gemma 3 270M). Given, the prompt cache's fill is tracked and each save
    priced by the memory it copies into (:mod:`~lyra_simpy.policies.llamacpp_save`);
    None (default): every save at the fit's ``prompt_save.ms_per_token``."""
    prompt_cache_start_mib: NonNegativeFloat = 0.0
    """States in the prompt cache when the run starts, MiB (0: a fresh server; at least
    ``cache_ram_mib``: full, as a server that has run a while; the profile's
    ``grid.save_fill_prompts`` leaves it so). Read only with ``kv_kib_per_cell``."""

    @property
    def ctx_total(self) -> int:
        """KV cells of the server (``n_ctx`` as ``llama_context`` resolves it)."""
        total = _pad(self.n_ctx or self.n_ctx_train)
        if self.kv_unified:
            return total
        return _pad(total // self.n_parallel) * self.n_parallel

    @property
    def slot_ctx(self) -> int:
        """Context one slot may hold (``n_ctx_slot``)."""
        per = self.ctx_total if self.kv_unified else self.ctx_total // self.n_parallel
        return min(per, self.n_ctx_train)

    @property
    def batch_tokens(self) -> int:
        """Effective ``n_batch``: at most the context (``llama_context``: causal models)."""
        return min(self.n_batch, self.ctx_total)

    @property
    def ubatch_tokens(self) -> int:
        """Effective ``n_ubatch``: at most ``n_batch``."""
        return min(self.n_ubatch, self.batch_tokens)

    @property
    def checkpoint_stops(self) -> tuple[int, ...]:
        """Tokens before a prompt's end where its chunk stops (empty: no checkpoints)."""
        if not self.ctx_checkpoints or not self.sliding_window:
            return ()
        nb = self.batch_tokens
        return (min(nb, END_STOP + self.ubatch_tokens), min(nb, END_STOP))

    def checkpoint_before(self, computed: int, left_after: int) -> bool:
        """A context checkpoint is copied before a prompt chunk (``update_slots``,
        ``do_checkpoint``): with checkpoints on (:attr:`checkpoint_stops`), when the slot
        already holds *computed* tokens and the chunk leaves *left_after* fewer than
        ``n_ubatch`` tokens of its prompt (``near_prompt_end``)."""
        return bool(self.checkpoint_stops) and computed > 0 and left_after < self.ubatch_tokens

    def state_kib(self, tokens: int, checkpoint_kib: float = 0.0) -> float:
        """A slot state's size in the prompt cache, KiB (``llama_state_seq_get_size_ext``
        plus its checkpoints, ``server_prompt_cache_state::size``): *tokens* cells of
        every layer, the sliding-window layers (``swa_layer_share`` of them) keeping the
        last ``swa_window`` cells only, and *checkpoint_kib* (:meth:`checkpoint_kib`).
        0 without ``kv_kib_per_cell``."""
        kv = self.kv_kib_per_cell
        if kv is None:
            return 0.0
        if not self.sliding_window:
            return kv * tokens
        swa = kv * self.swa_layer_share
        return (kv - swa) * tokens + swa * min(tokens, self.swa_window) + checkpoint_kib

    def checkpoint_kib(self, cells: int) -> float:
        """A context checkpoint made when its slot held *cells* cells, KiB: the
        sliding-window layers' cells (``create_checkpoint``,
        ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``). 0 without ``kv_kib_per_cell``."""
        if self.kv_kib_per_cell is None:
            return 0.0
        return self.kv_kib_per_cell * self.swa_layer_share * min(cells, self.swa_window)

    @property
    def clears_idle_slots(self) -> bool:
        """Idle slots' cells are freed at every request's launch (module docstring)."""
        return self.kv_unified and self.cache_idle_slots and self.cache_ram_mib != 0

    @property
    def stream_cells(self) -> int:
        """Cells of one KV stream: the whole buffer with ``-kvu``, else a slot's."""
        total = self.ctx_total
        return total if self.kv_unified else total // self.n_parallel

    @property
    def max_batch(self) -> int:
        return self.n_parallel

    @property
    def token_budget(self) -> int | None:
        """Tokens one step computes, decodes included (``n_batch``)."""
        return self.batch_tokens

    @property
    def alone_chunk_tokens(self) -> int | None:
        """The largest prompt chunk a request alone runs in one step (``n_batch``)."""
        return self.batch_tokens
