"""``simulate(scenario) -> Results``: wire the parts from the registries and run.

Nothing is written here (STYLE §8): the caller decides what to keep
(:mod:`lyra_simpy.metrics.io` writes the files of DESIGN §4).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from lyra_simpy.cluster.config import ReplicaSpec
from lyra_simpy.cluster.disagg import HandOff
from lyra_simpy.cluster.dispatch import Dispatcher, FailoverConfig, HandedSource, replica_loads
from lyra_simpy.cluster.lifecycle import Fleet, state_summary
from lyra_simpy.cluster.routing import ROUTERS, RoundRobinConfig
from lyra_simpy.cost import CostModel
from lyra_simpy.cost.jitter import expected, with_jitter
from lyra_simpy.cost.wake import resolved_wake
from lyra_simpy.engine.kv import BlockPool
from lyra_simpy.engine.replica import Policies, Replica, Rules
from lyra_simpy.engine.request import RECORD_FIELDS, RejectReason, Request
from lyra_simpy.engine.speculative import Speculator
from lyra_simpy.metrics.collector import REASON_CODES, STATUS_CODES, Collector, RequestLog
from lyra_simpy.metrics.fairness import fairness_summary, unloaded_service_s
from lyra_simpy.metrics.summary import failure_summary, summarize
from lyra_simpy.policies import ADMISSIONS, SCHEDULERS, Admission, Limits
from lyra_simpy.policies.prefix_cache import PREFIX_CACHES, PrefixCache
from lyra_simpy.processes import PROCESSES, Cluster, replica_slots
from lyra_simpy.rng import Streams
from lyra_simpy.scenario import Scenario
from lyra_simpy.workload import build_source
from lyra_simpy.workload.prefixes import reuse_bound, unit_tokens
from lyra_simpy.workload.source import Feed


@dataclass
class Results:
    """Everything one run produced, in memory."""

    scenario: Scenario
    records: dict[str, npt.NDArray[Any]]
    """Per-request columns named as the JSONL contract (DESIGN §4), one row per arrival."""
    summary: dict[str, Any]
    """vLLM-named summary metrics (see :mod:`lyra_simpy.metrics.summary`)."""
    timeseries: dict[str, npt.NDArray[Any]]
    """Per-iteration columns (``SERIES_FIELDS``); empty with ``timeseries: false``."""
    itl_s: tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]
    """Pooled inter-token latencies as (value in seconds, how many) pairs."""
    engine: dict[str, Any] = field(default_factory=dict)
    request_log: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    """With ``simulate(..., request_log=True)``: every prompt chunk and preemption
    (:class:`~lyra_simpy.metrics.collector.RequestLog`); empty otherwise."""
    """Engine counters: iterations, simulated end time, peak KV blocks."""
    transfers: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    """Disaggregation: per handed-off request, ``request_id``, ``decode_replica``,
    ``handoff_wait_ms`` (first token to transfer start) and ``kv_transfer_ms`` (empty
    otherwise)."""
    replicas: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    """With processes: every change of a replica's state — ``time_s``, ``replica``,
    ``state`` (code into :data:`~lyra_simpy.cluster.lifecycle.STATES`), ``serving``
    (replicas serving after it) — from the first state of each at 0 (empty otherwise)."""

    def requests(self) -> Iterator[dict[str, Any]]:
        """The per-request records as dicts (JSONL field order; NaN becomes None)."""
        cols = [self.records[name].tolist() for name in RECORD_FIELDS]
        for row in zip(*cols, strict=True):
            yield {
                k: (None if isinstance(v, float) and v != v else v)
                for k, v in zip(RECORD_FIELDS, row, strict=True)
            }


def _records(source: Any, collector: Collector, end_s: float) -> dict[str, npt.NDArray[Any]]:
    arrival = np.asarray(source.arrival_s, dtype=np.float64)
    # Arrivals are the requests whose time came by the end of the run.
    n = int(np.count_nonzero(arrival <= end_s))
    arrival = arrival[:n]
    first = collector.first_token_s[:n]
    finish = collector.finish_s[:n]
    out_tok = source.output_tokens[:n]
    with np.errstate(invalid="ignore", divide="ignore"):
        ttft = (first - arrival) * 1000.0
        e2el = (finish - arrival) * 1000.0
        tpot = np.where(out_tok > 1, (e2el - ttft) / (out_tok - 1), np.nan)
    status = np.array(STATUS_CODES, dtype=object)[collector.status[:n]]
    tpot = np.where(status == "ok", tpot, np.nan)
    return {
        "request_id": np.arange(n, dtype=np.int64),
        "arrival_s": arrival,
        "input_tokens": source.input_tokens[:n],
        "output_tokens": out_tok,
        "cached_tokens": collector.cached_tokens[:n],
        "first_token_s": first,
        "finish_s": finish,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "e2el_ms": e2el,
        "status": status,
        "reject_reason": np.array(REASON_CODES, dtype=object)[collector.reason[:n]],
        "replica": collector.replica[:n],
        "preemptions": collector.preemptions[:n],
    }


def _admission(scenario: Scenario, spec: ReplicaSpec, cost: CostModel) -> Admission:
    """The scenario's admission policy, given the SLO and the replica's limits."""
    sched = spec.scheduler
    limits = Limits(
        scenario.slo.ttft_ms,
        scenario.slo.tpot_ms,
        sched.max_batch,
        sched.token_budget,
        spec.kv_cache.capacity_blocks * spec.kv_cache.block_size,
        sched.alone_chunk_tokens if sched.name == "chunked_prefill" else None,
    )
    admission: Admission = ADMISSIONS[scenario.admission.name](scenario.admission, cost, limits)
    return admission


def _with_bound(summary: dict[str, Any], scenario: Scenario, source: Any) -> dict[str, Any]:
    """Add ``prefix_cache_hit_rate_bound``: the unlimited-cache hit rate of the workload
    (0 when its prompts share nothing)."""
    keys = source.keys
    bound = 0.0
    if keys is not None:
        unit = unit_tokens(scenario.workload.prefix, scenario.kv_cache.block_size)
        bound = reuse_bound(keys, source.input_tokens, unit)
    summary["prefix_cache_hit_rate_bound"] = bound
    return summary


def _build_replica(
    i: int, spec: ReplicaSpec, scenario: Scenario, env: simpy.Environment, source: Feed,
    collector: Collector, streams: Streams, *, in_cluster: bool,
    handoff: HandOff | None = None, fuse: bool = True,
) -> Replica:  # fmt: skip
    """Replica *i* of *scenario*; *in_cluster*: a router (or a hand-off) feeds it, so a
    fused run must end where the router reads its state (``Rules.strict_horizon``);
    *fuse*: False for the replicas of a disaggregated cluster."""
    strict_horizon = in_cluster
    scheduler = SCHEDULERS[spec.scheduler.name](spec.scheduler)
    exact = spec.cost_model()
    cost = with_jitter(exact, spec.cost, streams, i, lambda: env.now)
    kv_cfg = spec.kv_cache
    kv = BlockPool(kv_cfg.capacity_blocks, kv_cfg.block_size)
    cache = _prefix_cache(spec, scenario)
    # A closed loop's next request may reach any replica of a cluster when another one
    # finishes: no replica can know its next arrival, so none fuses iterations.
    fuse = fuse and scenario.simulation.fuse_iterations
    fuse = fuse and not (strict_horizon and source.feedback)
    fuse = fuse and cost is exact  # jitter draws per iteration (cost/jitter.py)
    w = scenario.workload
    arrival_cost_s = w.request_path_ms * w.request_path_cpu_share / 1000.0
    fuse = fuse and not arrival_cost_s  # (an arrival lengthens the iteration it lands in)
    speculator = None
    if scenario.speculative is not None:
        speculator = Speculator(scenario.speculative, streams.get(f"speculative{i}"))
    policies = Policies(scheduler, cost, _admission(scenario, spec, exact), cache, speculator)
    wake = resolved_wake(spec.cost)
    rules = Rules(
        fuse, scenario.simulation.until_s, strict_horizon, arrival_cost_s,
        wake.after_s if wake else 0.0, wake.ms / 1000.0 if wake else 0.0,
    )  # fmt: skip
    return Replica(env, i, policies, kv, source, collector, rules, handoff)


def _prefix_cache(spec: ReplicaSpec, scenario: Scenario) -> PrefixCache | None:
    """An empty prefix cache for a replica of *spec* (None: no cache)."""
    if spec.prefix_cache is None:
        return None
    block = spec.kv_cache.block_size
    cache: PrefixCache = PREFIX_CACHES[spec.prefix_cache.name](
        unit_tokens(scenario.workload.prefix, block), block, spec.prefix_cache
    )
    return cache


def simulate(
    scenario: Scenario,
    watch: Callable[[simpy.Environment], AbstractContextManager[None]] | None = None,
    *,
    request_log: bool = False,
) -> Results:
    """Run *scenario* (one variant: see :meth:`Scenario.expand`) and return its results.

    *watch*, given the environment, returns a context held while the clock runs (an
    observer such as :mod:`lyra_simpy.output.progress`; it must not schedule events).
    *request_log*: keep every prompt chunk and preemption (``Results.request_log``, what
    a timeline draws)."""
    streams = Streams(scenario.seed)
    specs = scenario.replica_specs()
    managed = bool(scenario.processes)  # replicas come and go (lyra_simpy.processes)
    initial = len(specs)
    if managed:  # slots an autoscaler may start, off at first
        specs += [specs[0]] * (replica_slots(scenario.processes, initial) - initial)
    # Past the stop, a replica sees its next arrival and a router routes at most
    # AHEAD_PER_REPLICA per replica ahead: that many are drawn beyond it, no more.
    # (With processes the whole workload is drawn: one may change the rate.)
    spare = 1 + (Dispatcher.AHEAD_PER_REPLICA * len(specs) if scenario.cluster else 0)
    source = build_source(
        scenario.workload,
        streams,
        scenario.base_dir,
        specs[0].kv_cache.block_size,
        None if managed else scenario.simulation.until_s,
        spare,
    )
    collector = Collector(len(source.input_tokens), scenario.simulation.timeseries)
    source.on_grow(collector.grow)
    if request_log:
        collector.log = RequestLog()
    env = simpy.Environment()
    until = scenario.simulation.until_s
    replicas: list[Replica] = []
    dispatcher = None
    handoff = None
    fleet = None
    if scenario.cluster is None and not managed:
        replicas.append(
            _build_replica(0, specs[0], scenario, env, source, collector, streams, in_cluster=False)
        )
    elif scenario.cluster is not None and scenario.cluster.disaggregation is not None:
        dispatcher, handoff = _disaggregated(scenario, specs, env, source, collector, streams)
        replicas = dispatcher.replicas + handoff.decode
    else:
        cluster = scenario.cluster
        router_cfg = cluster.router if cluster is not None else RoundRobinConfig()
        router = ROUTERS[router_cfg.name](router_cfg, len(specs), streams.get("router"))
        loads = functools.partial(replica_loads, replicas)
        failover = None
        if managed:
            failover = cluster.failover if cluster is not None else FailoverConfig()
        dispatcher = Dispatcher(env, source, router, loads, True, failover, collector)
        for i, spec in enumerate(specs):
            routed = dispatcher.add_replica()
            replicas.append(
                _build_replica(i, spec, scenario, env, routed, collector, streams, in_cluster=True)
            )
            if managed:  # a replica that fails comes back with a fresh scheduler
                replicas[-1].cold_scheduler = functools.partial(
                    SCHEDULERS[spec.scheduler.name], spec.scheduler
                )
            if managed and spec.prefix_cache is not None:
                replicas[-1].cold_cache = functools.partial(_prefix_cache, spec, scenario)
        dispatcher.replicas = replicas
        dispatcher.mixed = _mixed(specs)
        if managed:
            fleet = Fleet(env, replicas, dispatcher, collector, initial)
    if dispatcher is not None:
        dispatcher.start()
    for i, replica in enumerate(replicas):
        replica.carry = dispatcher is not None and dispatcher.carry
        replica.process = env.process(fleet.loop(i) if fleet is not None else replica.run())
    if fleet is not None:
        for key, cfg in scenario.processes.items():
            handle = Cluster(env, fleet, source, streams, key)
            env.process(PROCESSES[cfg.name](env, handle, cfg))
    with nullcontext() if watch is None else watch(env):
        if fleet is not None and until is None:  # processes may go on for ever
            _run_until_finished(env, fleet)
        else:
            env.run(until=until)
    for replica in replicas:
        for req in chain(replica.waiting, replica.running, replica.deferred):
            collector.leave_unfinished(req)
    if fleet is not None:
        _end_waiting(fleet, until is None)
    # Requests due by the stop but not yet taken by a replica still arrived: they are
    # recorded as unfinished (closed-loop ones get their arrival time when taken).
    source.pop_until(float(env.now))
    records = _records(source, collector, float(env.now))
    itl = (
        np.frombuffer(collector.itl_values, dtype=np.float64),
        np.frombuffer(collector.itl_weights, dtype=np.int64),
    )
    if len(replicas) > 1:  # replicas add their gaps in whatever order their events run
        order = np.lexsort((itl[1], itl[0]))
        itl = (itl[0][order], itl[1][order])
        del order
        collector.itl_values, collector.itl_weights = array("d"), array("q")  # (the copies)
    summary = summarize(records, itl, scenario.slo.model_dump())
    if handoff is not None:
        summary.update(_transfer_summary(handoff))
    summary.update(fairness_summary(records, _unloaded(records, specs, replicas)))
    end_s = float(env.now)
    summary.update(
        failure_summary(
            records, collector.retries[: len(records["status"])], scenario.slo.model_dump(),
            summary["duration"],
        )
    )  # fmt: skip
    summary.update(
        fleet.summary(end_s)
        if fleet is not None
        else state_summary([0.0] * len(replicas), range(len(replicas)),
                           ["serving"] * len(replicas), len(replicas), end_s)
    )  # fmt: skip
    busy = any(r.running for r in replicas) or (handoff is not None and handoff.busy)
    return Results(
        scenario=scenario,
        records=records,
        summary=_with_bound(summary, scenario, source),
        timeseries=collector.series_arrays() if scenario.simulation.timeseries else {},
        itl_s=itl,
        engine={
            "iterations": collector.iterations,
            "end_s": float(env.now),
            "peak_kv_blocks": sum(r.kv.peak_used for r in replicas),
            "kv_blocks": sum(r.kv.num_blocks for r in replicas),
            # State at the end (None while requests remain: an iteration may be in
            # flight at the stop, its blocks allocated unfused but not in a fused run)
            "kv_blocks_used_at_end": None if busy else sum(r.kv.used for r in replicas),
            "prefix_cache_units": None if busy else sum(_cache(r, "units") for r in replicas),
            "prefix_cache_evictable_blocks": (
                None if busy else sum(_cache(r, "evictable_blocks") for r in replicas)
            ),
            **({"replicas": _per_replica(records, replicas, dispatcher)} if dispatcher else {}),
        },
        transfers=_transfer_table(handoff) if handoff is not None else {},
        request_log=collector.log.arrays() if collector.log is not None else {},
        replicas=fleet.table() if fleet is not None else {},
    )


def _run_until_finished(env: simpy.Environment, fleet: Fleet) -> None:
    """Run until every request ended (the processes' own events may go on for ever),
    or until nothing is left to happen (requests held for want of a replica)."""
    try:
        env.run(until=fleet.dispatcher.finished)
    except RuntimeError as exc:  # SimPy: the queue emptied before the event triggered
        if "No scheduled events left" not in str(exc):
            raise


def _end_waiting(fleet: Fleet, ended: bool) -> None:
    """Requests still held at the router for want of a replica: ``failed`` (``no_replica``)
    when the run ended by itself, left ``unfinished`` when ``until_s`` stopped it."""
    dispatcher = fleet.dispatcher
    waiting = [req for req, _ in dispatcher.held] + list(dispatcher.retrying)
    dispatcher.held.clear()
    dispatcher.retrying.clear()
    for req in waiting:
        if ended:
            dispatcher.collector.fail(req, "no_replica")  # type: ignore[union-attr]
        else:
            dispatcher.collector.leave_unfinished(req)  # type: ignore[union-attr]


def _disaggregated(
    scenario: Scenario, specs: list[ReplicaSpec], env: simpy.Environment, source: Any,
    collector: Collector, streams: Streams,
) -> tuple[Dispatcher, HandOff]:  # fmt: skip
    """Prefill replicas behind the router, decode replicas behind the hand-off queue."""
    assert scenario.cluster is not None
    assert scenario.cluster.disaggregation is not None
    d = scenario.cluster.disaggregation
    n_prefill = d.prefill.count
    prefill: list[Replica] = []
    router_cfg = scenario.cluster.router
    router = ROUTERS[router_cfg.name](router_cfg, n_prefill, streams.get("router"))
    dispatcher = Dispatcher(env, source, router, lambda: replica_loads(prefill))

    def reject(req: Request, reason: RejectReason) -> None:
        collector.reject(req, reason)
        dispatcher.on_finish(env.now)

    handoff = HandOff(env, d.link, 0, [], d.decode_router, reject)
    for i, spec in enumerate(specs[:n_prefill]):
        r = _build_replica(
            i, spec, scenario, env, dispatcher.add_replica(), collector, streams,
            in_cluster=True, handoff=handoff, fuse=False,
        )  # fmt: skip
        prefill.append(r)
    bytes_per_token = d.link.kv_bytes_per_token or int(
        prefill[0].cost.describe()["kv_bytes_per_token"]  # type: ignore[attr-defined]
    )
    handoff.set_bytes_per_token(bytes_per_token)
    for i, spec in enumerate(specs[n_prefill:], start=n_prefill):
        r = _build_replica(
            i, spec, scenario, env, HandedSource(dispatcher), collector, streams,
            in_cluster=True, fuse=False,
        )  # fmt: skip
        r.on_free = handoff.dispatch
        handoff.add_decode(r)
    dispatcher.replicas = prefill
    dispatcher.mixed = _mixed(specs[:n_prefill])
    return dispatcher, handoff


def _mixed(specs: list[ReplicaSpec]) -> bool:
    """Whether some replicas may be able to serve a request that others cannot."""
    first = specs[0]
    return any(s.scheduler != first.scheduler or s.kv_cache != first.kv_cache for s in specs[1:])


def _transfer_table(handoff: HandOff) -> dict[str, npt.NDArray[Any]]:
    t = handoff.timings
    ids = np.array(sorted(t.transfer_ms), dtype=np.int64)
    return {
        "request_id": ids,
        "decode_replica": np.array([t.decode_replica[i] for i in ids], dtype=np.int64),
        "handoff_wait_ms": np.array([t.queued_ms[i] for i in ids], dtype=np.float64),
        "kv_transfer_ms": np.array([t.transfer_ms[i] for i in ids], dtype=np.float64),
    }


def _transfer_summary(handoff: HandOff) -> dict[str, float | None]:
    """Hand-off statistics: waiting for decode room, and time on the link (None when
    nothing was handed off)."""
    out: dict[str, float | None] = {}
    for name, values in (
        ("handoff_wait", handoff.timings.queued_ms),
        ("kv_transfer", handoff.timings.transfer_ms),
    ):
        v = np.fromiter(values.values(), dtype=np.float64)
        out[f"mean_{name}_ms"] = float(v.mean()) if len(v) else None
        out[f"p99_{name}_ms"] = float(np.percentile(v, 99)) if len(v) else None
    return out


def _cache(replica: Replica, name: str) -> int:
    return int(getattr(replica.cache, name)) if replica.cache is not None else 0


def _unloaded(
    records: dict[str, npt.NDArray[Any]], specs: list[ReplicaSpec], replicas: list[Replica]
) -> npt.NDArray[np.float64]:
    """Each request's unloaded service time on the replica that served it (alone, a
    prompt longer than the token budget would be split into chunks of it)."""
    out = np.zeros(len(records["input_tokens"]), dtype=np.float64)
    where = records["replica"]
    for i, (spec, replica) in enumerate(zip(specs, replicas, strict=True)):
        mine = where == i
        if i == 0:
            mine |= where < 0  # never assigned (not arrived in time): any replica's cost
        if mine.any():
            out[mine] = unloaded_service_s(
                expected(replica.cost), records["input_tokens"][mine],
                records["output_tokens"][mine],
                spec.scheduler.alone_chunk_tokens,
                records["cached_tokens"][mine],
            )  # fmt: skip
    return out


def _per_replica(
    records: dict[str, npt.NDArray[Any]], replicas: list[Replica], dispatcher: Dispatcher
) -> list[dict[str, Any]]:
    """Load, KV use and hit rate of every replica of a cluster."""
    out = []
    ok = records["status"] == "ok"
    for i, replica in enumerate(replicas):
        mine = ok & (records["replica"] == i)
        prompt = int(records["input_tokens"][mine].sum())
        ttft = records["ttft_ms"][mine]
        out.append(
            {
                "replica": i,
                "routed": dispatcher.routed[i] if i < len(dispatcher.routed) else 0,
                "completed": int(mine.sum()),
                "output_tokens": int(records["output_tokens"][mine].sum()),
                "prefix_cache_hit_rate": (
                    int(records["cached_tokens"][mine].sum()) / prompt if prompt else None
                ),
                "median_ttft_ms": float(np.median(ttft)) if len(ttft) else None,
                "peak_kv_blocks": replica.kv.peak_used,
                "kv_blocks": replica.kv.num_blocks,
            }
        )
    return out
