"""The shape of a cluster as a scenario gives it: replica groups, the router, prefill/
decode disaggregation, failover (``cluster:`` in the YAML), and what one replica is made
of (:class:`ReplicaSpec`), checked against the workload (:func:`check_replica`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field, PositiveInt

from lyra_simpy.cluster.disagg import LinkConfig
from lyra_simpy.cluster.dispatch import FailoverConfig
from lyra_simpy.cluster.routing import RoundRobinConfig, RouterConfig
from lyra_simpy.config import Closed
from lyra_simpy.cost import COST_MODELS, CostConfig, CostModel
from lyra_simpy.engine.kv import KVCacheConfig
from lyra_simpy.policies import SchedulerConfig
from lyra_simpy.policies.prefix_cache import PrefixCacheConfig
from lyra_simpy.workload import WorkloadConfig
from lyra_simpy.workload.prefixes import unit_tokens


class ReplicaGroup(Closed):
    """*count* identical replicas; a part left out is the scenario's own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: PositiveInt = 1
    scheduler: SchedulerConfig | None = None
    kv_cache: KVCacheConfig | None = None
    cost: CostConfig | None = None
    prefix_cache: PrefixCacheConfig | None = None


class DisaggregationConfig(Closed):
    """Separate prefill and decode pools joined by a KV link (:mod:`lyra_simpy.cluster.disagg`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: ReplicaGroup
    decode: ReplicaGroup
    link: LinkConfig
    decode_router: Literal["least_outstanding", "least_kv"] = "least_outstanding"
    """How a decode replica is picked among those with room."""


class ClusterConfig(Closed):
    """Several replicas behind a router (see :mod:`lyra_simpy.cluster.dispatch`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replicas: PositiveInt = 1
    """Copies of the scenario's replica (when ``groups`` is empty)."""
    groups: list[ReplicaGroup] = Field(default_factory=list)
    """Heterogeneous replicas: each group's count of replicas, in order."""
    router: RouterConfig = Field(default_factory=RoundRobinConfig)
    """Routes arrivals over the replicas (the prefill pool when disaggregated)."""
    disaggregation: DisaggregationConfig | None = None
    """Prefill/decode pools instead of ``replicas``/``groups`` (None: colocated)."""
    failover: FailoverConfig = Field(default_factory=FailoverConfig)
    """Retries and waiting when replicas fail or none serves (with ``processes`` only)."""


@dataclass(frozen=True)
class ReplicaSpec:
    """What one replica is made of."""

    scheduler: Any
    kv_cache: KVCacheConfig
    cost: Any
    prefix_cache: Any

    def cost_model(self) -> CostModel:
        """Its cost model without noise: the cost config built with the scheduler's
        largest batch (what the simulator, ``compare --steps`` and the validation
        scripts price a step with)."""
        return COST_MODELS[self.cost.name](self.cost, self.scheduler.max_batch)


def check_replica(spec: ReplicaSpec, workload: WorkloadConfig, where: str) -> None:
    if where and spec.kv_cache.num_blocks == "auto":
        raise ValueError(
            f"{where}kv_cache.num_blocks: got 'auto', must be a number of blocks in a "
            "replica group (only the scenario's own kv_cache derives it from the catalog)"
        )
    if spec.prefix_cache is not None:
        if spec.scheduler.name in ("static", "llamacpp"):
            raise ValueError(
                f"{where}prefix_cache: got a cache with scheduler {spec.scheduler.name!r}, "
                "must be used with continuous, chunked_prefill or prefill_first"
            )
        unit = unit_tokens(workload.prefix, spec.kv_cache.block_size)
        if unit % spec.kv_cache.block_size:
            raise ValueError(
                f"workload.prefix.unit_tokens: got {unit}, must be a multiple of "
                f"{where}kv_cache.block_size ({spec.kv_cache.block_size})"
            )
    shared = workload.prefix.name != "none"
    if spec.scheduler.name == "llamacpp" and spec.scheduler.cache_prompt and shared:
        raise ValueError(
            f"{where}scheduler.cache_prompt: got true with shared prefixes "
            "(workload.prefix); llama.cpp's per-slot prompt reuse is not modelled: set "
            "cache_prompt: false (and send it so), or drop the prefixes"
        )
    chunk = getattr(spec.scheduler, "chunked_prefill_size", None)
    page = spec.kv_cache.block_size
    if chunk is not None and chunk % page:
        raise ValueError(
            f"{where}scheduler.chunked_prefill_size: got {chunk}, must be a multiple of "
            f"{where}kv_cache.block_size ({page}), as SGLang requires of its page size"
        )
