"""Every arrival accounted for, loudly (issue 13): reject reasons in the records and
the summary, the stderr line and the table, null statistics over nothing, routers and
the disaggregated hand-off that skip replicas which can never serve a request."""

from __future__ import annotations

import json
import typing

import numpy as np
import pytest

from builders import trace_workload
from lyra_simpy import simulate
from lyra_simpy.engine.request import REJECT_REASONS, RejectReason
from lyra_simpy.metrics.summary import refusals_line
from lyra_simpy.output.tables import format_table
from lyra_simpy.output.writer import run_scenario, table_rows


def test_reasons_are_documented_once():
    assert tuple(REJECT_REASONS) == typing.get_args(RejectReason)
    assert all(REJECT_REASONS.values())


def _prompts_over_budget(make_scenario, tmp_path):
    """The issue's case: prompts of 100-900 tokens, a 512-token budget, no chunking."""
    rows = [(0.01 * i, 100 + 40 * i, 4) for i in range(20)]  # 100 ... 860
    return make_scenario(
        {
            **trace_workload(tmp_path, rows),
            "scheduler.max_num_batched_tokens": 512,
            "kv_cache.num_blocks": 4096,
        },
        base_dir=tmp_path,
    )


def test_prompts_over_the_token_budget_are_refused_with_a_reason(make_scenario, tmp_path):
    res = simulate(_prompts_over_budget(make_scenario, tmp_path))
    rec = res.records
    over = rec["input_tokens"] + rec["output_tokens"] - 1 > 512
    assert over.sum() == 9
    assert (rec["status"][over] == "rejected").all()
    assert (rec["reject_reason"][over] == "exceeds_token_budget").all()
    assert (rec["status"][~over] == "ok").all()
    assert all(r is None for r in rec["reject_reason"][~over])
    s = res.summary
    assert s["rejected"] == 9
    assert s["rejected_exceeds_token_budget"] == 9
    assert s["rejected_never_fits_kv"] == 0
    keys = list(s)
    assert keys[keys.index("rejected") + 1 : keys.index("unfinished")] == [
        f"rejected_{name}" for name in REJECT_REASONS
    ]
    rows = list(res.requests())
    assert rows[-1]["reject_reason"] == "exceeds_token_budget"
    assert rows[0]["reject_reason"] is None
    json.dumps(rows, allow_nan=False)


def test_run_prints_refusals_on_stderr_and_in_the_table(make_scenario, tmp_path):
    sc = _prompts_over_budget(make_scenario, tmp_path)
    out: list[str] = []
    err: list[str] = []
    (res,) = run_scenario(sc, None, None, echo=out.append, warn=err.append)
    assert err == ["tiny/base: refused 9 of 20 requests: exceeds_token_budget 9"]
    table = out[1].splitlines()
    assert table[0].split()[-1] == "rejected"
    assert table[2].split()[-1] == "9"
    headers, _ = table_rows(sc, [res])
    assert "rejected" in headers


def test_refusals_line_is_silent_without_refusals():
    summary = {"completed": 3, "rejected": 0, "unfinished": 0}
    assert refusals_line("x", summary) is None
    summary = {"completed": 1, "rejected": 2, "unfinished": 1, "rejected_slo": 2}
    assert refusals_line("x", summary) == (
        "x: refused 2 of 4 requests: slo 2; 1 of 4 unfinished when the run stopped"
    )


def test_empty_statistics_print_as_a_dash():
    text = format_table(["a", "b"], [[None, float("nan")]])
    assert text.splitlines()[2].split() == ["—", "—"]


def test_all_refused_has_null_statistics(make_scenario):
    sc = make_scenario({"kv_cache.num_blocks": 1, "kv_cache.block_size": 1})
    res = simulate(sc)
    s = res.summary
    assert s["completed"] == 0
    assert s["rejected"] == s["rejected_never_fits_kv"] == 12
    assert s["median_ttft_ms"] is None
    assert s["p99_tpot_ms"] is None
    assert s["request_throughput"] is None
    assert s["mean_slowdown"] is None
    json.dumps(s, allow_nan=False)


def test_an_output_that_outgrows_the_pool_is_refused_as_never_fits_kv(make_scenario):
    sc = make_scenario(
        {
            "workload.input_tokens": {"name": "fixed", "tokens": 8},
            "workload.output_tokens": {"name": "fixed", "tokens": 600},
        }
    )
    res = simulate(sc)  # 64 blocks of 8 tokens: 512 < 8 + 600 - 1
    assert set(res.records["reject_reason"].tolist()) == {"never_fits_kv"}


def _two_pools(make_scenario, router: str):
    """Replica 0 has a small KV pool; replica 1 holds every request."""
    return make_scenario(
        {
            "workload.input_tokens": {"name": "fixed", "tokens": 200},
            "workload.output_tokens": {"name": "fixed", "tokens": 4},
            "cluster": {
                "router": {"name": router},
                "groups": [
                    {"count": 1, "kv_cache": {"block_size": 8, "num_blocks": 8}},
                    {"count": 1, "kv_cache": {"block_size": 8, "num_blocks": 64}},
                ],
            },
        }
    )


@pytest.mark.parametrize(
    "router",
    ["round_robin", "random", "least_outstanding", "least_kv", "power_of_two", "cache_aware"],
)
def test_routers_skip_a_replica_that_can_never_serve(make_scenario, router):
    res = simulate(_two_pools(make_scenario, router))
    assert (res.records["status"] == "ok").all()
    assert (res.records["replica"] == 1).all()


def test_a_request_no_replica_can_serve_is_refused(make_scenario):
    sc = _two_pools(make_scenario, "round_robin")
    sc = sc.with_values({"workload.input_tokens": {"name": "fixed", "tokens": 600}})
    res = simulate(sc)
    assert set(res.records["reject_reason"].tolist()) == {"never_fits_kv"}


def _disagg(make_scenario, prefill: dict, decode: dict, **changes):
    return make_scenario(
        {
            "cluster": {
                "disaggregation": {
                    "prefill": {"count": 1, **prefill},
                    "decode": {"count": 2, **decode},
                    "link": {"bandwidth_gb_s": 100, "kv_bytes_per_token": 1000},
                }
            },
            **changes,
        }
    )


def test_a_prefill_replica_holds_only_the_prompt(make_scenario):
    # prompt 40 fits the prefill pool (8 blocks of 8 = 64 tokens); prompt + output
    # (40 + 60 - 1) does not, but it fits the decode pool
    sc = _disagg(
        make_scenario,
        {"kv_cache": {"block_size": 8, "num_blocks": 8}},
        {},
        **{
            "workload.input_tokens": {"name": "fixed", "tokens": 40},
            "workload.output_tokens": {"name": "fixed", "tokens": 60},
        },
    )
    res = simulate(sc)
    assert (res.records["status"] == "ok").all()


def test_decode_choice_checks_schedulability_and_preempted_requests_come_back(make_scenario):
    # the decode replicas (continuous, 24-token budget) hold any prompt's KV, but can
    # recompute a preempted request only if its longest prefill fits the budget: the
    # others are refused at arrival; a tight decode pool forces preemptions, and every
    # admitted request still finishes.
    sc = _disagg(
        make_scenario,
        {},
        {"scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 24},
         "kv_cache": {"block_size": 4, "num_blocks": 12}},
        **{
            "workload.num_requests": 40,
            "workload.arrival": {"name": "poisson", "rate_per_s": 400.0},
            "workload.input_tokens": {"name": "uniform", "low": 4, "high": 20},
            "workload.output_tokens": {"name": "uniform", "low": 2, "high": 16},
        },
    )  # fmt: skip
    res = simulate(sc)
    rec = res.records
    status = rec["status"]
    assert "unfinished" not in status.tolist()
    over = rec["input_tokens"] + rec["output_tokens"] - 1 > 24
    assert over.any()
    assert (rec["reject_reason"][over] == "exceeds_token_budget").all()
    assert (status[~over] == "ok").all()
    assert res.summary["total_preemptions"] > 0


def test_transfer_statistics_over_no_hand_off_are_null(make_scenario):
    sc = _disagg(
        make_scenario,
        {},
        {},
        **{"workload.output_tokens": {"name": "fixed", "tokens": 1}},
    )
    s = simulate(sc).summary
    assert s["completed"] == 12
    assert s["mean_kv_transfer_ms"] is None
    assert np.isfinite(s["mean_ttft_ms"])


def test_validate_warns_when_the_workload_can_draw_requests_never_served(make_scenario):
    from lyra_simpy.refusals import possible_refusals

    sc = make_scenario(
        {
            "workload.input_tokens": {"name": "uniform", "low": 100, "high": 900},
            "scheduler.max_num_batched_tokens": 512,
            "kv_cache.num_blocks": 4096,
        }
    )
    (line,) = possible_refusals(sc)
    assert line == (
        "tiny/base: workload can draw 900 prompt + 24 output tokens, which replica can "
        "never serve (exceeds_token_budget): such requests will be rejected"
    )
    assert possible_refusals(make_scenario()) == []
    # a prefill pool holds only the prompt; the decode pool needs the whole request
    sc = _disagg(
        make_scenario,
        {"kv_cache": {"block_size": 8, "num_blocks": 8}},
        {},
        **{
            "workload.input_tokens": {"name": "fixed", "tokens": 40},
            "workload.output_tokens": {"name": "mixture", "components": [
                {"weight": 1, "dist": {"name": "fixed", "tokens": 60}},
                {"weight": 1, "dist": {"name": "lognormal", "mean": 9, "sigma": 1, "max": 600}},
            ]},
        },
    )  # fmt: skip
    (line,) = possible_refusals(sc)
    assert "cluster.disaggregation.decode can never serve (never_fits_kv)" in line


def test_validate_cli_prints_the_warning_on_stderr(tmp_path, capsys):
    import yaml

    from conftest import TINY
    from lyra_simpy.cli import main

    raw = json.loads(json.dumps(TINY))
    raw["workload"]["output_tokens"] = {"name": "fixed", "tokens": 600}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert "ok (1 run(s))" in captured.out
    assert captured.err.startswith("lyra-simpy: warning: tiny/base: workload can draw 40")
    assert "(never_fits_kv)" in captured.err


def test_figures_draw_runs_that_served_nothing(make_scenario, tmp_path):
    # a variant whose statistics are all null draws as gaps, not a crash
    sc = make_scenario(
        {
            "variants": [
                {"label": "a.ok", "set": {}},
                {"label": "a.none", "set": {"kv_cache.num_blocks": 1}},
            ],
            "figures": [
                {"name": "grouped_bars", "metrics": ["p99_ttft_ms"]},
                {"name": "metrics_vs_param", "param": "kv_cache.num_blocks",
                 "metrics": ["p99_ttft_ms", "request_goodput"]},
                {"name": "pareto", "metrics": ["output_throughput", "p99_tpot_ms"]},
            ],
        }
    )  # fmt: skip
    err: list[str] = []
    results = run_scenario(
        sc, tmp_path / "out", tmp_path / "figs", echo=lambda _s: None, warn=err.append
    )
    assert results[1].summary["p99_ttft_ms"] is None
    assert err == ["tiny/a.none: refused 12 of 12 requests: never_fits_kv 12"]
    assert len(list((tmp_path / "figs").iterdir())) == 3
    summary = json.loads((tmp_path / "out" / "tiny" / "a.none" / "summary.json").read_text())
    assert summary["median_ttft_ms"] is None


# -- the bounds `validate` reads (empirical, trace, mixtures, prefixes) --------------------


def test_validate_bounds_empirical_and_mixture_lengths(make_scenario, tmp_path):
    from lyra_simpy.refusals import max_tokens, possible_refusals

    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,5,3\n1,700,2\n")
    emp = {"name": "empirical", "path": "t.csv", "format": "csv", "field": "input"}
    mix = {
        "name": "mixture",
        "components": [
            {"weight": 1, "dist": emp},
            {"weight": 1, "dist": {"name": "normal", "mean": 9, "std": 1, "max": 50}},
        ],
    }
    sc = make_scenario({"workload.input_tokens": mix}, base_dir=tmp_path)
    assert max_tokens(sc.workload.input_tokens, sc.workload, tmp_path, "input") == 700
    (line,) = possible_refusals(sc)  # 700 > the 512-token pool of TINY
    assert "workload can draw 700 prompt + 24 output tokens" in line
    # an unclipped distribution has no bound: not checked
    unbounded = {"name": "lognormal", "mean": 5000, "sigma": 1}
    assert possible_refusals(make_scenario({"workload.input_tokens": unbounded})) == []


def test_validate_bounds_trace_lengths_by_the_rows_replayed(make_scenario, tmp_path):
    from builders import trace_workload
    from lyra_simpy.refusals import possible_refusals

    changes = trace_workload(tmp_path, [(0.0, 700, 2), (1.0, 10, 2)])
    (line,) = possible_refusals(make_scenario(changes, base_dir=tmp_path))
    assert "workload can draw 700 prompt + 2 output tokens" in line
    changes["workload.arrival"] = {**changes["workload.arrival"], "skip_rows": 1}
    assert possible_refusals(make_scenario(changes, base_dir=tmp_path)) == []


def test_validate_lets_chunked_prefill_take_prompts_beyond_the_budget(make_scenario):
    from lyra_simpy.refusals import possible_refusals

    chunked = {"name": "chunked_prefill", "max_num_seqs": 4, "max_num_batched_tokens": 64}
    sc = make_scenario(
        {"scheduler": chunked, "workload.input_tokens": {"name": "fixed", "tokens": 300}}
    )
    assert possible_refusals(sc) == []
