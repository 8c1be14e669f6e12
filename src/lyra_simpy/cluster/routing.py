"""Routers: which replica of a cluster serves each arriving request.

A router is a plain class (no SimPy) that sees a read-only :class:`ReplicaLoad` of every
replica at the request's arrival time and returns an index. The dispatcher
(:mod:`lyra_simpy.cluster.dispatch`) calls it exactly at each arrival, before any replica acts at
that instant, so a state-reading router sees what a real one would.

* ``round_robin``, ``random`` (vLLM production-stack / SGLang router ``round_robin``,
  ``random``);
* ``least_outstanding``: fewest requests sent and not yet finished (SGLang router's
  ``shortest_queue``; llm-d / Envoy "least request");
* ``least_kv``: most free KV blocks (vLLM production-stack's KV-usage-aware routing);
* ``power_of_two``: two replicas drawn at random, the one with fewer outstanding
  requests (Mitzenmacher's power of two choices; SGLang router ``power_of_two``);
* ``cache_aware``: SGLang's router (``sgl-router`` ``cache_aware``). It keeps, per
  replica, its own approximate record of the prefixes it sent there (a tree of the
  requests' prefix keys, least recently used evicted past ``max_tree_units``). If the
  load is imbalanced — ``max − min > balance_abs_threshold`` and ``max >
  balance_rel_threshold × min`` outstanding requests — it sends the request to the least
  loaded replica; otherwise to the replica whose record matches the longest share of
  the request's prefix if that share exceeds ``cache_threshold``, else to the replica
  with the smallest record (the most room). Defaults are sgl-router's: 0.3, 64, 1.5.

Ties go to the lowest index, so results are deterministic per seed. When some replicas
can never serve a request (a smaller KV pool, another scheduler) and others can, the
dispatcher passes *allowed* and every router chooses among the replicas allowed only,
by its own rule (a round robin moves on to the next allowed replica; cache-aware
routing weighs the load imbalance among them); when none can, the request goes where
the router sends it and is rejected there, with the reason. With processes on, only the
replicas serving are allowed (:mod:`lyra_simpy.cluster.dispatch`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

import numpy as np
from pydantic import ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.engine.request import Request


@dataclass(slots=True)
class ReplicaLoad:
    """What a router may read of one replica at an arrival (read only; not frozen, as
    a frozen dataclass is built five times slower, and one is built per replica at
    every arrival for a router that reads them)."""

    outstanding: int
    """Requests sent to it and not finished (queued, waiting, running, deferred)."""
    free_blocks: int
    """KV blocks free for allocation (cached but unreferenced blocks count as free)."""
    num_blocks: int


class _RouterConfig(Closed):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RoundRobinConfig(_RouterConfig):
    name: Literal["round_robin"] = "round_robin"


class RandomConfig(_RouterConfig):
    name: Literal["random"] = "random"


class LeastOutstandingConfig(_RouterConfig):
    name: Literal["least_outstanding"] = "least_outstanding"


class LeastKVConfig(_RouterConfig):
    name: Literal["least_kv"] = "least_kv"


class PowerOfTwoConfig(_RouterConfig):
    name: Literal["power_of_two"] = "power_of_two"


class CacheAwareConfig(_RouterConfig):
    name: Literal["cache_aware"] = "cache_aware"
    cache_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    """Least matched share of the prompt to follow the cache (sgl-router default 0.3)."""
    balance_abs_threshold: NonNegativeInt = 64
    """Imbalance needs max − min outstanding above this (sgl-router default 64)."""
    balance_rel_threshold: PositiveFloat = 1.5
    """... and max above this × min (sgl-router default 1.5)."""
    max_tree_units: PositiveInt | None = None
    """Prefix units remembered per replica, least recently used forgotten first (None:
    no limit; sgl-router bounds its tree by ``--max-tree-size``)."""


RouterConfig = Annotated[
    RoundRobinConfig
    | RandomConfig
    | LeastOutstandingConfig
    | LeastKVConfig
    | PowerOfTwoConfig
    | CacheAwareConfig,
    Field(discriminator="name"),
]


class Router(Protocol):
    reads_state: bool
    """Whether a decision reads the replicas' loads. One that does not (round robin,
    random) depends only on the order of arrivals, so the dispatcher may route ahead of
    time and let each replica run until its own next request."""

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        """Index of the replica that serves *req*: one of those *allowed* (None: any)."""
        ...


def _argmin(values: Sequence[float], allowed: Sequence[bool] | None = None) -> int:
    indices = range(len(values))
    if allowed is not None:
        indices = [i for i in indices if allowed[i]]  # type: ignore[assignment]
    return min(indices, key=values.__getitem__)


class RoundRobin:
    reads_state = False

    def __init__(self, config: RoundRobinConfig, n: int, rng: np.random.Generator) -> None:
        self._next = 0
        self._n = n

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        i = self._next
        while allowed is not None and not allowed[i]:
            i = (i + 1) % self._n
        self._next = (i + 1) % self._n
        return i


class RandomRouter:
    reads_state = False

    def __init__(self, config: RandomConfig, n: int, rng: np.random.Generator) -> None:
        self._n = n
        self._rng = rng

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        if allowed is None:
            return int(self._rng.integers(0, self._n))
        indices = [i for i, ok in enumerate(allowed) if ok]
        return indices[int(self._rng.integers(0, len(indices)))]


class LeastOutstanding:
    reads_state = True

    def __init__(self, config: LeastOutstandingConfig, n: int, rng: np.random.Generator) -> None:
        pass

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        return _argmin([x.outstanding for x in loads], allowed)


class LeastKV:
    reads_state = True

    def __init__(self, config: LeastKVConfig, n: int, rng: np.random.Generator) -> None:
        pass

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        return _argmin([-x.free_blocks for x in loads], allowed)


class PowerOfTwo:
    reads_state = True

    def __init__(self, config: PowerOfTwoConfig, n: int, rng: np.random.Generator) -> None:
        self._n = n
        self._rng = rng

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        indices = list(range(self._n))
        if allowed is not None:
            indices = [i for i in indices if allowed[i]]
        if len(indices) == 1:
            return indices[0]
        a, b = (indices[int(i)] for i in self._rng.choice(len(indices), size=2, replace=False))
        return a if (loads[a].outstanding, a) <= (loads[b].outstanding, b) else b


class CacheAware:
    reads_state = True

    def __init__(self, config: CacheAwareConfig, n: int, rng: np.random.Generator) -> None:
        self.config = config
        self._trees: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(n)]

    def route(
        self, req: Request, loads: Sequence[ReplicaLoad], allowed: Sequence[bool] | None = None
    ) -> int:
        c = self.config
        load = [x.outstanding for x in loads]
        among = load if allowed is None else [x for x, ok in zip(load, allowed, strict=True) if ok]
        hi, lo = max(among), min(among)
        if hi - lo > c.balance_abs_threshold and hi > c.balance_rel_threshold * lo:
            target = _argmin(load, allowed)
        else:
            keys = req.keys
            best, best_match = 0, -1
            for i, tree in enumerate(self._trees):
                if allowed is not None and not allowed[i]:
                    continue
                m = 0
                while m < len(keys) and keys[m] in tree:
                    m += 1
                if m > best_match:
                    best, best_match = i, m
            if keys and best_match / len(keys) > c.cache_threshold:
                target = best
            else:
                target = _argmin([len(t) for t in self._trees], allowed)
        self._remember(target, req)
        return target

    def _remember(self, i: int, req: Request) -> None:
        tree = self._trees[i]
        for key in req.keys:
            tree[key] = None
            tree.move_to_end(key)
        cap = self.config.max_tree_units
        while cap is not None and len(tree) > cap:
            tree.popitem(last=False)


ROUTERS: dict[str, Callable[[Any, int, np.random.Generator], Router]] = {
    "round_robin": RoundRobin,
    "random": RandomRouter,
    "least_outstanding": LeastOutstanding,
    "least_kv": LeastKV,
    "power_of_two": PowerOfTwo,
    "cache_aware": CacheAware,
}
