"""Prefix caches: reuse of the KV of prompt prefixes seen before.

A request's content is a chain of *units* of ``unit_tokens`` tokens (a whole number of
KV blocks; see :mod:`lyra_simpy.workload.prefixes`), each named by a key that hashes the
whole prefix up to it (vLLM's chained block hashes), so equal keys mean equal prefixes.
Only full units are cached. Two implementations behind one interface:

* ``block_hash`` (vLLM V1, ``vllm/v1/core/kv_cache_manager.py`` and
  ``block_pool.py``): a hash table key → cached unit; a lookup walks the request's keys
  until the first miss. Units no request references sit in a free queue in the order
  they were freed — a request frees its units tail first, so a sequence's last units go
  before its first. With ``eviction: free_queue`` (the default, vLLM's) that queue is one
  with the uncached free blocks and every allocation takes the oldest free blocks,
  evicting the cached ones among them; with ``when_full`` units are evicted from its
  front only when the pool needs their blocks (see :mod:`lyra_simpy.engine.kv`).
* ``radix`` (SGLang, ``python/sglang/srt/mem_cache/radix_cache.py``): a radix tree of
  units; a match walks down from the root; eviction removes the least recently used
  unreferenced *leaf* again and again (a parent goes only after its children), and a
  match refreshes the access time of every node on its path.

Both: a unit in use by a running request is never evicted (reference counts, SGLang's
``lock_ref``); a hit covers at most ``prompt + generated − 1`` tokens, so one token is
always computed (vLLM); units are inserted when a prefill chunk has computed them and
when a request finishes or is preempted (its KV stays cached, as in both engines).
Modelling choice: when two running requests compute the same new unit at once, the
second one's copy is freed and it shares the first one's (SGLang does this; vLLM keeps
both copies until they are freed).

Accounting with the engine's :class:`~lyra_simpy.engine.kv.BlockPool`: blocks of units that a
running request references count as *used*; unreferenced cached units are *free* for
allocation but hold content (``evictable_blocks``); the pool evicts units when a new
allocation would need their blocks.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from itertools import count
from typing import Annotated, Literal, Protocol

from pydantic import ConfigDict, Field

from lyra_simpy.config import Closed
from lyra_simpy.engine.request import Request
from lyra_simpy.errors import SimulationError


class _CacheConfig(Closed):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BlockHashConfig(_CacheConfig):
    """vLLM's automatic prefix caching (``--enable-prefix-caching``)."""

    name: Literal["block_hash"] = "block_hash"
    eviction: Literal["free_queue", "when_full"] = "free_queue"
    """Which allocation evicts a cached unit (see :mod:`lyra_simpy.engine.kv`): ``free_queue``
    (vLLM: one queue of all free blocks, cached or not, oldest taken first) or
    ``when_full`` (only when used plus cached blocks would exceed the pool)."""


class RadixConfig(_CacheConfig):
    """SGLang's radix cache (on unless ``--disable-radix-cache``)."""

    name: Literal["radix"] = "radix"


PrefixCacheConfig = Annotated[BlockHashConfig | RadixConfig, Field(discriminator="name")]


class _Unit:
    """One cached unit (a tree node for the radix cache)."""

    __slots__ = ("children", "key", "last_access", "parent", "ref")

    def __init__(self, key: int, parent: _Unit | None) -> None:
        self.key = key
        self.ref = 0
        self.last_access = 0
        self.parent = parent
        self.children: dict[int, _Unit] = {}


class PrefixCache(Protocol):
    """The operations the engine and the schedulers use."""

    unit_tokens: int
    """Tokens per unit."""
    unit_blocks: int
    """KV blocks per unit."""
    evictable_blocks: int
    """Blocks held by cached units that no running request references."""
    units: int
    """Units cached (referenced or not)."""
    free_queue: bool
    """Evicted through the pool's single free queue (vLLM), not by :meth:`evict`."""
    free_clock: Iterator[int]
    """Stamps freed units in the free queue's order (the pool sets its own clock)."""

    def lookup(self, req: Request) -> tuple[int, int]:
        """(units of *req*'s prefix that hit, how many of them are unreferenced)."""
        ...

    def acquire(self, req: Request, units: int) -> int:
        """Reference *req*'s first *units* hit units; returns the blocks that stop
        being evictable (they become used)."""
        ...

    def insert(self, req: Request, units: int) -> int:
        """Cache *req*'s first *units* units (its private blocks become shared);
        returns the change of used blocks (≤ 0: duplicates freed)."""
        ...

    def release(self, req: Request) -> int:
        """Drop *req*'s references; returns the blocks that became evictable."""
        ...

    def evict(self, blocks: int) -> None:
        """Evict unreferenced units, least recently used first, until *blocks* blocks
        are freed (or none is left)."""
        ...


def max_hit_units(req: Request, unit_tokens: int) -> int:
    """Units a hit may cover: all but the last token of prompt + generated (vLLM)."""
    return min(len(req.keys), (req.input_tokens + req.generated_tokens - 1) // unit_tokens)


class _Base:
    free_queue = False
    """Evicted through the pool's single free queue (``engine/kv.py``), not by :meth:`evict`."""

    def __init__(self, unit_tokens: int, block_size: int, config: object = None) -> None:
        self.unit_tokens = unit_tokens
        self.unit_blocks = unit_tokens // block_size
        self.evictable_blocks = 0
        self.units = 0
        """Units cached (referenced or not)."""
        self.free_clock: Iterator[int] = count(1)
        self._tick = 0

    def _touch(self, unit: _Unit) -> None:
        self._tick += 1
        unit.last_access = self._tick

    def _ref(self, req: Request, unit: _Unit) -> int:
        """*req* references *unit*; returns blocks that stop being evictable."""
        req.held.append(unit)
        unit.ref += 1
        if unit.ref == 1:
            self._unfree(unit)
            self.evictable_blocks -= self.unit_blocks
            return self.unit_blocks
        return 0

    def _unfree(self, unit: _Unit) -> None:
        """*unit* is referenced again (it was evictable)."""

    def _free(self, unit: _Unit) -> None:
        """*unit* lost its last reference (it becomes evictable)."""

    def _child(self, parent: _Unit | None, key: int) -> _Unit | None:
        raise NotImplementedError

    def evict(self, blocks: int) -> None:
        raise NotImplementedError

    def _add(self, parent: _Unit | None, key: int) -> _Unit:
        raise NotImplementedError

    def _walk(self, req: Request, limit: int) -> list[_Unit]:
        found: list[_Unit] = []
        parent: _Unit | None = None
        for key in req.keys[:limit]:
            unit = self._child(parent, key)
            if unit is None:
                break
            found.append(unit)
            parent = unit
        return found

    def lookup(self, req: Request) -> tuple[int, int]:
        found = self._walk(req, max_hit_units(req, self.unit_tokens))
        return len(found), sum(1 for u in found if u.ref == 0)

    def acquire(self, req: Request, units: int) -> int:
        moved = 0
        for unit in self._walk(req, units):
            self._touch(unit)
            moved += self._ref(req, unit)
        req.cache_upto = units
        return moved

    def insert(self, req: Request, units: int) -> int:
        units = min(units, len(req.keys))
        if units <= req.cache_upto:
            return 0
        delta = 0
        parent = req.held[-1] if req.held else None
        keys = req.keys
        for u in range(req.cache_upto, units):
            unit = self._child(parent, keys[u])
            if unit is None:
                unit = self._add(parent, keys[u])
                self.units += 1
                unit.ref = 1  # the request's own blocks, already counted as used
                req.held.append(unit)
            else:  # computed twice: share the cached copy, free this one
                delta += self._ref(req, unit) - self.unit_blocks
            self._touch(unit)
            parent = unit
        req.cache_upto = units
        return delta

    def release(self, req: Request) -> int:
        freed = 0
        for unit in reversed(req.held):  # tail first: evicted before the head
            unit.ref -= 1
            if unit.ref < 0:
                raise SimulationError("prefix cache unit released twice (engine bug)")
            if unit.ref == 0:
                self.evictable_blocks += self.unit_blocks
                freed += self.unit_blocks
                self._free(unit)
        req.held = []
        req.cache_upto = 0
        return freed


class BlockHashCache(_Base):
    """vLLM: a hash table of units and a free queue evicted from the front."""

    def __init__(
        self, unit_tokens: int, block_size: int, config: BlockHashConfig | None = None
    ) -> None:
        super().__init__(unit_tokens, block_size)
        self._table: dict[int, _Unit] = {}
        self._free_queue: OrderedDict[_Unit, int] = OrderedDict()
        """Unreferenced units in the order freed, each with its stamp."""
        self.free_queue = config is None or config.eviction == "free_queue"

    def _child(self, parent: _Unit | None, key: int) -> _Unit | None:
        return self._table.get(key)

    def _add(self, parent: _Unit | None, key: int) -> _Unit:
        unit = _Unit(key, None)
        self._table[key] = unit
        return unit

    def _unfree(self, unit: _Unit) -> None:
        del self._free_queue[unit]

    def _free(self, unit: _Unit) -> None:
        self._free_queue[unit] = next(self.free_clock)

    def evict(self, blocks: int) -> None:
        while blocks > 0 and self._free_queue:
            blocks -= self.evict_oldest()

    def oldest_free_stamp(self) -> int | None:
        """The stamp of the unit freed longest ago (None: no unit is free)."""
        queue = self._free_queue
        return next(iter(queue.values())) if queue else None

    def evict_oldest(self) -> int:
        """Evict the unit freed longest ago; returns its blocks."""
        unit, _ = self._free_queue.popitem(last=False)
        del self._table[unit.key]
        self.units -= 1
        self.evictable_blocks -= self.unit_blocks
        return self.unit_blocks


class RadixCache(_Base):
    """SGLang: a radix tree of units; the least recently used free leaf goes first."""

    def __init__(self, unit_tokens: int, block_size: int, config: object = None) -> None:
        super().__init__(unit_tokens, block_size)
        self._root = _Unit(0, None)
        self._heap: list[tuple[int, int, _Unit]] = []
        """Candidate free leaves by last access (entries go stale; checked on pop)."""

    def _child(self, parent: _Unit | None, key: int) -> _Unit | None:
        return (parent or self._root).children.get(key)

    def _add(self, parent: _Unit | None, key: int) -> _Unit:
        node = parent or self._root
        unit = _Unit(key, node)
        node.children[key] = unit
        return unit

    def _walk(self, req: Request, limit: int) -> list[_Unit]:
        found = super()._walk(req, limit)
        for unit in found:  # SGLang refreshes the whole matched path
            self._touch(unit)
        return found

    def _free(self, unit: _Unit) -> None:
        if not unit.children:
            heapq.heappush(self._heap, (unit.last_access, id(unit), unit))

    def evict(self, blocks: int) -> None:
        # SGLang heaps the free leaves by last access and pops; a parent left without
        # children joins the heap. Here the heap is kept between calls, and an entry
        # is checked when popped (the leaf may have been used or refreshed since).
        heap, root = self._heap, self._root
        while blocks > 0 and heap:
            access, _, unit = heapq.heappop(heap)
            parent = unit.parent
            if (
                unit.ref
                or unit.children
                or parent is None
                or parent.children.get(unit.key) is not unit
            ):
                continue  # in use, not a leaf, or gone
            if access != unit.last_access:
                heapq.heappush(heap, (unit.last_access, id(unit), unit))
                continue
            del parent.children[unit.key]
            unit.parent = None
            self.units -= 1
            self.evictable_blocks -= self.unit_blocks
            blocks -= self.unit_blocks
            if parent is not root and not parent.children and parent.ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))


PREFIX_CACHES: dict[str, type[_Base]] = {
    "block_hash": BlockHashCache,
    "radix": RadixCache,
}
