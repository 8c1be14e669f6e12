"""Invariants over random small scenarios (DESIGN §6, STYLE §12b).

Every arrival ends ok|rejected|unfinished; KV never exceeds capacity; time never goes
backwards; the same scenario and seed give byte-identical JSONL; fused and unfused
decode spans give the same observables (DESIGN §6); tokens are conserved.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lyra_simpy import Results, scenario_from_dict, simulate
from lyra_simpy.cost import LinearCost, LinearCostConfig
from lyra_simpy.kv import blocks_for
from lyra_simpy.metrics.fairness import unloaded_service_s
from lyra_simpy.metrics.io import write_jsonl
from lyra_simpy.scenario import set_path

# -- strategies ----------------------------------------------------------------------

open_arrivals = st.one_of(
    st.builds(lambda r: {"name": "poisson", "rate_per_s": r}, st.floats(1, 200)),
    st.builds(
        lambda r, cv: {"name": "gamma", "rate_per_s": r, "cv": cv},
        st.floats(1, 200),
        st.floats(0.2, 4),
    ),
    st.builds(lambda r: {"name": "constant", "rate_per_s": r}, st.floats(1, 200)),
)
closed_arrivals = st.builds(
    lambda c, t: {"name": "closed_loop", "concurrency": c, "think_time_s": t},
    st.integers(1, 6),
    st.sampled_from([0.0, 0.001, 0.02]),
)


def lengths(hi: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda n: {"name": "fixed", "tokens": n}, st.integers(1, hi)),
        st.builds(
            lambda a, b: {"name": "uniform", "low": min(a, b), "high": max(a, b)},
            st.integers(1, hi),
            st.integers(1, hi),
        ),
        st.builds(
            lambda m: {"name": "lognormal", "mean": m, "sigma": 0.8, "max": hi},
            st.integers(2, hi),
        ),
    )


queue_policies = st.sampled_from(["fcfs", "shortest_prompt_first"])


@st.composite
def schedulers(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        seqs = draw(st.integers(1, 8))
        return {
            "name": "continuous",
            "max_num_seqs": seqs,
            "max_num_batched_tokens": draw(st.integers(max(seqs, 24), 160)),
            "queue_policy": draw(queue_policies),
        }
    return {
        "name": "static",
        "max_batch": draw(st.integers(1, 6)),
        "max_wait_ms": draw(st.one_of(st.none(), st.floats(0, 100))),
        "queue_policy": draw(queue_policies),
    }


@st.composite
def scenarios(draw: st.DrawFn, until: bool = False) -> dict[str, Any]:
    sched = draw(schedulers())
    if until:
        # closed loops lose requests under until_s: test_closed_loop_arrival_before_until_s
        arrival = draw(open_arrivals)
    else:
        arrival = dict(draw(st.one_of(open_arrivals, closed_arrivals)))
    if arrival["name"] == "closed_loop" and sched["name"] == "static":
        # zero think time crashes static batching when a request is rejected:
        # test_closed_loop_think0_rejection_with_static_batching
        arrival["think_time_s"] = max(arrival["think_time_s"], 0.001)
    width = sched.get("max_num_seqs", sched.get("max_batch"))
    raw: dict[str, Any] = {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "workload": {
            "num_requests": draw(st.integers(1, 24)),
            "arrival": arrival,
            "input_tokens": draw(lengths(64)),
            "output_tokens": draw(lengths(48)),
        },
        "scheduler": sched,
        # small pools: preemption and rejection happen
        "kv_cache": {
            "block_size": draw(st.sampled_from([1, 2, 4, 8, 16])),
            "num_blocks": draw(st.integers(3, 60)),
        },
        "cost": {
            "name": "linear",
            "base_ms": draw(st.floats(0.5, 20)),
            "per_seq_ms": draw(st.sampled_from([0.0, 0.5, 1.0, 1.7])),
            "per_prefill_token_ms": draw(st.sampled_from([0.0, 0.013, 0.1])),
            "per_context_token_ms": draw(st.sampled_from([0.0, 0.001, 0.0037])),
            "padding": draw(st.sampled_from(["none", "max_batch", [1, 2, 4], [2, 8], [width + 1]])),
        },
        "slo": {"ttft_ms": 100.0, "tpot_ms": 25.0},
    }
    if until:
        raw["simulation"] = {"until_s": draw(st.floats(0.005, 1.0))}
    return raw


# -- helpers ---------------------------------------------------------------------------


def run(raw: dict[str, Any], **changes: Any) -> Results:
    """Simulate *raw* with ``a__b=value`` changes (dotted paths)."""
    raw = json.loads(json.dumps(raw))
    for path, value in changes.items():
        set_path(raw, path.replace("__", "."), value)
    return simulate(scenario_from_dict(raw))


class _MemoryPath:
    """What :func:`write_jsonl` needs of a Path, writing to memory."""

    def __init__(self) -> None:
        self.text = ""

    def open(self, mode: str) -> _Sink:
        assert mode == "w"
        return _Sink(self)


class _Sink(io.StringIO):
    def __init__(self, owner: _MemoryPath) -> None:
        super().__init__()
        self.owner = owner

    def close(self) -> None:
        self.owner.text += self.getvalue()
        super().close()


def jsonl(res: Results) -> bytes:
    """The run's requests.jsonl, byte for byte."""
    path = _MemoryPath()
    write_jsonl(path, res.requests())  # type: ignore[arg-type]
    return path.text.encode()


def served(raw: dict[str, Any], inp: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Which requests the scheduler can ever serve (the rest is rejected on arrival)."""
    kv = raw["kv_cache"]
    sched = raw["scheduler"]
    if sched["name"] == "continuous":
        longest = inp + out - 1
        ok = longest <= sched["max_num_batched_tokens"]
    else:
        longest = inp + out
        ok = np.ones(len(inp), dtype=bool)
    blocks = np.array([blocks_for(int(t), kv["block_size"]) for t in longest], dtype=np.int64)
    return ok & (blocks <= kv["num_blocks"])


def assert_same_results(a: Results, b: Results) -> None:
    """Every observable of *a* and *b* equal bit for bit (DESIGN §6): records, JSONL,
    summary, time series, ITL pairs."""

    def same(x: Any, y: Any, what: str) -> None:
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype, what
        np.testing.assert_array_equal(x, y, err_msg=what)

    assert jsonl(a) == jsonl(b)
    assert list(a.records) == list(b.records)
    for name in a.records:
        same(a.records[name], b.records[name], f"records.{name}")
    assert list(a.summary) == list(b.summary)
    for name in a.summary:
        same(a.summary[name], b.summary[name], f"summary.{name}")
    assert list(a.timeseries) == list(b.timeseries)
    for name in a.timeseries:
        same(a.timeseries[name], b.timeseries[name], f"timeseries.{name}")
    same(a.itl_s[0], b.itl_s[0], "itl values")
    same(a.itl_s[1], b.itl_s[1], "itl weights")
    assert list(a.engine) == list(b.engine)
    for name in a.engine:
        same(a.engine[name], b.engine[name], f"engine.{name}")


def check_common(raw: dict[str, Any], res: Results, fused: bool = True) -> None:
    rec = res.records
    status = rec["status"]
    assert set(status.tolist()) <= {"ok", "rejected", "unfinished"}
    np.testing.assert_array_equal(rec["request_id"], np.arange(len(status)))
    ok = status == "ok"
    arrival, first, finish = rec["arrival_s"], rec["first_token_s"], rec["finish_s"]
    assert (np.diff(arrival) >= 0).all()
    assert (arrival[ok] <= first[ok]).all()
    assert (first[ok] <= finish[ok]).all()
    assert (rec["ttft_ms"][ok] > 0).all()  # every iteration takes time
    assert np.isnan(finish[~ok]).all()
    assert np.isnan(first[status == "rejected"]).all()
    assert (rec["preemptions"] >= 0).all()
    assert (rec["preemptions"][status == "rejected"] == 0).all()
    # time series: KV within capacity, time monotone, iterations do not overlap
    ts = res.timeseries
    kv = raw["kv_cache"]["num_blocks"]
    assert ((ts["kv_blocks"] >= 0) & (ts["kv_blocks"] <= kv)).all()
    assert res.engine["peak_kv_blocks"] <= kv
    start, end = ts["start_s"], ts["end_s"]
    assert (start < end).all()
    assert (np.diff(start) >= 0).all()
    assert (np.diff(end) >= 0).all()
    # one replica: an iteration starts when the previous one ended or later
    assert (start[1:] >= end[:-1]).all()
    assert len(start) == res.engine["iterations"]
    # batch limits
    sched = raw["scheduler"]
    width = sched.get("max_num_seqs", sched.get("max_batch"))
    assert (ts["batch_seqs"] <= width).all()
    if sched["name"] == "continuous":
        assert (ts["prefill_tokens"] + ts["decode_seqs"] <= sched["max_num_batched_tokens"]).all()
    # the summary agrees with the records
    s = res.summary
    assert s["completed"] == int(ok.sum())
    assert s["rejected"] == int((status == "rejected").sum())
    assert s["unfinished"] == int((status == "unfinished").sum())
    assert s["total_output_tokens"] == int(rec["output_tokens"][ok].sum())
    assert s["total_preemptions"] == int(rec["preemptions"].sum())
    assert 0.0 <= s["slo_attainment"] <= 1.0
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in s.values())
    # slowdown: no request is served faster than alone on an idle replica (with CUDA-graph
    # padding a lone decode can cost more than a mixed iteration: not checked there)
    cost = LinearCost(LinearCostConfig(**raw["cost"]), width)
    budget = sched.get("max_num_batched_tokens")
    unloaded = unloaded_service_s(cost, rec["input_tokens"], rec["output_tokens"], budget)
    slowdown = rec["e2el_ms"][ok] / 1000.0 / unloaded[ok]
    if raw["cost"].get("padding", "none") == "none":
        assert (slowdown >= 1.0 - 1e-9).all()
    if ok.any():
        assert s["max_slowdown"] == pytest.approx(float(slowdown.max()), rel=1e-12)
        assert 1.0 / ok.sum() - 1e-12 <= s["fairness_jain_slowdown"] <= 1.0 + 1e-12


# -- invariants ------------------------------------------------------------------------


@given(scenarios())
def test_invariants_determinism_and_fused_equals_unfused(raw):
    fused = run(raw)
    check_common(raw, fused)
    rec = fused.records
    status = rec["status"]
    ok = status == "ok"
    # without until_s every arrival is served or rejected, and nothing vanishes
    assert len(status) == raw["workload"]["num_requests"]
    assert "unfinished" not in status.tolist()
    np.testing.assert_array_equal(ok, served(raw, rec["input_tokens"], rec["output_tokens"]))
    # token conservation: each iteration emits one token per scheduled sequence (no
    # chunking), and tokens generated before a preemption are kept
    assert int(fused.timeseries["batch_seqs"].sum()) == int(rec["output_tokens"][ok].sum())
    # ITL pairs: one gap per token after the first, summing to finish - first token
    values, weights = fused.itl_s
    assert int(weights.sum()) == int((rec["output_tokens"][ok] - 1).sum())
    assert float((values * weights).sum()) == pytest.approx(
        float((rec["finish_s"][ok] - rec["first_token_s"][ok]).sum()), rel=1e-9, abs=1e-12
    )

    # same scenario + seed: byte-identical JSONL and identical everything else
    assert_same_results(run(raw), fused)

    # fused vs unfused decode spans: the same observables (DESIGN §6)
    unfused = run(raw, simulation__fuse_iterations=False)
    check_common(raw, unfused, fused=False)
    assert_same_results(unfused, fused)

    # the time series is optional and changes nothing else
    quiet = run(raw, simulation__timeseries=False)
    assert quiet.timeseries == {}
    assert jsonl(quiet) == jsonl(fused)
    assert quiet.summary == fused.summary


@given(scenarios(until=True))
def test_until_s_leaves_unfinished_and_loses_nobody(raw):
    res = run(raw)
    check_common(raw, res)
    until = raw["simulation"]["until_s"]
    rec = res.records
    assert res.engine["end_s"] == until
    assert (rec["finish_s"][rec["status"] == "ok"] <= until).all()
    assert (res.timeseries["end_s"] <= until).all()
    # every request that arrived by until_s is in the records exactly once
    full = run(raw, simulation__until_s=None)
    arrived = full.records["arrival_s"] <= until
    assert len(rec["status"]) == int(arrived.sum())
    np.testing.assert_array_equal(rec["arrival_s"], full.records["arrival_s"][arrived])
    # what finished by until_s finished identically in the unbounded run
    ok = rec["status"] == "ok"
    np.testing.assert_array_equal(rec["finish_s"][ok], full.records["finish_s"][arrived][ok])
    assert (full.records["status"][arrived][ok] == "ok").all()
    # unfinished requests have no finish, and keep a first token if they got one
    unf = rec["status"] == "unfinished"
    assert np.isnan(rec["finish_s"][unf]).all()
    got_first = ~np.isnan(rec["first_token_s"][unf])
    assert (rec["first_token_s"][unf][got_first] <= until).all()
    # rejected ones are rejected in both runs
    rejected = rec["status"] == "rejected"
    assert (full.records["status"][arrived][rejected] == "rejected").all()


def kv_starved(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "seed": 11,
        "workload": {
            "num_requests": 40,
            "arrival": {"name": "poisson", "rate_per_s": 100.0},
            "input_tokens": {"name": "uniform", "low": 8, "high": 40},
            "output_tokens": {"name": "uniform", "low": 20, "high": 80},
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 512},
        "kv_cache": {"block_size": 4, "num_blocks": 40},
        "cost": {"name": "linear", "base_ms": 5, "per_seq_ms": 0.5},
    }
    for path, value in changes.items():
        set_path(raw, path, value)
    return raw


def test_kv_starved_run_preempts_and_still_completes_everything():
    raw = kv_starved()
    res = run(raw)
    check_common(raw, res)
    rec = res.records
    assert (rec["status"] == "ok").all()
    assert res.summary["total_preemptions"] > 0
    assert (rec["preemptions"] > 0).sum() >= 2
    # preempted requests still produce exactly their output tokens
    assert int(res.timeseries["batch_seqs"].sum()) == int(rec["output_tokens"].sum())
    assert int(res.itl_s[1].sum()) == int((rec["output_tokens"] - 1).sum())
    # a recompute re-prefills the prompt plus the tokens generated so far
    assert int(res.timeseries["prefill_tokens"].sum()) > int(rec["input_tokens"].sum())
    assert res.engine["peak_kv_blocks"] == 40
    unfused = run(raw, simulation__fuse_iterations=False)
    check_common(raw, unfused, fused=False)
    assert_same_results(unfused, res)


def test_static_never_preempts_under_kv_pressure():
    raw = kv_starved(scheduler={"name": "static", "max_batch": 8, "max_wait_ms": 20})
    res = run(raw)
    check_common(raw, res)
    assert (res.records["status"] == "ok").all()
    assert res.summary["total_preemptions"] == 0


def test_seed_changes_the_draws():
    a, b = run(kv_starved()), run(kv_starved(seed=12))
    assert jsonl(a) != jsonl(b)


# -- known bugs ---------------------------------------------------------------------


def test_fused_span_lands_exactly_on_unfused_times():
    raw = {
        "seed": 0,
        "workload": {
            "num_requests": 2,
            "arrival": {"name": "poisson", "rate_per_s": 46.0},
            "input_tokens": {"name": "fixed", "tokens": 3},
            "output_tokens": {"name": "fixed", "tokens": 5},
        },
        "scheduler": {"name": "static", "max_batch": 1},
        "kv_cache": {"block_size": 2, "num_blocks": 4},
        "cost": {
            "name": "linear",
            "base_ms": 10.4375,
            "per_seq_ms": 0.5,
            "per_context_token_ms": 0.001,
        },
    }
    fused = run(raw)
    unfused = run(raw, simulation__fuse_iterations=False)
    ts = fused.timeseries
    assert (ts["start_s"][1:] >= ts["end_s"][:-1]).all()
    assert_same_results(unfused, fused)


def test_fused_equals_unfused_with_until_s():
    raw = kv_starved(
        **{
            "workload.num_requests": 1,
            "workload.input_tokens": {"name": "fixed", "tokens": 10},
            "workload.output_tokens": {"name": "fixed", "tokens": 10},
            "simulation": {"until_s": 0.05},
        }
    )
    fused = run(raw)
    unfused = run(raw, simulation__fuse_iterations=False)
    np.testing.assert_array_equal(unfused.timeseries["end_s"], fused.timeseries["end_s"])
    assert unfused.engine["iterations"] == fused.engine["iterations"]


def test_peak_kv_counts_the_iteration_running_at_the_stop():
    """Found by a differential run: an iteration still running at ``until_s`` holds its
    blocks from its start, so the fused engine's peak must count it as unfused does."""
    raw = {
        "seed": 683,
        "workload": {
            "num_requests": 104,
            "arrival": {"name": "gamma", "rate_per_s": 14.424216012845022, "cv": 2.566018438014001},
            "input_tokens": {"name": "uniform", "low": 1, "high": 64},
            "output_tokens": {"name": "uniform", "low": 1, "high": 200},
        },
        "scheduler": {"name": "static", "max_batch": 21, "max_wait_ms": 0.0},
        "kv_cache": {"block_size": 1, "num_blocks": 200},
        "cost": {
            "name": "linear",
            "base_ms": 15.53970028229193,
            "per_seq_ms": 1.8183586279811004,
            "per_prefill_token_ms": 0.01510622780768155,
            "per_context_token_ms": 0.00026,
            "padding": [1, 2, 4, 8],
        },
        "simulation": {"until_s": 7.653286284178662},
    }
    fused = run(raw)
    unfused = run({**raw, "simulation": {**raw["simulation"], "fuse_iterations": False}})
    assert fused.engine["peak_kv_blocks"] == unfused.engine["peak_kv_blocks"] == 187
    assert_same_results(unfused, fused)


def test_no_fused_run_after_a_preempting_plan():
    """Found by the property test once it drew ``shortest_prompt_first``: a plan that
    preempts admits nothing, so the engine fused the decodes that followed; but the next
    plan admits a short request the preempted one no longer blocks (FCFS keeps the
    victim at the front, where it would not fit, which hid this)."""
    raw = {
        "seed": 0,
        "workload": {
            "num_requests": 10,
            "arrival": {"name": "poisson", "rate_per_s": 3.0},
            "input_tokens": {"name": "uniform", "low": 1, "high": 3},
            "output_tokens": {"name": "fixed", "tokens": 30},
        },
        "scheduler": {
            "name": "continuous",
            "max_num_seqs": 2,
            "max_num_batched_tokens": 32,
            "queue_policy": "shortest_prompt_first",
        },
        "kv_cache": {"block_size": 16, "num_blocks": 3},
        "cost": {"name": "linear", "base_ms": 7.0, "per_seq_ms": 1.7},
    }
    fused = run(raw)
    assert fused.summary["total_preemptions"] > 0
    assert_same_results(run(raw, simulation__fuse_iterations=False), fused)
