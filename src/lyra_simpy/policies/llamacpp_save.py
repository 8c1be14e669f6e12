"""llama-server's prompt cache in host RAM: which slot states it copies when a request
is given a slot, for :class:`~lyra_simpy.policies.llamacpp.LlamaCppServer`.

Read in llama.cpp commit 0c1e570. With ``--cache-ram`` (default 8192 MiB; 0: off) the
server keeps a cache of slot states in host RAM (``tools/server/server-task.cpp``,
``server_prompt_cache``). When it gives a request a slot (``server-context.cpp``,
``get_available_slot``, run by ``process_single_task`` on the main loop, before the
``update_slots`` that starts the prompt):

* the slot chosen by LRU is saved first (``update_cache``, ``server_slot::prompt_save``);
* after the launch, with ``--cache-idle-slots`` (default), every idle slot is saved too
  (``[TAG_IDLE_SLOT_CLEAR]``), and with ``-kvu`` cleared.

A save copies the slot's state (``llama_state_seq_get_data_ext``) into a newly allocated
buffer (``server_prompt_cache::alloc``), unless the cache already holds that prompt
whole, which it does once the slot was saved and has not run since. So a slot's state
is copied once, at the first launch after its request finished, and what a launch
costs grows with the tokens those slots hold. Every running request waits for it too:
the main loop runs no step meanwhile. :class:`PromptCacheSaves` counts those tokens;
the plan carries them (``BatchPlan.saved_tokens``) and a ``profile`` cost whose fit
has ``prompt_save`` charges them (:mod:`~lyra_simpy.calibration.savefit`).

The cache's fill (``scheduler.kv_kib_per_cell`` given; else none of this is tracked
and every save is charged at the probe's price): each state the cache holds has a size,
:meth:`~lyra_simpy.policies.llamacpp.LlamaCppConfig.state_kib` — its tokens' K and V
(on a sliding-window model the sliding-window layers keep the last ``swa_window`` cells
only) and its context checkpoints (each the sliding-window layers' cells when it was
made) — as the matrix's logs show them (``making room for prompt cache entry ...
size``: a 400-token state with one checkpoint 12.85 MiB on Gemma 3 270M, 12.83 by that
rule; docs/VALIDATION-llamacpp.md item 87). A save that does not fit beside what the
cache holds first drops its oldest states (``server_prompt_cache::alloc``: ``making room
for prompt cache entry, removing oldest entry``), and a state larger than the whole
limit is not saved (``exceeds cache size limit, skipping``). With ``--cache-ram -1`` (no
byte limit) the cache keeps at most ``n_ctx`` tokens (``server_prompt_cache::update``,
run after every save). The run may start with states in the cache
(``prompt_cache_start_mib``: a server that has run before), dropped first, by the bytes
each save needs (with ``--cache-ram -1`` whole, at the first save).

What a save costs depends on the memory it copies into (item 87, and items 65 and 73):
memory the process has held before — freed by states the cache dropped, or restored —
is cheap, pages it never held cost a page fault each. So each save's bytes are split at
the most the cache has held (its high-water mark, the start fill included): the part
below it is ``reused`` (charged at the fit's ``prompt_save.reused_ms_per_token``, the
probe's price once the cache is full), the part above it fresh (``ms_per_token``). A
fresh server's cache grows fresh until it first drops a state; from then on, and from
the first save of a run that starts full, its saves reuse.

Modelling choices: a slot's state is its request's computed tokens (prompt and output
but the last sampled token); the memory the process frees is counted as the cache's
(the allocator may hand some back to the system, or keep the pages of states freed
outside the cache); the start fill is dropped by the bytes a save needs, where the
server drops whole states; the cache's
*load* (``server_prompt_cache::load``: a cached state sharing at least a quarter of its
tokens with a new request's prompt is restored into its slot at the launch, whatever the
request's ``cache_prompt``, and its buffer freed, so that the next save reuses memory the
process holds, at a fraction of the price; the simulator's prompts, without prompt reuse,
never meet it, and a replay meets it only when it sends the ids of an earlier run again:
``lyra-simpy replay --prompt-seed``, docs/VALIDATION-llamacpp.md item 84) is not
modelled, nor the cache's scans over the prompts it holds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence


class PromptCacheSaves:
    """The tokens of each slot's state not yet in the prompt cache, and those copied
    since the last plan (module docstring), for a server of *n_parallel* slots with
    ``--cache-ram`` *cache_ram_mib* and ``--cache-idle-slots`` *cache_idle_slots*. With
    *tracked*, the cache's fill as well: *start_mib* of states at the start, at most
    *ctx_total* tokens with no byte limit (``--cache-ram -1``)."""

    __slots__ = (
        "_ctx_total", "_entries", "_held", "_idle_too", "_limit_kib", "_on", "_peak",
        "_size", "_start", "_tokens", "_tracked", "pending", "pending_reused",
        "unsaved", "unsaved_kib",
    )  # fmt: skip

    def __init__(
        self,
        n_parallel: int,
        cache_ram_mib: int,
        cache_idle_slots: bool,
        tracked: bool = False,
        start_mib: float = 0.0,
        ctx_total: int = 0,
    ) -> None:
        self._on = cache_ram_mib != 0
        self._idle_too = self._on and cache_idle_slots
        self._tracked = tracked and self._on
        self._limit_kib = cache_ram_mib * 1024.0 if cache_ram_mib > 0 else math.inf
        self._ctx_total = ctx_total
        self.unsaved = [0] * n_parallel
        """Per slot: tokens of its state the cache does not hold (0: saved or empty)."""
        self.unsaved_kib = [0.0] * n_parallel
        """Per slot: that state's size (KiB; 0 untracked)."""
        self.pending = 0
        """Tokens copied since :meth:`take`."""
        self.pending_reused = 0.0
        """Of those, the tokens' worth copied into memory held before (module docstring)."""
        self._entries: deque[tuple[float, int]] = deque()
        """The run's states in the cache, oldest first: (KiB, tokens)."""
        self._start = min(start_mib * 1024.0, self._limit_kib) if self._tracked else 0.0
        """KiB of the states from before the run still in the cache (dropped first)."""
        self._size = self._start
        """KiB the cache holds."""
        self._tokens = 0
        """Tokens of the run's states it holds."""
        self._peak = self._start
        """The most KiB it has held (its high-water mark)."""
        self._held = self._start > 0 and cache_ram_mib < 0
        """With ``--cache-ram -1`` a start fill is still held: its tokens are not known,
        so the run's first save (``update`` after it) drops it whole."""

    def release(self, slot: int, tokens: int, kib: float = 0.0) -> None:
        """*slot*'s request finished with *tokens* in its state, of *kib* KiB."""
        if self._on:
            self.unsaved[slot] = tokens
            self.unsaved_kib[slot] = kib

    def drop(self, slot: int) -> None:
        """Idle *slot*'s cells were purged for the launch under way
        (``try_clear_idle_slots``): without ``--cache-idle-slots`` its state is lost
        unsaved; with it the launch saves it first (it saves every idle slot before a
        step runs, and with ``-kvu`` clears them)."""
        if not self._idle_too:
            self.unsaved[slot] = 0

    def launch(self, slot: int, slots: Sequence[object | None]) -> None:
        """A request was given *slot* (already set in *slots*, None where idle): the
        slot's own state is saved, then every idle slot's."""
        unsaved = self.unsaved
        if unsaved[slot]:
            self._save(slot)
        if self._idle_too:
            for i, req in enumerate(slots):
                if req is None and unsaved[i]:
                    self._save(i)

    def _save(self, slot: int) -> None:
        """Copy *slot*'s state into the cache (module docstring)."""
        tokens, kib = self.unsaved[slot], self.unsaved_kib[slot]
        self.unsaved[slot] = 0
        if not self._tracked:
            self.pending += tokens
            return
        if kib > self._limit_kib:  # larger than the whole cache: not saved
            return
        entries = self._entries
        while self._size + kib > self._limit_kib:  # make room: the oldest first
            if self._start > 0:
                freed = min(self._start, self._size + kib - self._limit_kib)
                self._start -= freed
                self._size -= freed
            else:
                old, n = entries.popleft()
                self._size -= old
                self._tokens -= n
        reused = min(kib, max(self._peak - self._size, 0.0))
        self._size += kib
        self._tokens += tokens
        self._peak = max(self._peak, self._size)
        entries.append((kib, tokens))
        self.pending += tokens
        if kib > 0:
            self.pending_reused += tokens * reused / kib
        if self._limit_kib == math.inf:  # --cache-ram -1: at most n_ctx tokens
            if self._held and self._tokens > 0:  # the start fill is dropped at once
                self._size -= self._start
                self._start, self._held = 0.0, False
            while entries and self._tokens > self._ctx_total:
                old, n = entries.popleft()
                self._size -= old
                self._tokens -= n

    def take(self) -> tuple[int, int]:
        """The tokens copied since the last call (the next step waits for them), and of
        those the ones copied into memory held before (module docstring)."""
        got, reused = self.pending, round(self.pending_reused)
        self.pending, self.pending_reused = 0, 0.0
        return got, min(reused, got)
