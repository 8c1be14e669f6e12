"""Admission in the engine: rejected requests never run, deferral is bounded, nothing is
lost, closed loops hear about rejections, and the default asks nothing."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

from lyra_simpy import simulate
from lyra_simpy.cost import LinearCost
from lyra_simpy.engine.request import Request
from lyra_simpy.errors import SimulationError
from lyra_simpy.output import plots
from lyra_simpy.policies import AlwaysAdmission, Limits, SLOAdmission, SLOAdmissionConfig

#: A burst of 40 requests on a 4-slot engine: 10 ms + 2 ms per sequence.
BURST: dict[str, Any] = {
    "workload.num_requests": 40,
    "workload.arrival": {"name": "poisson", "rate_per_s": 200.0},
    "workload.input_tokens": {"name": "uniform", "low": 8, "high": 40},
    "workload.output_tokens": {"name": "uniform", "low": 2, "high": 24},
    "scheduler": {"name": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 256},
    "kv_cache": {"block_size": 8, "num_blocks": 400},
    "cost": {"name": "linear", "base_ms": 10.0, "per_seq_ms": 2.0},
    "slo": {"ttft_ms": 100.0, "tpot_ms": 25.0},
}


def burst(make_scenario, **changes: Any):
    return simulate(make_scenario({**BURST, **changes}))


def decisions(monkeypatch) -> list[tuple[int, float, float, str]]:
    """Record every SLO admission decision: (request, arrival, now, decision)."""
    log: list[tuple[int, float, float, str]] = []
    decide = SLOAdmission.decide

    def spy(self, request, view):
        out = decide(self, request, view)
        log.append((request.index, request.arrival_s, view.now_s, out))
        return out

    monkeypatch.setattr(SLOAdmission, "decide", spy)
    return log


def test_rejected_requests_never_run(make_scenario):
    res = burst(make_scenario, admission={"name": "slo"})
    rec = res.records
    status = rec["status"]
    rejected = status == "rejected"
    assert rejected.sum() > 5
    assert res.summary["rejected"] == int(rejected.sum())
    assert res.summary["rejection_rate"] == pytest.approx(rejected.mean())
    # no first token, no finish, no preemption (never held KV), no token in any iteration
    assert np.isnan(rec["first_token_s"][rejected]).all()
    assert np.isnan(rec["finish_s"][rejected]).all()
    assert (rec["preemptions"][rejected] == 0).all()
    ok = status == "ok"
    assert int(res.timeseries["batch_seqs"].sum()) == int(rec["output_tokens"][ok].sum())
    # conservation: every arrival ends ok or rejected (no stop time)
    assert ok.sum() + rejected.sum() == 40
    # admitted requests were predicted within the SLO, and meet it
    assert (rec["ttft_ms"][ok] <= 100.0).all()
    assert res.summary["slo_attainment"] == pytest.approx(ok.mean())


def test_tpot_admission_caps_the_decode_batch(make_scenario):
    # 10 + 2 x rows ms per decode; TPOT 20 ms with no slack: at most 5 rows decode
    res = burst(
        make_scenario,
        slo={"tpot_ms": 20.0},
        admission={"name": "slo", "tpot_slack": 0.0},
    )
    assert res.timeseries["decode_seqs"].max() == 5
    assert res.summary["rejected"] > 0
    unbounded = burst(make_scenario, slo={"tpot_ms": 20.0})
    assert unbounded.timeseries["decode_seqs"].max() == 8


def test_deferral_is_bounded_and_counts_in_ttft(make_scenario, monkeypatch):
    log = decisions(monkeypatch)
    bound_ms = 30.0
    res = burst(
        make_scenario,
        slo={"tpot_ms": 20.0},
        admission={"name": "slo", "mode": "defer", "tpot_slack": 0.0, "max_defer_ms": bound_ms},
    )
    rec = res.records
    by_request: dict[int, list[tuple[float, float, str]]] = {}
    for i, arrival, now, out in log:
        by_request.setdefault(i, []).append((arrival, now, out))
    deferred = [i for i, d in by_request.items() if d[0][2] == "defer"]
    assert deferred
    longest_iteration_s = float((res.timeseries["end_s"] - res.timeseries["start_s"]).max())
    admitted_late = 0
    for i in deferred:
        d = by_request[i]
        # deferred, deferred, ..., then one final decision; asked at every iteration
        assert all(out == "defer" for _, _, out in d[:-1])
        final = d[-1][2]
        assert final in ("admit", "reject", "timeout")
        assert rec["status"][i] == ("ok" if final == "admit" else "rejected")
        reason = {"admit": None, "reject": "slo", "timeout": "slo_defer_timeout"}[final]
        assert rec["reject_reason"][i] == reason
        arrival, last = d[0][0], d[-1][1]
        assert last - arrival <= bound_ms / 1000.0 + longest_iteration_s
        gaps = np.diff([now for _, now, _ in d])
        assert (gaps <= longest_iteration_s + 1e-12).all()
        if final == "admit":
            admitted_late += 1
            # the TTFT counts the deferral: the first token comes after the admission
            assert rec["first_token_s"][i] > last
            assert rec["ttft_ms"][i] > (last - arrival) * 1000.0
    assert admitted_late > 0
    # deferral trades rejections for waiting: fewer rejected than with mode reject
    rejecting = burst(
        make_scenario, slo={"tpot_ms": 20.0}, admission={"name": "slo", "tpot_slack": 0.0}
    )
    assert res.summary["rejected"] < rejecting.summary["rejected"]
    assert res.timeseries["decode_seqs"].max() <= 5


def test_deferred_requests_left_at_the_stop_are_unfinished(make_scenario):
    res = burst(
        make_scenario,
        slo={"tpot_ms": 20.0},
        admission={"name": "slo", "mode": "defer", "tpot_slack": 0.0, "max_defer_ms": 1e6},
        simulation={"until_s": 0.15},
    )
    status = res.records["status"].tolist()
    assert "unfinished" in status
    assert len(status) == int((res.records["arrival_s"] <= 0.15).sum())


def test_closed_loop_clients_hear_about_rejections(make_scenario):
    res = burst(
        make_scenario,
        **{
            "workload.arrival": {"name": "closed_loop", "concurrency": 12, "think_time_s": 0.0},
            "admission": {"name": "slo"},
            "slo": {"ttft_ms": 40.0},
        },
    )
    status = res.records["status"]
    assert len(status) == 40  # every client request was sent: rejections end requests too
    assert (status == "rejected").sum() > 0
    assert set(status.tolist()) == {"ok", "rejected"}


def test_fused_equals_unfused_with_admission(make_scenario):
    for admission in ({"name": "slo"}, {"name": "slo", "mode": "defer", "tpot_slack": 0.0}):
        fused = burst(make_scenario, admission=admission)
        plain = burst(make_scenario, admission=admission, simulation={"fuse_iterations": False})
        assert fused.summary == plain.summary
        np.testing.assert_array_equal(fused.records["finish_s"], plain.records["finish_s"])


def test_the_default_is_never_asked(make_scenario, monkeypatch):
    def fail(self, request, view):
        raise AssertionError("asked")

    monkeypatch.setattr(AlwaysAdmission, "decide", fail)
    res = burst(make_scenario)
    assert res.scenario.admission.name == "always"
    assert res.summary["rejected"] == 0


@pytest.mark.parametrize(
    ("answer", "message"),
    [("maybe", "admission returned 'maybe'"), ("defer", "deferred requests on an idle")],
)
def test_a_broken_admission_policy_is_caught(make_scenario, monkeypatch, answer, message):
    monkeypatch.setattr(SLOAdmission, "decide", lambda self, request, view: answer)
    with pytest.raises(SimulationError, match=message):
        burst(make_scenario, admission={"name": "slo"})


def test_panels_vs_param_draws_one_line_per_series():
    panels = {
        "request_goodput": {"always": ([1, 2], [1.0, 0.1]), "slo": ([1, 2], [1.0, 0.9])},
        "rejection_rate": {"always": ([1, 2], [0.0, 0.0]), "slo": ([1, 2], [0.0, 0.5])},
    }
    fig = plots.panels_vs_param(panels, "rate_per_s", title="overload", log_x=True)
    axes = fig.get_axes()
    assert [len(ax.get_lines()) for ax in axes] == [2, 2]
    assert axes[0].get_xlabel() == "offered load (req/s)"
    assert axes[1].get_ylabel() == "rejected (fraction of arrivals)"
    plots.save(fig, io.BytesIO())


def test_slo_admission_with_chunked_prefill_admits_prompts_longer_than_the_budget(
    make_scenario,
):
    # issue 13: 1000-2000-token prompts, a 512-token budget, a 10 s TTFT SLO; the replay
    # treated the budget as a whole-prompt limit and rejected all 20
    changes = {
        "workload.num_requests": 20,
        "workload.input_tokens": {"name": "uniform", "low": 1000, "high": 2000},
        "workload.arrival": {"name": "poisson", "rate_per_s": 2.0},
        "scheduler": {"name": "chunked_prefill", "max_num_seqs": 8, "max_num_batched_tokens": 512},
        "kv_cache.num_blocks": 4096,
        "slo": {"ttft_ms": 10000.0},
        "cost": {"name": "linear", "base_ms": 5.0, "per_seq_ms": 1.0, "per_prefill_token_ms": 0.02},
    }
    always = simulate(make_scenario(changes))
    slo = simulate(make_scenario({**changes, "admission": {"name": "slo"}}))
    assert always.summary["completed"] == 20
    assert slo.summary["completed"] == 20
    assert slo.records["ttft_ms"].tolist() == always.records["ttft_ms"].tolist()


def test_chunked_prediction_is_exact_for_a_request_alone(make_scenario):
    sc = make_scenario(
        {
            "workload.num_requests": 1,
            "workload.input_tokens": {"name": "fixed", "tokens": 1300},
            "scheduler": {"name": "chunked_prefill", "max_num_seqs": 4,
                          "max_num_batched_tokens": 512, "long_prefill_token_threshold": 300},
            "kv_cache.num_blocks": 4096,
            "cost": {"name": "linear", "base_ms": 5.0, "per_seq_ms": 1.0,
                     "per_prefill_token_ms": 0.02},
        }
    )  # fmt: skip
    res = simulate(sc)
    cost = LinearCost(sc.cost, 4)
    policy = SLOAdmission(SLOAdmissionConfig(), cost, Limits(1000.0, None, 4, 512, None, 300))
    ttft_s, _ = policy.predict(Request(0, 0, 0.0, 1300, 10), [], [])
    assert ttft_s * 1000.0 == pytest.approx(res.records["ttft_ms"][0])
