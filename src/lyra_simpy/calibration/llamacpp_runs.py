"""llama-server's side of a rebuilt step (``StepRebuild.llamacpp``): the slots its
requests sat in, replayed from the streams, and the forward passes, KV cells and context
checkpoints the ``llamacpp`` engine model would charge for them
(:mod:`~lyra_simpy.policies.llamacpp`, :mod:`~lyra_simpy.policies.ubatch`)."""

from __future__ import annotations

import heapq
from typing import Literal

import numpy as np
from pydantic import ConfigDict, PositiveInt

from lyra_simpy.calibration.streams import StreamedRequest
from lyra_simpy.config import Closed
from lyra_simpy.policies.kvcells import PlacedLayout, Segment
from lyra_simpy.policies.llamacpp import lru_order
from lyra_simpy.policies.llamacpp_attention import step_attention
from lyra_simpy.policies.ubatch import pass_counts

Chunk = tuple[int, int, int]
"""A prompt chunk of a step: (request index, its tokens computed before, tokens)."""


class LlamaCppLayout(Closed):
    """The llama.cpp server a rebuilt step's cells and passes are counted by
    (``StepRebuild.llamacpp``; the fields of :class:`~lyra_simpy.policies.llamacpp.LlamaCppConfig`
    of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_parallel: PositiveInt
    """Slots (``-np``)."""
    batch_tokens: PositiveInt
    """Tokens per step (effective ``n_batch``)."""
    kv_unified: bool
    """One buffer for every slot (``-kvu``), or a stream per slot."""
    ubatch_tokens: PositiveInt
    """Tokens per forward pass (effective ``n_ubatch``)."""
    stream_cells: PositiveInt
    """Cells of one KV stream: the whole buffer with ``-kvu``, else a slot's."""
    kv_layout: Literal["placed", "packed"] = "packed"
    """With ``-kvu``: where the cells lie (``LlamaCppConfig.kv_layout``): ``placed``
    replays llama.cpp's placement over the rebuilt steps (:class:`CellReplay`). The
    scenario's scheduler gives it (:func:`~lyra_simpy.calibration.runs.rebuild_for`,
    ``placed`` by default); ``packed`` here reads fit files written before it existed
    as they were made."""
    swa_window: int = 0
    """The sliding-window cache's window (0: none; ``LlamaCppConfig.swa_window`` on a
    sliding-window model)."""
    swa_layer_share: float = 0.0
    """``LlamaCppConfig.swa_layer_share``."""
    clears_idle_slots: bool = False
    """``LlamaCppConfig.clears_idle_slots``: a request given a slot frees every idle
    slot's cells."""

    @property
    def placed(self) -> bool:
        """Cells are replayed as llama.cpp places them (``-kvu``, ``kv_layout: placed``)."""
        return self.kv_unified and self.kv_layout == "placed"


class CellReplay:
    """``-kvu``'s cells over a run's rebuilt steps, placed as llama.cpp places them
    (:class:`~lyra_simpy.policies.kvcells.PlacedLayout`; the engine model's
    ``kv_layout: placed``): each engine step's decode tokens (a decoding request's
    context less one is its token's position) and prompt chunks, in the order of the
    steps. A request's first chunk frees its slot's cells and, with
    ``clears_idle_slots``, those of every slot whose request has sent its last token
    (*last_step*: the rebuilt step of each request's last token)."""

    def __init__(self, layout: LlamaCppLayout, slots: list[int], last_step: list[int]) -> None:
        self.cells = PlacedLayout(
            layout.stream_cells, layout.n_parallel, layout.ubatch_tokens,
            layout.swa_window, layout.swa_layer_share,
        )  # fmt: skip
        self.layout = layout
        self.slots = slots
        self.last_step = last_step
        self.current: list[int | None] = [None] * layout.n_parallel
        """The request each slot last started."""

    def step(self, k: int, decoding: list[tuple[int, int]], chunks: list[Chunk]) -> tuple[int, int]:
        """Place one engine step of rebuilt step *k*: *decoding* (slot, position) in slot
        order, then *chunks* in slot order. Returns the prompt tokens' (cells spanned,
        pairs computed)."""
        starting = {self.slots[r]: r for r, b, _ in chunks if not b}
        idle = [
            i for i, other in enumerate(self.current)
            if i not in starting and (other is None or self.last_step[other] < k)
        ]  # fmt: skip
        if starting and self.layout.clears_idle_slots:
            for i in idle:
                self.cells.remove(i)
        for slot, r in starting.items():
            self.cells.remove(slot)
            self.current[slot] = r
        segments = [Segment(s, pos, 1, False) for s, pos in decoding] + [
            Segment(self.slots[r], b, size, True) for r, b, size in chunks
        ]
        return self.cells.step(segments, idle) if segments else (0, 0)


def replay_slots(requests: list[StreamedRequest], n_parallel: int, together_s: float
                 ) -> list[int]:  # fmt: skip
    """The slot each request of a run sat in, replaying llama-server's choice on the
    streams (``StepRebuild.llamacpp``): a request sent takes the idle slot released
    longest ago (``get_available_slot``'s LRU,
    :func:`~lyra_simpy.policies.llamacpp.lru_order` as the engine model has it), or waits
    for the next slot released;
    a slot is released at its request's last token. Of the requests waiting, the one the
    server launched first — whose first token came first — takes it; and requests sent
    within *together_s* of one another (``StepRebuild.sent_together_ms``), before any of
    them had its first token, are taken in that order too: they reach the server's queue
    in an order the client does not know, and their streams show the order it took them
    in (``docs/VALIDATION-llamacpp.md`` items 58-59)."""
    finish = [req.chunk_s[-1] for req in requests]
    first = [req.chunk_s[0] for req in requests]
    slot_of = [-1] * len(requests)
    busy: list[int | None] = [None] * n_parallel
    last_used = [-1.0] * n_parallel
    waiting: list[tuple[float, int, int]] = []  # (first token, sent rank, request), a heap
    releases: list[tuple[float, int]] = []  # (when, slot), a heap

    def assign() -> None:
        while waiting:
            idle = [i for i in range(n_parallel) if busy[i] is None]
            if not idle:
                return
            slot = min(idle, key=lambda i: lru_order(last_used[i], i))
            r = heapq.heappop(waiting)[2]  # (the earliest sent on a tie)
            busy[slot], slot_of[r] = r, slot
            heapq.heappush(releases, (finish[r], slot))

    def release_until(t: float) -> None:
        while releases and releases[0][0] <= t:
            when, slot = heapq.heappop(releases)
            busy[slot], last_used[slot] = None, when
            assign()

    sent = sorted(range(len(requests)), key=lambda r: requests[r].arrival_s)
    k = 0
    while k < len(sent):
        # requests sent together (within together_s of the first, and before any of them
        # had its first token): taken in the order their first tokens show
        group, soonest = [sent[k]], first[sent[k]]
        until = requests[sent[k]].arrival_s + together_s
        while (k + len(group) < len(sent)
               and requests[sent[k + len(group)]].arrival_s < min(soonest, until)):  # fmt: skip
            group.append(sent[k + len(group)])
            soonest = min(soonest, first[group[-1]])
        for r in group:
            release_until(requests[r].arrival_s)
        for j, r in enumerate(group, k):
            heapq.heappush(waiting, (first[r], j, r))
        assign()
        k += len(group)
    release_until(np.inf)
    return slot_of


def step_terms(
    layout: LlamaCppLayout,
    stops: bool,
    requests: list[StreamedRequest],
    slots: list[int],
    k: int,
    decoders: list[int],
    held: int,
    chunks_at: dict[int, list[Chunk]],
    replay: CellReplay | None = None,
    positions: dict[int, int] | None = None,
) -> tuple[int, int, int, int, int]:
    """(cells spanned, cells computed, passes, checkpoints, passes computing logits) of
    rebuilt step *k*
    (``StepRebuild.llamacpp``): its own engine step's — its *decoders* in slot order, then
    its prompt chunks (request, tokens before, tokens) in slot order, the buffer holding
    *held* decoder cells and each prompt's earlier tokens — and those of the engine steps
    hidden in it (their prompts alone). A decode's token and a chunk that ends its prompt
    get logits (:func:`~lyra_simpy.policies.ubatch.pass_counts`). With *replay*, the
    cells come from the placed layout instead (every step must then be counted, in
    order), *positions* giving each decoder's token position."""
    cells = computed = n_passes = checkpoints = outputs = 0
    for sub in sorted({*chunks_at, k}):
        own = sub == k
        chunks = sorted(chunks_at.get(sub, []), key=lambda c: slots[c[0]])
        decoding = sorted(slots[r] for r in decoders) if own else []
        segments = [(s, 1) for s in decoding] + [(slots[r], size) for r, _, size in chunks]
        ends = [True] * len(decoding) + [
            b + size >= requests[r].input_tokens for r, b, size in chunks
        ]
        if segments:
            n, out, _ = pass_counts(
                segments, ends, layout.batch_tokens, layout.ubatch_tokens, layout.kv_unified
            )
            n_passes += n
            outputs += out
        if replay is not None:
            where = positions or {}
            placed = [(slots[r], where[r]) for r in sorted(decoders, key=slots.__getitem__)]
            got = replay.step(k, placed if own else [], chunks)
            cells += got[0]
            computed += got[1]
        elif chunks:
            buffer = (held if own else 0) + sum(b for _, b, _ in chunks)
            pieces = [(b, size) for _, b, size in chunks]
            counts = step_attention(layout, len(decoding), pieces, buffer)
            cells += counts.spanned
            computed += counts.computed
        if stops:  # the engine model's rule (LlamaCppServer.plan)
            checkpoints += sum(
                1
                for r, b, size in chunks
                if b and requests[r].input_tokens - b - size < layout.ubatch_tokens
            )
    return cells, computed, max(n_passes, 1), checkpoints, outputs


def decode_pass_rows(layout: LlamaCppLayout, slots: list[int], decoders: list[int]
                     ) -> tuple[int, ...]:  # fmt: skip
    """The decoding sequences of each forward pass of a decode-only rebuilt step whose
    *decoders* (requests) sit in *slots*, as the engine model cuts them
    (:func:`~lyra_simpy.policies.ubatch.pass_counts`); () for a step of one pass."""
    segments = [(s, 1) for s in sorted(slots[r] for r in decoders)]
    outputs = [True] * len(segments)
    cut = (layout.batch_tokens, layout.ubatch_tokens, layout.kv_unified)
    rows = pass_counts(segments, outputs, *cut).rows
    return rows if len(rows) > 1 else ()
