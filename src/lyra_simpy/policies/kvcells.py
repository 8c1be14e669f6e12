"""llama.cpp's KV cells of one stream, placed as the engine places them.

With ``-kvu`` every slot's tokens share one KV stream, and what a prompt token's attention
costs depends on where the cells lie: its pass spans ``n_kv`` cells (the highest used
cell plus one, padded) and its CPU flash attention computes every 64 × 64 tile the mask
leaves open (:mod:`~lyra_simpy.policies.llamacpp`). A buffer in which requests come and go
is not packed: a decode step's tokens interleave, and a new prompt fills the holes that
its slot's last request left before it goes on past the other slots' cells. This class
keeps the cells as ``src/llama-kv-cache.cpp`` (commit 0c1e570) does:

* ``find_slot`` (``cont = false``): a ubatch's tokens take free cells one by one from
  the stream's ``head`` on, wrapping at the end; the search starts at cell 0 instead when
  ``head`` lies more than ``used + 2 × n_tokens`` cells in. In a sliding-window cache a
  cell whose position has left its sequence's window (``is_masked_swa``, standard:
  ``pos_max + 1 − pos >= n_swa``) counts as free.
* ``apply_ubatch``: the tokens are written to those cells; a sequence whose masked cell
  was taken loses every cell at or below that position (the purge that keeps its
  positions contiguous, ``seq_rm``); ``head`` moves past the last cell written.
* ``seq_rm``: a sequence's cells are freed and ``head`` moves back to the lowest freed
  cell when that lies below it.
* ``get_n_kv``: the used cells' end (``used_max_p1``) padded to 256, at least 256, at
  most the stream's size.

Cell positions are the sequence's token positions, so which tiles a prompt's rows open
(its own cells at or below each row's position, within the window in a sliding-window
cache) can be read off the map (:meth:`KvCells.open_tiles`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

PAD = 256
"""``get_n_kv``'s padding (``n_pad`` is at least 256)."""
TILE = 64
"""KV cells of one flash-attention tile (``GGML_FA_TILE_KV``)."""
_NONE = -(2**40)
"""A sequence's highest position where it holds no cell (never out of a window)."""


class NoRoomError(ValueError):
    """``find_slot`` found too few free cells for a ubatch."""


class KvCells:
    """The cells of one KV stream of *size* cells holding sequences 0 .. *seqs* − 1 (the
    server's slots); *n_swa* > 0: a sliding-window cache of that window (module
    docstring)."""

    __slots__ = ("_pos_max", "head", "n_swa", "pos", "seq", "size", "used")

    def __init__(self, size: int, n_swa: int = 0, seqs: int = 8) -> None:
        self.size = size
        self.n_swa = n_swa
        self.seq: npt.NDArray[np.int32] = np.full(size, -1, dtype=np.int32)
        """The sequence (slot) each cell holds; -1: empty."""
        self.pos: npt.NDArray[np.int32] = np.zeros(size, dtype=np.int32)
        """The position each cell holds (meaningless where empty)."""
        self.head = 0
        self.used = 0
        self._pos_max: npt.NDArray[np.int64] = np.full(seqs + 1, _NONE, dtype=np.int64)
        """Each sequence's highest position held, at its id + 1 (index 0: the empty
        cells'; :data:`_NONE` where it holds none)."""

    # -- llama_kv_cells -----------------------------------------------------------------
    def used_max_p1(self) -> int:
        """The highest used cell plus one (0 when empty)."""
        taken = np.flatnonzero(self.seq >= 0)
        return int(taken[-1]) + 1 if taken.size else 0

    def n_kv(self) -> int:
        """``get_n_kv``: the cells a pass spans."""
        return min(self.size, max(PAD, -(-self.used_max_p1() // PAD) * PAD))

    # -- find_slot / apply_ubatch / seq_rm -----------------------------------------------
    def _usable(self, a: int, b: int) -> npt.NDArray[np.intp]:
        """The cells among *a* .. *b* − 1 ``find_slot`` may take: empty, or (a
        sliding-window cache) holding a position that left its sequence's window."""
        seq = self.seq[a:b]
        free = seq < 0
        if self.n_swa > 0:
            top = self._pos_max[seq + 1]
            free |= (seq >= 0) & (top + 1 - self.pos[a:b] >= self.n_swa)
        return np.flatnonzero(free) + a

    def _find(self, head: int, n: int) -> npt.NDArray[np.intp]:
        """The first *n* usable cells from *head* on, wrapping at the end (``find_slot``,
        one token at a time), read a stretch at a time."""
        if head + n <= self.size and (self.seq[head : head + n] < 0).all():
            return np.arange(head, head + n)  # (the usual case: empty cells at the head)
        stretch = max(2 * n, PAD)
        found: list[npt.NDArray[np.intp]] = []
        got = 0
        for lo, hi in ((head, self.size), (0, head)):
            a = lo
            while a < hi and got < n:
                b = min(a + stretch, hi)
                cells = self._usable(a, b)[: n - got]
                found.append(cells)
                got += len(cells)
                a = b
        if got < n:
            raise NoRoomError(f"no room for {n} tokens in a KV stream of {self.size} cells")
        return found[0] if len(found) == 1 else np.concatenate(found)

    def place(
        self, seqs: npt.ArrayLike, positions: npt.ArrayLike, distinct: bool = False
    ) -> npt.NDArray[np.intp]:
        """One ubatch: its tokens' sequences and positions, in batch order (*distinct*:
        one token a sequence, a decode step's). Returns the cells they take
        (``find_slot``, then ``apply_ubatch``)."""
        seq_arr = np.asarray(seqs, dtype=np.int32)
        pos_arr = np.asarray(positions, dtype=np.int32)
        n = len(seq_arr)
        if n == 0:
            return np.zeros(0, dtype=np.intp)
        cells = self._find(0 if self.head > self.used + 2 * n else self.head, n)
        self._apply(cells, seq_arr, pos_arr, distinct)
        return cells

    def _apply(self, cells: npt.NDArray[np.intp], seqs: npt.NDArray[np.int32],
               positions: npt.NDArray[np.int32], distinct: bool) -> None:  # fmt: skip
        """``apply_ubatch``: write the tokens to *cells*; a sequence whose masked cell was
        taken loses its cells at or below that position; ``head`` goes past the last."""
        taken = self.seq[cells]
        reused = taken >= 0  # sliding-window reuse of a masked cell
        purge: dict[int, int] = {}
        for c in np.flatnonzero(reused):
            s, p = int(taken[c]), int(self.pos[cells[c]])
            purge[s] = max(purge.get(s, -1), p)
        self.used += len(cells) - int(np.count_nonzero(reused))
        self.seq[cells] = seqs
        self.pos[cells] = positions
        at = seqs + 1
        if distinct:
            self._pos_max[at] = np.maximum(self._pos_max[at], positions)
        else:
            np.maximum.at(self._pos_max, at, positions)
        for s, p in purge.items():
            self._remove(s, p)
        self.head = int(cells[-1]) + 1

    def place_rounds(
        self, seqs: npt.NDArray[np.int32], positions: npt.NDArray[np.int32], sizes: list[int]
    ) -> bool:
        """Several decode steps at once (*sizes*: the tokens of each, one a sequence, in
        order): the cells are those that :meth:`place` a step at a time would give when no
        step starts its search at cell 0 and none reuses a cell out of a window — checked,
        and nothing placed (False) otherwise."""
        n, used, head = len(seqs), self.used, self.head
        if n == 0 or head > used + 2 * sizes[0]:
            return False
        try:
            cells = self._find(head, n)
        except NoRoomError:
            return False
        if (self.seq[cells] >= 0).any():
            return False
        ends = np.cumsum(sizes)[:-1]
        heads = cells[ends - 1] + 1
        if (heads > used + ends + 2 * np.asarray(sizes[1:])).any():
            return False
        self._apply(cells, seqs, positions, distinct=False)
        return True

    def _remove(self, seq: int, up_to: int | None = None) -> None:
        hit = self.seq == seq
        if up_to is not None:
            hit &= self.pos <= up_to
        freed = np.flatnonzero(hit)
        if not freed.size:
            return
        self.seq[freed] = -1
        self.used -= int(freed.size)
        self.head = min(self.head, int(freed[0]))
        left = self.pos[self.seq == seq]
        self._pos_max[seq + 1] = int(left.max()) if left.size else _NONE

    def remove(self, seq: int) -> None:
        """``seq_rm(seq, -1, -1)``: free every cell of *seq*."""
        self._remove(seq)

    # -- what a prompt's rows attend over --------------------------------------------------
    def open_tiles(
        self, seqs: npt.NDArray[np.int32], positions: npt.NDArray[np.int32], n_kv: int
    ) -> int:
        """Tiles of :data:`TILE` cells among the first *n_kv* that some of the rows
        (*seqs*, *positions*: one query tile's tokens, already placed) see unmasked: a
        cell of the row's sequence at or below its position (within its window in a
        sliding-window cache)."""
        seq, pos = self.seq[:n_kv], self.pos[:n_kv]
        seen = np.zeros(n_kv, dtype=bool)
        for s in np.unique(seqs):
            rows = positions[seqs == s]
            mine = (seq == s) & (pos <= rows.max())
            if self.n_swa > 0:
                mine &= pos > int(rows.min()) - self.n_swa
            seen |= mine
        return int(seen.reshape(-1, TILE).any(axis=1).sum())

    def open_pairs(self, seq: int, positions: npt.NDArray[np.int32], n_kv: int) -> int:
        """Σ over rows of *seq* at *positions* of the cells each sees unmasked (a pass of
        fewer than 64 rows skips each masked cell, ``..._one_chunk``)."""
        own = np.sort(self.pos[:n_kv][self.seq[:n_kv] == seq])
        upto = np.searchsorted(own, positions, side="right")
        if self.n_swa > 0:
            upto = upto - np.searchsorted(own, positions - self.n_swa, side="right")
        return int(upto.sum())


class Segment(NamedTuple):
    """A slot's tokens in a step, in batch order: *n* tokens of sequence *seq* from
    position *first*; *prompt*: prompt tokens (their attention is counted)."""

    seq: int
    first: int
    n: int
    prompt: bool


class PlacedLayout:
    """``-kvu``'s KV caches with cells placed as llama.cpp places them: the full-attention
    cache of *cells* cells and, on a sliding-window model (*swa_window* > 0), the
    sliding-window cache of ``min(cells, swa_window × slots + ubatch)`` (rounded up to
    256; ``llama_kv_cache_iswa``), weighed by *swa_share* of the layers."""

    def __init__(
        self, cells: int, slots: int, ubatch: int, swa_window: int = 0, swa_share: float = 0.0
    ) -> None:
        self.ubatch = ubatch
        caches = [(KvCells(cells, seqs=slots), 1.0 - swa_share if swa_window else 1.0)]
        if swa_window:
            size = min(cells, -(-(swa_window * slots + ubatch) // PAD) * PAD)
            caches.append((KvCells(size, swa_window, slots), swa_share))
        self.caches = [(c, w) for c, w in caches if w > 0]
        self.placed = [0] * slots
        """Tokens each slot's sequence has placed (its next position)."""

    def remove(self, slot: int) -> None:
        """``seq_rm(slot, -1, -1)`` in every cache."""
        for cache, _ in self.caches:
            cache.remove(slot)
        self.placed[slot] = 0

    def catch_up(self, computed: list[int], idle: Iterable[int] = ()) -> None:
        """Place the decode tokens of steps run without a plan (fused decode steps): one
        token a step for every slot still behind *computed* (its tokens computed), in
        slot order, a ubatch a step (*idle*: as :meth:`step`) — all steps at once where
        that gives the same cells (:meth:`KvCells.place_rounds`), else a step at a time."""
        idle = list(idle)
        placed = self.placed
        rounds: list[list[int]] = []
        behind = [i for i, c in enumerate(computed) if c > placed[i]]
        while behind:
            rounds.append(behind)
            behind = [i for i in behind if computed[i] > placed[i] + len(rounds)]
        if not rounds:
            return
        at = {i: placed[i] for i in rounds[0]}
        seqs = np.array([i for r in rounds for i in r], dtype=np.int32)
        positions = np.array([at[i] + k for k, r in enumerate(rounds) for i in r], np.int32)
        sizes = [len(r) for r in rounds]
        bounds = np.cumsum([0, *sizes])
        for cache, _ in self.caches:
            if cache.place_rounds(seqs, positions, sizes):
                continue
            for k in range(len(rounds)):  # a step at a time
                u = slice(bounds[k], bounds[k + 1])
                self._place(cache, seqs[u], positions[u], idle, distinct=True)
        for i in rounds[0]:
            placed[i] = computed[i]

    def _place(self, cache: KvCells, seqs: npt.NDArray[np.int32],
               positions: npt.NDArray[np.int32], idle: Iterable[int],
               distinct: bool = False) -> None:  # fmt: skip
        try:
            cache.place(seqs, positions, distinct)
        except NoRoomError:  # llama.cpp fails the batch; here the idle slots' cells go first
            for i in idle:
                self.remove(i)
            cache.place(seqs, positions, distinct)

    def step(self, segments: list[Segment], idle: Iterable[int] = ()) -> tuple[int, int]:
        """Place a step's tokens (*segments* in batch order), a ubatch of ``n_ubatch``
        tokens at a time (``split_simple``), and count the prompt tokens' attention as
        :func:`~lyra_simpy.policies.llamacpp_attention.step_attention` does, on these cells: the
        cells their passes span (``n_kv``) and the (query row, cell) pairs computed (a
        pass of 64 rows or more: every tile some row of a 64-row query tile sees; fewer:
        each prompt row's own cells). Returns (spanned, computed), the layers' mean.

        Where a cache has too few free cells — only possible with idle slots still holding
        cells (``--cache-ram 0``: nothing clears them before their slot's next request) —
        llama.cpp fails the batch ("could not find a KV slot"); the model frees the cells
        of the *idle* slots instead and places it, as it admits requests only where the
        running ones fit (:mod:`~lyra_simpy.policies.llamacpp`, modelling choices)."""
        idle = list(idle)
        seq = np.concatenate([np.full(s.n, s.seq, dtype=np.int32) for s in segments])
        pos = np.concatenate([np.arange(s.first, s.first + s.n, dtype=np.int32) for s in segments])
        prompt = np.concatenate([np.full(s.n, s.prompt) for s in segments])
        for s in segments:
            self.placed[s.seq] = max(self.placed[s.seq], s.first + s.n)
        spanned = computed = 0.0
        for u0 in range(0, len(seq), self.ubatch):
            u = slice(u0, u0 + self.ubatch)
            useq, upos, uprompt = seq[u], pos[u], prompt[u]
            rows = len(useq)
            for cache, weight in self.caches:
                self._place(cache, useq, upos, idle)
                if not uprompt.any():
                    continue
                n_kv = cache.n_kv()
                spanned += weight * int(uprompt.sum()) * n_kv
                if rows >= TILE:
                    tiles = sum(
                        cache.open_tiles(useq[q : q + TILE], upos[q : q + TILE], n_kv)
                        for q in range(0, rows, TILE)
                    )
                    computed += weight * tiles * TILE * TILE
                else:
                    for s in np.unique(useq[uprompt]):
                        mine = uprompt & (useq == s)
                        computed += weight * cache.open_pairs(int(s), upos[mine], n_kv)
        return round(spanned), round(computed)
