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

Modelling choices: a slot's state is its request's computed tokens (prompt and output
but the last sampled token); the cache's size limit is not modelled (8 GiB holds
hundreds of thousands of tokens of the small models run on a CPU; a server that runs
long fills it all the same, as the validation's long points did after 15–46 minutes, and
its saves then reuse the memory of the states it evicts: docs/VALIDATION-llamacpp.md item
73), nor the cache's
*load* (``server_prompt_cache::load``: a cached state sharing at least a quarter of its
tokens with a new request's prompt is restored into its slot at the launch, whatever the
request's ``cache_prompt``, and its buffer freed, so that the next save reuses memory the
process holds, at a fraction of the price; the simulator's prompts, without prompt reuse,
never meet it, and a replay meets it only when it sends the ids of an earlier run again:
``lyra-simpy replay --prompt-seed``, docs/VALIDATION-llamacpp.md item 84) nor its scans
over the cached prompts.
"""

from __future__ import annotations

from collections.abc import Sequence


class PromptCacheSaves:
    """The tokens of each slot's state not yet in the prompt cache, and those copied
    since the last plan (module docstring), for a server of *n_parallel* slots with
    ``--cache-ram`` *cache_ram_mib* and ``--cache-idle-slots`` *cache_idle_slots*."""

    __slots__ = ("_idle_too", "_on", "pending", "unsaved")

    def __init__(self, n_parallel: int, cache_ram_mib: int, cache_idle_slots: bool) -> None:
        self._on = cache_ram_mib != 0
        self._idle_too = self._on and cache_idle_slots
        self.unsaved = [0] * n_parallel
        """Per slot: tokens of its state the cache does not hold (0: saved or empty)."""
        self.pending = 0
        """Tokens copied since :meth:`take`."""

    def release(self, slot: int, tokens: int) -> None:
        """*slot*'s request finished with *tokens* in its state."""
        if self._on:
            self.unsaved[slot] = tokens

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
        saved = unsaved[slot]
        unsaved[slot] = 0
        if self._idle_too:
            for i, req in enumerate(slots):
                if req is None and unsaved[i]:
                    saved += unsaved[i]
                    unsaved[i] = 0
        self.pending += saved

    def take(self) -> int:
        """The tokens copied since the last call (the next step waits for them)."""
        got, self.pending = self.pending, 0
        return got
