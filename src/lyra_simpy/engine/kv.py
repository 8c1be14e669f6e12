"""KV-cache block pool (vLLM PagedAttention accounting).

With a prefix cache, blocks of cached units that no running request references are
free (they count toward ``free``) but hold content until an allocation takes them. Which
allocation takes them is the cache's eviction rule:

* ``free_queue`` (vLLM V1's ``FreeKVCacheBlockQueue``, the ``block_hash`` default): one
  queue of every free block, cached or not, in the order they were freed (never-used
  blocks first; a request frees its blocks tail first); an allocation takes the oldest
  free blocks, evicting the cached units among them, even while younger uncached blocks
  are free.
* ``when_full`` (SGLang's radix cache, which evicts only when the pool cannot satisfy an
  allocation; an option for ``block_hash``): cached units are evicted, by the cache's own
  order, only when the blocks in use plus the cached ones would exceed the pool.

Both keep the same counts of used and free blocks; only which cached units survive (the
hit rate when memory is tight) differs.

The cache holds ``num_blocks`` blocks of ``block_size`` tokens. A request with *t*
tokens in the cache holds ``ceil(t / block_size)`` blocks; blocks are allocated as its
context grows and all released when it finishes or is preempted (recompute). The pool
never hands out more than it has: :meth:`BlockPool.allocate` raises, which a correct
scheduler never triggers (an invariant the tests check).
"""

from __future__ import annotations

from collections import deque
from itertools import count
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.errors import SimulationError

if TYPE_CHECKING:
    from lyra_simpy.policies.prefix_cache import PrefixCache


MEM_FRACTION = 0.9
"""vLLM's default ``--gpu-memory-utilization``."""
ACTIVATION_RESERVE_GIB = 3.5
"""aiconfigurator's ``other_mem`` (3.5 GiB, raised from 551 MB "for safer deployment")."""


class KVCacheConfig(Closed):
    """KV-cache geometry of one replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    block_size: PositiveInt = 16
    """Tokens per block (vLLM ``--block-size``, default 16; SGLang ``--page-size``)."""
    num_blocks: PositiveInt | Literal["auto"]
    """Blocks available for KV (vLLM reports this as ``# GPU blocks`` at start-up), or
    ``auto``: derived from the cost model's catalog entries (roofline), see
    :func:`~lyra_simpy.cost.catalog.kv_capacity_blocks`."""
    mem_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    """Only with ``auto``: fraction of device memory the engine may use (default
    ``MEM_FRACTION``: vLLM ``--gpu-memory-utilization``; SGLang ``--mem-fraction-static``)."""
    activation_reserve_gib: NonNegativeFloat | None = None
    """Only with ``auto``: memory kept per device for activations, CUDA graphs and the
    runtime (default ``ACTIVATION_RESERVE_GIB``)."""
    reserved_blocks: NonNegativeInt = 0
    """Blocks of ``num_blocks`` the engine keeps for itself and never gives a request.
    vLLM V1 takes one as its *null block* (``vllm/v1/core/block_pool.py``,
    ``BlockPool.__init__``: ``self.null_block = self.free_block_queue.popleft()``), so
    of the ``num_gpu_blocks`` it logs, one fewer hold KV: with 24 blocks its ``/metrics``
    KV usage moves in steps of 1/23. The ``vllm`` engine preset sets 1; default 0."""

    @model_validator(mode="after")
    def _memory_fields_need_auto(self) -> KVCacheConfig:
        if self.num_blocks != "auto":
            for key in ("mem_fraction", "activation_reserve_gib"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key}: only used with num_blocks: auto")
            if self.reserved_blocks >= self.num_blocks:
                raise ValueError(
                    f"reserved_blocks: got {self.reserved_blocks}, must be less than "
                    f"num_blocks ({self.num_blocks})"
                )
        return self

    @property
    def capacity_blocks(self) -> int:
        """Blocks requests can hold: ``num_blocks`` once resolved (the scenario resolves
        ``auto`` on load) less ``reserved_blocks``."""
        if isinstance(self.num_blocks, str):
            raise SimulationError("kv_cache.num_blocks 'auto' was not resolved (engine bug)")
        return self.num_blocks - self.reserved_blocks


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold *tokens* tokens."""
    return -(-tokens // block_size)


class BlockPool:
    """Counts KV blocks in use on one replica; *num_blocks* is the capacity."""

    __slots__ = (
        "_clock", "_queue", "_queued", "block_size", "cache", "num_blocks", "peak_used", "used",
    )  # fmt: skip

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.used = 0
        self.peak_used = 0
        self.cache: PrefixCache | None = None
        """A prefix cache whose unreferenced units hold free blocks: they are evicted
        when an allocation needs their blocks (see :meth:`attach`)."""
        self._queue: deque[list[int]] | None = None
        """``free_queue`` eviction: the uncached free blocks as [stamp, count] runs, oldest
        first (the cached free units are in the cache's own queue, stamped by the same
        clock); None: ``when_full``."""
        self._queued = 0
        """Blocks in ``_queue``."""
        self._clock = count(1)

    def attach(self, cache: PrefixCache | None) -> None:
        """Use *cache*'s unreferenced units as free blocks, evicted by its rule."""
        self.cache = cache
        if cache is not None and cache.free_queue:
            cache.free_clock = self._clock
            free = self.num_blocks - self.used - cache.evictable_blocks
            self._queue = deque([[0, free]] if free else [])
            self._queued = free

    def _make_room(self) -> None:
        cache = self.cache
        if self._queue is not None:
            self._sync()
        elif cache is not None:
            over = self.used + cache.evictable_blocks - self.num_blocks
            if over > 0:
                cache.evict(over)
                if self.used + cache.evictable_blocks > self.num_blocks:
                    raise SimulationError(
                        f"KV over capacity: {self.used} blocks in use + "
                        f"{cache.evictable_blocks} cached > {self.num_blocks} (engine bug)"
                    )

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def allocate(self, blocks: int) -> None:
        used = self.used + blocks
        if used > self.num_blocks:
            raise SimulationError(
                f"KV over capacity: {used} blocks in use > {self.num_blocks} (scheduler bug)"
            )
        self.used = used
        if used > self.peak_used:
            self.peak_used = used
        self._make_room()

    def set_used(self, used: int) -> None:
        """Set the blocks in use after a fused run (its peak went to :meth:`note_peak`)."""
        if not 0 <= used <= self.num_blocks:
            raise SimulationError(f"KV blocks in use out of range: {used} (engine bug)")
        self.used = used
        self._make_room()

    def note_peak(self, used: int) -> None:
        """Record a peak reached inside a fused run."""
        if used > self.num_blocks:
            raise SimulationError(f"KV over capacity in a fused run: {used} (engine bug)")
        if used > self.peak_used:
            self.peak_used = used

    def release(self, blocks: int) -> None:
        self.used -= blocks
        if self.used < 0:
            raise SimulationError("KV blocks released twice (engine bug)")
        if self._queue is not None:
            self._sync()

    def _sync(self) -> None:
        """``free_queue``: uncached blocks freed since the last call join the queue's
        tail; blocks newly in use are taken from its head (evicting cached units)."""
        queue = self._queue
        cache = self.cache
        assert queue is not None
        assert cache is not None
        gap = self.num_blocks - self.used - cache.evictable_blocks - self._queued
        if gap > 0:
            queue.append([next(self._clock), gap])
            self._queued += gap
            return
        need = -gap
        while need > 0:
            oldest_unit = cache.oldest_free_stamp()  # type: ignore[attr-defined]
            if queue and (oldest_unit is None or queue[0][0] < oldest_unit):
                run = queue[0]
                take = min(need, run[1])
                run[1] -= take
                self._queued -= take
                need -= take
                if not run[1]:
                    queue.popleft()
            elif oldest_unit is not None:
                blocks = cache.evict_oldest()  # type: ignore[attr-defined]
                if blocks > need:  # the rest of its blocks stay at the head, uncached
                    queue.appendleft([oldest_unit, blocks - need])
                    self._queued += blocks - need
                need -= blocks
            else:
                raise SimulationError(
                    f"KV over capacity: {self.used} blocks in use + "
                    f"{cache.evictable_blocks} cached > {self.num_blocks} (engine bug)"
                )
