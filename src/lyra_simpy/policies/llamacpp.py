"""llama.cpp's server (``llama-server``): slots, per-slot KV, ubatch passes, checkpoints.

Read in llama.cpp commit 0c1e570 (vendored by ``llama-cpp-python==0.3.36``, the build
``tox -e validate-cpu`` uses); file and function named with each rule.

* **Slots** (``-np``): at most ``n_parallel`` requests run; a request waits for a slot.
  ``tools/server/server-context.cpp``, ``get_available_slot``: without prompt
  similarity to go by, a new request takes the idle slot *least recently released*
  (``t_last_used``, set in ``server_slot::release``); slots never used go to the highest
  id first (the scan keeps the last slot with ``t_last_used <= best``), so a new server
  fills slots 3, 2, 1, 0 (``-np 4``). Slots released in one step go to the lowest id
  first: llama.cpp releases them in id order, each at its own ``ggml_time_us``
  (``update_slots``' loop over the slots). Until item 67 of
  ``docs/VALIDATION-llamacpp.md`` they went to the highest id here too, the mirror image
  (slot ``n − 1 − i``) of a server whose slots were first released together: the same
  runs of consecutive ids and so passes (item 51), but a step's prompts in the reverse
  order. Slots are given at the start of the step after the request arrives
  (``process_single_task`` runs between ``update_slots`` calls), in queue order.
* **Context per slot**: with a KV stream per sequence (the default once ``-np`` is given:
  ``common/common.h`` ``kv_unified = false``; only ``-np`` left out (auto) turns on 4
  slots with a unified buffer, ``tools/server/server.cpp`` ``main``) each slot owns
  ``n_ctx_seq = pad256(pad256(n_ctx) / n_parallel)`` cells (``src/llama-context.cpp``,
  ``llama_context`` constructor); with ``-kvu`` every slot may use the whole ``n_ctx``.
  Both are capped by the model's training context (``n_ctx_slot``). A request whose prompt
  plus output does not fit its slot's context is **refused** on arrival
  (``never_fits_kv``). llama.cpp refuses a prompt of ``n_ctx_slot`` tokens or more
  (``update_slots``: "exceeds the available context size") and stops an output that would
  overflow at ``n_ctx_slot − prompt`` tokens (``process_token``: ``STOP_TYPE_LIMIT``);
  modelling choice: the simulator refuses such a request rather than change its length.
  There is no preemption.
* **The step's batch** (``update_slots``): the sampled token of every generating slot in
  slot order, then — always with ``cont_batching`` (``-cb``, default on), else only when
  no slot is generating — prompt tokens of the slots processing a prompt, in slot order,
  while the batch holds fewer than ``n_batch`` tokens (``-b``, default 2048): a long
  prompt is chunked over steps. Its first token comes at the end of the step that
  computes its last prompt token.
* **Context checkpoints** (``--ctx-checkpoints``, default 32) on a model with
  sliding-window attention (``n_swa > 0``, e.g. Gemma 3; not with ``--swa-full``): the
  prompt loop of ``update_slots`` stops ``min(n_batch, 4 + n_ubatch)`` and
  ``min(n_batch, 4)`` tokens before a prompt's end, so those tokens run in steps of their
  own, and a checkpoint of the slot's state (``create_checkpoint``) is copied before a
  step whose chunk ends within ``n_ubatch`` tokens of the prompt's end when the slot
  already holds tokens. A prompt of 300 tokens is thus two steps (296, then 4 with a
  checkpoint); its TTFT two steps and a copy.
* **Forward passes** (:mod:`~lyra_simpy.policies.ubatch`): a step's batch runs as one
  pass per ubatch — with per-slot KV one per run of consecutive slot ids (``split_equal``),
  with ``-kvu`` one per ``n_ubatch`` tokens. A pass computes logits only when it holds an
  output row — a decoding slot's token, or the last token of a prompt (a chunk that ends
  no prompt has none; ``update_slots``: ``batch.set_output`` for the last prompt token):
  the output projection over the whole vocabulary (262k rows on Gemma 3, more weight than
  the layers). The plan tells the cost model (``BatchPlan.passes``,
  ``BatchPlan.output_passes``, ``BatchPlan.checkpoints``), and for a decode-only step of
  several passes the rows of each (``BatchPlan.pass_rows``): ``llama_context::decode``
  (``src/llama-context.cpp``) computes each ubatch's graph on its own
  (``process_ubatch`` in its ``do … while (mctx->next())`` loop), so a pass of two
  sequences beside a pass of one costs about a lone step of two plus a lone step of one.
* **What a prompt token attends over** (:func:`step_attention`): a pass's attention
  spans ``n_kv`` cells of each KV stream in it, masked — the highest used cell of the
  stream plus one, padded to 256, at most the stream's size (``src/llama-kv-cache.cpp``,
  ``get_n_kv``, computed in ``llama_kv_cache_context::apply`` after the ubatch's tokens
  are placed). With per-slot KV a prompt's stream holds only its own tokens; with
  ``-kvu`` the one stream holds every slot's, so a prompt beside long-running requests
  attends over all their cells. Where the cells lie (``LlamaCppConfig.kv_layout``):
  ``placed`` (default) keeps ``-kvu``'s cells as ``find_slot``, ``apply_ubatch`` and
  ``seq_rm`` place them (:class:`~lyra_simpy.policies.kvcells.PlacedLayout`: a decode
  step's tokens interleave, a new prompt fills its slot's old holes first, a
  sliding-window model's SWA cache is a second, smaller buffer that reuses cells out of
  the window), and counts each pass's ``n_kv`` and open tiles on those cells, the
  layers' mean over the two caches; ``packed`` (and per-slot KV, whose stream holds one
  request and is emptied when the next one starts) counts the used cells as if packed
  from cell 0, each sequence's cells one block, the SWA cache spanning the same cells
  (:func:`step_attention`). Measured on the server's own cell maps
  (``validation/llamacpp_cells.py``, ``LLAMA_KV_CACHE_DEBUG=2``): under a closed loop
  of four long requests a sequence's cells touch 2.1 × the tiles they need (median; the
  engine model with ``placed``: 1.9 ×), which ``packed`` leaves out. Decode
  tokens are charged by their own context as for every engine (on this server a decode
  step of 4 at 4 × 408 cells costs within 3 % of one at 4 × 208: ``docs/VALIDATION-llamacpp.md``),
  so decode-only steps stay fusable. The plan gives the sum over the step's prompt tokens
  (``BatchPlan.prefill_attention_cells``); a ``profile`` cost fitted on a profile that
  measured it (its ``attention_cells`` column) charges its attention term by it.
* **What the attention computes** (:func:`step_attention`): the CPU flash attention
  (on by default: ``-fa auto`` resolves to on for the CPU backend) reads the mask of
  every cell of ``n_kv`` for every query row, but computes only the 64 × 64 (query row,
  KV cell) tiles the mask leaves open (``ggml/src/ggml-cpu/ops.cpp``,
  ``ggml_compute_forward_flash_attn_ext_tiled``, ``can_skip``; a pass of fewer than 64
  rows skips each masked cell, ``..._one_chunk``). A prompt token's open cells are its own
  sequence's up to itself: several prompts in one ``-kvu`` pass span each other's cells
  but compute only their own — four prompts of 290 tokens sent together cost 13 % less
  than one of 1 160 on the same passes and cells (``validation/llamacpp_masked.py``). The
  plan gives the pairs computed (``BatchPlan.prefill_computed_cells``); a fit of a profile
  with the ``attention_computed`` column prices them apart from the cells spanned.
* **Which cells a slot keeps** (``-kvu`` only, where they count): a request's prompt
  first removes what its slot held (``update_slots``: ``seq_rm`` from the reused prefix,
  none here); with the prompt cache in RAM (``--cache-ram``, default 8192 MiB) and
  ``--cache-idle-slots`` (default), every idle slot is saved to it and cleared when a
  request is given a slot (``handle_slots``' task launch, ``[TAG_IDLE_SLOT_CLEAR]``);
  otherwise an idle slot keeps its last request's cells until it is given a new one.
* **The prompt cache's save** (``--cache-ram``): at each launch the main loop copies the
  chosen slot's and the idle slots' states into host RAM, once per state, before the
  step that starts the prompt (:mod:`~lyra_simpy.policies.llamacpp_save`;
  ``BatchPlan.saved_tokens``); with the model's ``kv_kib_per_cell`` the cache's fill too
  — each state's size, the oldest dropped to make room, and which saves copy into
  memory the cache held before (``BatchPlan.saved_reused_tokens``).

Modelling choices, beside the refusal above: with ``-kvu`` llama.cpp admits without
looking at the free cells and, when the buffer fills, fails every running request
("Context size has been exceeded"); here a request gets a slot only once the pool can hold
its whole prompt and output next to what the running requests will still need, so that
state is never reached. With ``-kvu`` that pool is the buffer's cells (``ctx_total``) as
well as ``kv_cache``, whichever is smaller; an idle slot's kept cells are purged, the
first such slot first, when a request needs them (``try_clear_idle_slots``, which
llama.cpp runs when a batch finds no room). Prompt reuse (``cache_prompt``, slot choice by prompt
similarity) is not modelled: a scenario with shared prefixes and ``cache_prompt: true`` is
refused when loaded. Fused decode runs: with per-slot KV the passes of a decode step
depend on which slots are still generating, which changes inside a run as requests
finish, so this scheduler is not fused (``fusable``); with ``-kvu`` and ``n_ubatch >=
n_parallel`` a decode step is always one pass, and it is (the tokens of fused decode
steps are placed in the cells at the next plan,
:meth:`~lyra_simpy.policies.kvcells.PlacedLayout.catch_up`: the same cells as planned
steps give, which a test checks).
"""

from __future__ import annotations

from lyra_simpy.engine.kv import blocks_for
from lyra_simpy.engine.request import RejectReason, Request
from lyra_simpy.policies.base import BatchPlan, EngineView
from lyra_simpy.policies.kvcells import PlacedLayout, Segment
from lyra_simpy.policies.llamacpp_attention import step_attention
from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
from lyra_simpy.policies.llamacpp_save import PromptCacheSaves
from lyra_simpy.policies.ubatch import pass_counts


def prompt_chunk(remaining: int, room: int, stops: tuple[int, ...]) -> int:
    """Prompt tokens a slot with *remaining* prompt tokens adds to a batch with *room*
    tokens left (``update_slots``' prompt loop: a token at a time, stopping when the
    tokens still to come equal one of *stops*, after adding at least one)."""
    take = min(room, remaining)
    below = [s for s in stops if s < remaining]
    if below:
        take = min(take, remaining - max(below))
    return take


def lru_order(last_used_s: float, slot: int) -> tuple[float, int]:
    """The key ``get_available_slot`` picks an idle slot by, least first: released longest
    ago; of slots released in one step the lowest id, of slots never used (-1) the highest
    (module docstring). The engine model's and the step rebuild's
    (:func:`~lyra_simpy.calibration.llamacpp_runs.replay_slots`) choice."""
    return last_used_s, (-slot if last_used_s < 0 else slot)


def _decoding(req: Request) -> bool:
    return req.generated_tokens > 0


class LlamaCppServer:
    """``llama-server``'s ``update_slots``: slots, chunked prompts, passes (module doc)."""

    holds_back_until_change = True
    """A waiting request needs a slot (or KV, with ``-kvu``): only a finish gives one."""

    def __init__(self, config: LlamaCppConfig) -> None:
        self.config = config
        n = config.n_parallel
        self.slots: list[Request | None] = [None] * n
        """The request each slot serves (None: idle)."""
        self._started = [False] * n
        """Whether the slot's request has computed prompt tokens (is in ``running``)."""
        self.last_used_s = [-1.0] * n
        """When each slot was last released (``t_last_used``; -1: never used)."""
        self.idle_cells = [0] * n
        """Cells an idle slot still holds (``-kvu``; module docstring)."""
        self.saves = PromptCacheSaves(
            n,
            config.cache_ram_mib,
            config.cache_idle_slots,
            config.kv_kib_per_cell is not None,
            config.prompt_cache_start_mib,
            config.ctx_total,
        )
        """The prompt cache's copies of slot states (``--cache-ram``)."""
        self._checkpoint_kib = [0.0] * n
        """KiB of the context checkpoints each slot's request made (its state's share)."""
        self.fusable = config.kv_unified and config.ubatch_tokens >= n
        """Decode steps may be fused (module docstring)."""
        self._stops = config.checkpoint_stops
        self.layout: PlacedLayout | None = None
        """``-kvu``'s cells as llama.cpp places them (``kv_layout: placed``)."""
        if config.kv_unified and config.kv_layout == "placed":
            swa = config.swa_window if config.sliding_window else 0
            self.layout = PlacedLayout(
                config.ctx_total, n, config.ubatch_tokens, swa, config.swa_layer_share
            )

    @property
    def max_batch(self) -> int:
        """Most requests it runs at once (``Scheduler``)."""
        return self.config.n_parallel

    def refusal(
        self, request: Request, num_blocks: int, block_size: int, prompt_only: bool = False
    ) -> RejectReason | None:
        out = 1 if prompt_only else request.output_tokens
        tokens = request.input_tokens + out
        if tokens > self.config.slot_ctx or blocks_for(tokens, block_size) > num_blocks:
            return "never_fits_kv"
        return None

    def free_slot(self) -> int | None:
        """The slot a new request gets (``get_available_slot``: :func:`lru_order`; None:
        all busy)."""
        idle = [i for i, req in enumerate(self.slots) if req is None]
        return min(idle, key=lambda i: lru_order(self.last_used_s[i], i), default=None)

    def plan(self, view: EngineView) -> BatchPlan:
        c = self.config
        slots, started = self.slots, self._started
        bs = view.block_size
        reserved = 0
        here = {id(r) for r in view.running}
        layout = self.layout
        if layout is not None:  # the decode steps fused since the last plan
            idle = [i for i, r in enumerate(slots) if r is None]
            layout.catch_up([r.computed_tokens if r is not None else 0 for r in slots], idle)
        for i, req in enumerate(slots):
            if req is None:
                continue
            if started[i] and id(req) not in here:  # finished: release
                slots[i] = None
                started[i] = False
                self.last_used_s[i] = req.last_token_s
                self.idle_cells[i] = req.computed_tokens
                kib = c.state_kib(req.computed_tokens, self._checkpoint_kib[i])
                self.saves.release(i, req.computed_tokens, kib)
            else:
                reserved += blocks_for(req.input_tokens + req.output_tokens, bs) - req.blocks
        if view.waiting:
            self._assign(view, view.free_blocks - reserved)
        saved, reused = self.saves.take()
        plan = BatchPlan(saved_tokens=saved, saved_reused_tokens=reused)
        segments: list[tuple[int, int]] = []
        outputs: list[bool] = []  # each segment's last token gets logits
        for i, req in enumerate(slots):
            if req is not None and started[i] and _decoding(req):
                plan.decode.append(req)
                segments.append((i, 1))
                outputs.append(True)
        n_decode = len(segments)
        room = c.batch_tokens - n_decode
        if c.cont_batching or not segments:
            for i, req in enumerate(slots):
                if room <= 0:
                    break
                if req is None or (started[i] and _decoding(req)):
                    continue
                left = req.input_tokens + req.generated_tokens - req.computed_tokens
                take = prompt_chunk(left, room, self._stops)
                plan.prefill.append((req, take))
                if layout is not None and not started[i]:
                    layout.remove(i)  # the prompt's seq_rm (from its reused prefix: none)
                segments.append((i, take))
                outputs.append(take == left)
                room -= take
                if self._stops and c.checkpoint_before(req.computed_tokens, left - take):
                    plan.checkpoints += 1
                    self._checkpoint_kib[i] += c.checkpoint_kib(req.computed_tokens)
                started[i] = True
        if segments:
            plan.passes, plan.output_passes, rows = pass_counts(
                segments, outputs, c.batch_tokens, c.ubatch_tokens, c.kv_unified
            )
            if plan.passes > 1 and not plan.prefill:  # each pass priced at its own rows
                plan.pass_rows = rows
        if layout is not None and segments:
            counts = layout.step(
                [
                    Segment(i, r.computed_tokens, take, k >= n_decode)
                    for k, (i, take) in enumerate(segments)
                    if (r := slots[i]) is not None
                ],
                [i for i, r in enumerate(slots) if r is None],
            )
            if plan.prefill:
                plan.prefill_attention_cells, plan.prefill_computed_cells = counts
        elif plan.prefill:
            held = 0
            if c.kv_unified:
                held = sum(self.idle_cells) + sum(
                    r.computed_tokens for r in slots if r is not None
                )  # (a slot given a request holds none until its prompt starts)
            chunks = [(req.computed_tokens, take) for req, take in plan.prefill]
            counts = step_attention(c, n_decode, chunks, held)
            plan.prefill_attention_cells, plan.prefill_computed_cells = counts
        return plan

    def _assign(self, view: EngineView, free: int) -> None:
        """Give idle slots to waiting requests in queue order while the KV pool holds
        each one's whole context beside what is reserved (module docstring)."""
        held = {id(r) for r in self.slots if r is not None}
        bs = view.block_size
        for req in view.waiting:
            if id(req) in held:
                continue
            slot = self.free_slot()
            if slot is None:
                return
            need = blocks_for(req.input_tokens + req.output_tokens, bs) - req.blocks
            if need > free or not self._buffer_holds(req.input_tokens + req.output_tokens, slot):
                return
            free -= need
            self.slots[slot] = req
            self.saves.launch(slot, self.slots)
            self._checkpoint_kib[slot] = 0.0  # the new prompt's own, from none
            self.idle_cells[slot] = 0  # its prompt removes them
            if self.config.clears_idle_slots:
                for i, other in enumerate(self.slots):
                    if other is None:
                        self.idle_cells[i] = 0
                        if self.layout is not None:
                            self.layout.remove(i)

    def _buffer_holds(self, tokens: int, slot: int) -> bool:
        """With ``-kvu``: the buffer's cells hold *tokens* more, for a request given idle
        *slot* (whose prompt removes its kept cells first), beside every slot's request's
        whole context and the other idle slots' kept cells, purging those one by one as
        needed (``try_clear_idle_slots``: the first idle slot holding cells); none is
        purged when even all of them would not make room. True with per-slot KV
        (``refusal`` keeps a request within its slot)."""
        if not self.config.kv_unified:
            return True
        taken = sum(r.input_tokens + r.output_tokens for r in self.slots if r is not None)
        room = self.config.ctx_total - taken
        kept = [i for i, r in enumerate(self.slots) if r is None and i != slot]
        room -= sum(self.idle_cells[i] for i in kept)
        if tokens > room + sum(self.idle_cells[i] for i in kept):
            return False
        for i in kept:
            if tokens <= room:
                break
            room += self.idle_cells[i]
            if self.idle_cells[i]:
                self.idle_cells[i] = 0
                self.saves.drop(i)
                if self.layout is not None:
                    self.layout.remove(i)
        return True
