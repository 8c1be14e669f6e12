"""The decode set: running requests that emit one token in every decode iteration.

In continuous and static batching every decoding request is in every iteration that
decodes, so all of them advance together. The set keeps one clock (``epoch``: decode
iterations since it was made) and, per request, only what it was when it joined; its
``computed_tokens`` and ``generated_tokens`` grow with the clock, its blocks are derived
from them, and its last token was emitted at ``last_emit_s``. What the engine needs of
the whole set is kept as running aggregates, so an iteration or a fused run costs
O(requests joining or finishing) rather than O(requests decoding):

* ``n`` and the sum of the members' contexts (``context_tokens``);
* a histogram of the members' position within their last block, which says how many
  need a new block at each coming iteration (``hist_now``);
* the members grouped by the epoch at which they emit their last token (``finishing``).
"""

from __future__ import annotations

import math

from lyra_simpy.engine.request import Request


class DecodeSet:
    """Aggregates over the decoding requests of one replica (see the module docstring)."""

    __slots__ = (
        "_hist",
        "_sum_q",
        "block_size",
        "by_finish",
        "epoch",
        "last_emit_s",
        "n",
        "next_finish",
    )

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.epoch = 0
        """Decode iterations the set has advanced through."""
        self.last_emit_s = math.nan
        """When the members emitted their latest token (NaN before any)."""
        self.n = 0
        self._sum_q = 0
        """Sum over members of computed tokens minus the clock when they joined."""
        self._hist = [0] * block_size
        """By (-(computed - epoch)) mod block_size: rotates with the clock."""
        self.by_finish: dict[int, list[Request]] = {}
        """Members by the clock reading at which they emit their last token."""
        self.next_finish = -1
        """The earliest key of ``by_finish`` (-1: empty)."""

    # -- membership ---------------------------------------------------------------------
    def join(self, req: Request) -> None:
        """Add a decoding request whose tokens were last emitted at ``last_emit_s``."""
        epoch = self.epoch
        q = req._computed - epoch
        req.epoch0 = epoch
        req.finish_epoch = finish = epoch + req.output_tokens - req._generated
        req.member_of = self
        self._sum_q += q
        self._hist[-q % self.block_size] += 1
        self.n += 1
        group = self.by_finish.get(finish)
        if group is None:
            self.by_finish[finish] = [req]
            if finish < self.next_finish or self.next_finish < 0:
                self.next_finish = finish
        else:
            group.append(req)

    def _detach(self, req: Request, last_emit_s: float) -> None:
        delta = self.epoch - req.epoch0
        q = req._computed - req.epoch0
        req._computed += delta
        req._generated += delta
        req._blocks = -(-req._computed // self.block_size)
        req._last_token_s = last_emit_s
        req.member_of = None
        self._sum_q -= q
        self._hist[-q % self.block_size] -= 1
        self.n -= 1

    def leave(self, req: Request) -> None:
        """Take *req* out (preemption): its counts become plain fields again."""
        group = self.by_finish[req.finish_epoch]
        group.remove(req)
        if not group:
            del self.by_finish[req.finish_epoch]
            self.next_finish = min(self.by_finish, default=-1)
        self._detach(req, self.last_emit_s)

    def clear(self) -> None:
        """Take every member out (their counts become plain fields again)."""
        for group in self.by_finish.values():
            for req in group:
                self._detach(req, self.last_emit_s)
        self.by_finish.clear()
        self.next_finish = -1

    # -- the clock ------------------------------------------------------------------------
    def advance(self, ends_s: list[float]) -> list[Request]:
        """Every member decodes in ``len(ends_s)`` iterations ending at *ends_s*, except
        that a member stops after its last token; returns those that finished, each with
        ``last_token_s`` at its own end, in the order they finished."""
        start = self.epoch
        k = len(ends_s)
        self.epoch = stop = start + k
        done: list[Request] = []
        by_finish = self.by_finish
        if 0 <= self.next_finish <= stop:
            for finish in sorted(f for f in by_finish if f <= stop):
                t = ends_s[finish - start - 1]
                group = by_finish.pop(finish)
                self.epoch = finish  # detach each at its own last step
                for req in group:
                    self._detach(req, t)
                done.extend(group)
            self.epoch = stop
            self.next_finish = min(by_finish, default=-1)
        self.last_emit_s = ends_s[-1]
        return done

    # -- aggregates -----------------------------------------------------------------------
    @property
    def context_tokens(self) -> int:
        """Sum of members' contexts in the next iteration (cached tokens + 1 each)."""
        return self._sum_q + self.n * (self.epoch + 1)

    def hist_now(self) -> list[int]:
        """hist[r]: members needing a new block at the coming iterations j ≡ r (mod
        block_size), j = 0 being the next one (``hist_now()[0]``: blocks it needs)."""
        shift = self.epoch % self.block_size
        h = self._hist
        return h[shift:] + h[:shift]

    def blocks_needed(self) -> int:
        """Blocks the members need, together, to decode one more token each."""
        return self._hist[self.epoch % self.block_size]

    def fewest_left(self) -> int:
        """Iterations until the next member emits its last token."""
        return self.next_finish - self.epoch
