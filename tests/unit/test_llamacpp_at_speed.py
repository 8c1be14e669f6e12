"""validation/llamacpp_at_speed.py: Table 1 at the host's speed during each load, an
attribution of the matrix's misses (every step cost times the load's real ÷ charged
decode step)."""

from __future__ import annotations

import pytest
import yaml

from builders import trace_workload, validation_module
from lyra_simpy.calibration.fit import fit_profile
from lyra_simpy.calibration.fitfile import write_fit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.simulation import simulate

AT_SPEED = validation_module("llamacpp_at_speed")


def _fit_file(tmp_path):
    """A fit with every kind of step cost: terms, decode residuals per batch, a wake."""
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms"]
    rows += [f"prefill,1,{n},0,{5 + 0.5 * n}" for n in (16, 64, 256)]
    rows += [f"decode,{b},0,{c},{10 + 3 * b + (4 if b == 2 else 0)}"
             for b in (1, 2, 4) for c in (64, 256)]  # fmt: skip
    path = tmp_path / "p.csv"
    path.write_text("\n".join(rows) + "\n")
    path.with_suffix(".wake.csv").write_text("gap_s,latency_ms\n0,13\n0,13.2\n0.3,27\n0.3,27.2\n")
    out = tmp_path / "fit.yaml"
    write_fit(fit_profile(read_profile(path)), out)
    return out


def _scenario(tmp_path, make_scenario, fit, path_ms: float):
    # every request at 0: the timeline is then only the step costs, so doubling every
    # cost doubles every time exactly
    rows = [(0.0, 40, 12), (0.0, 200, 5), (0.0, 16, 30), (0.0, 90, 9), (0.0, 60, 20)]
    changes = {
        **trace_workload(tmp_path, rows),
        "engine": {"name": "llamacpp", "command": "llama-server -np 4 -c 4096 -t 2"},
        "scheduler": {"name": "llamacpp", "cache_prompt": False},
        "kv_cache": {},
        "cost": {"name": "profile", "path": str(fit), "decode_table": True, "wake": "fitted"},
        "workload.request_path_ms": path_ms,
        "workload.request_path_cpu_share": 1.0,
    }
    return make_scenario(changes, base_dir=tmp_path)


def test_every_step_cost_scales_so_the_whole_run_does(tmp_path, make_scenario):
    fit_path = _fit_file(tmp_path)
    fit = yaml.safe_load(fit_path.read_text())
    assert fit["decode_batch_residual_ms"]  # each kind of step cost is there
    assert fit["wake"]["ms"] > 0
    doubled = tmp_path / "fit_x2.yaml"
    doubled.write_text(yaml.safe_dump(AT_SPEED.at_speed_fit(fit, 2.0)))
    base = _scenario(tmp_path, make_scenario, fit_path, 5.0)
    raw = {"cost": {"path": str(fit_path)}, "workload": {"request_path_ms": 5.0}}
    moved = AT_SPEED.at_speed_scenario(raw, doubled, 2.0)
    assert moved == {"cost": {"path": str(doubled)}, "workload": {"request_path_ms": 10.0}}
    scaled = _scenario(tmp_path, make_scenario, doubled, 10.0)
    plain, fast = simulate(base).records, simulate(scaled).records
    for column in ("first_token_s", "finish_s"):
        assert list(fast[column]) == pytest.approx([2 * t for t in plain[column]], rel=1e-12)
    assert fit["coefficients"]["fixed_ms"] > 0  # (the input is left as it was)
    assert yaml.safe_load(fit_path.read_text()) == fit


def test_a_ratio_that_is_not_a_speed_is_refused():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"ratio: got .*, must be a positive number"):
            AT_SPEED.at_speed_fit({"coefficients": {}}, bad)


def _table(errors: dict[str, tuple[float, float]]) -> list[dict]:
    return [{"metric": m, "error": e, "spread": s} for m, (e, s) in errors.items()]


def test_cells_and_report_count_as_the_matrix_does():
    table = _table({
        "output_throughput": (0.04, 0.0),  # in: within 5 %
        "median_ttft_ms": (-0.15, 0.2),  # in: within the spread (wider than 10 %)
        "median_tpot_ms": (0.12, 0.05),  # out
        "median_e2el_ms": (-0.08, 0.01),  # in: within 10 %
        "p90_ttft_ms": (0.03, 0.02),  # out: a p90 only within the spread
        "p90_tpot_ms": (-0.02, 0.02),  # in
        "p90_e2el_ms": (0.0, 0.0),  # in
        "p99_tpot_ms": (0.5, 0.0),  # not one of the matrix's cells
    })  # fmt: skip
    got = AT_SPEED.cells(table)
    assert got == {"in_target": 5, "missed": ["median_tpot_ms", "p90_ttft_ms"],
                   "p50_errors": [0.15, 0.12, 0.08]}  # fmt: skip
    loads = {"poisson_0.3": {"ratio": 1.08, "table1": got, "at_speed": {**got, "in_target": 7}},
             "closed_4": {"ratio": 0.95, "table1": got, "at_speed": got}}  # fmt: skip
    lines = AT_SPEED.report({"default/short": loads})
    assert lines[2] == "| default/short | 1.08, 0.95 | 10 / 14 | 12 % | 12 / 14 | 12 % |"
    assert lines[3] == "| all | | 10 / 14 | | 12 / 14 | |"


def test_the_speeds_a_load_is_priced_at():
    machine = [{"step_before": 14.0}, {"step_before": 13.0}, {"step_before": 15.0}]
    res = {"gate": {"run_ref_ms": 12.5},
           "loads": {"closed_4": {"machine": machine, "steps_vs_charge": {
               "decode": {"median": 1.18, "mean": 1.23}}}}}  # fmt: skip
    assert AT_SPEED.runs_ratio(res, "closed_4") == 1.18
    assert AT_SPEED.runs_mean_ratio(res, "closed_4") == 1.23  # (--ratio mean: the skew)
    assert set(AT_SPEED.RATIOS) == set(AT_SPEED.HEADS) == {"runs", "mean", "gate", "batch"}
    assert AT_SPEED.gate_ratio(res, "closed_4") == pytest.approx(14.0 / 12.5)
    res["gate"] = {}  # a profile taken without --speed-reference: no step to hold the runs to
    with pytest.raises(
        SystemExit, match="closed_4 has no speed reference or gate probes for --ratio gate"
    ):
        AT_SPEED.gate_ratio(res, "closed_4")
    # --batch-before: the full batch's step right before each run over the profile's row
    with pytest.raises(
        SystemExit, match="closed_4 has no full-batch step before its runs for --ratio batch"
    ):
        AT_SPEED.batch_ratio(res, "closed_4")
    res["gate"] = {"batch_row_ms": 40.0}
    for m, b in zip(machine, (44.0, 42.0, None), strict=True):
        m["batch_before"] = b  # (a check that answered nothing is left out)
    assert AT_SPEED.batch_ratio(res, "closed_4") == pytest.approx(43.0 / 40.0)
