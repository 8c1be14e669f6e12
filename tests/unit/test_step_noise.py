"""Step-time noise (cost.jitter with sigma, fitted or given) and the band of a scenario
over noise draws (sessions)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lyra_simpy import ScenarioError, scenario_from_dict, simulate
from lyra_simpy.calibration.fit import fit_profile
from lyra_simpy.calibration.fitfile import calibrate, format_report
from lyra_simpy.calibration.profiles import read_profile, write_profile
from lyra_simpy.cli import main
from lyra_simpy.cost.hostnoise import fitted_sigma
from lyra_simpy.cost.jitter import fit_sigma
from lyra_simpy.errors import LyraError, TraceError
from lyra_simpy.live.band import band, inside
from lyra_simpy.live.compare import METRICS, compare, format_comparison
from lyra_simpy.metrics.io import write_json

DATA = Path(__file__).resolve().parents[1] / "data"


def raw(noise: Any = None, fit: Path = DATA / "synthetic_fit.yaml", n: int = 30) -> dict:
    cost: dict[str, Any] = {"name": "profile", "path": str(fit)}
    if noise is not None:
        cost["jitter"] = noise
    return {
        "name": "noisy",
        "seed": 3,
        "workload": {  # one request at a time, all alike: the same step shapes however timed
            "num_requests": n,
            "arrival": {"name": "closed_loop", "concurrency": 1},
            "input_tokens": {"name": "fixed", "tokens": 64},
            "output_tokens": {"name": "fixed", "tokens": 40},
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 512},
        "kv_cache": {"block_size": 16, "num_blocks": 256},
        "cost": cost,
    }


def durations(res: Any) -> np.ndarray:
    return np.asarray(res.timeseries["end_s"]) - np.asarray(res.timeseries["start_s"])


def test_noise_multiplies_each_step_by_a_lognormal_factor():
    plain = durations(simulate(scenario_from_dict(raw())))
    noisy = durations(simulate(scenario_from_dict(raw({"sigma": 0.1}))))
    assert len(noisy) == len(plain) == 30 * 40
    log_ratio = np.log(noisy / plain)
    assert np.std(log_ratio) == pytest.approx(0.1, rel=0.08)
    assert abs(np.median(log_ratio)) < 0.01  # median factor 1: the model is the typical step
    assert not np.allclose(noisy, plain)


def test_noise_is_deterministic_per_draw_and_off_by_default():
    a = simulate(scenario_from_dict(raw({"sigma": 0.1})))
    b = simulate(scenario_from_dict(raw({"sigma": 0.1, "session": 0})))
    c = simulate(scenario_from_dict(raw({"sigma": 0.1, "session": 1})))
    np.testing.assert_array_equal(durations(a), durations(b))
    assert not np.array_equal(durations(a), durations(c))
    assert a.records["input_tokens"].tolist() == c.records["input_tokens"].tolist()


def profile_with_noise(tmp_path: Path, sigma: float) -> Path:
    rng = np.random.default_rng(4)

    def noisy(ms: float) -> float:
        return ms * float(np.exp(sigma * rng.standard_normal()))

    rows = [
        {"phase": "decode", "batch_size": b, "input_tokens": 0, "context_len": ctx,
         "latency_ms": noisy(5.0 + 0.5 * b + 0.002 * b * ctx)}
        for _ in range(20) for b in (1, 2, 4, 8) for ctx in (64, 256)
    ] + [
        {"phase": "prefill", "batch_size": 1, "input_tokens": n, "context_len": 0,
         "latency_ms": noisy(5.0 + 0.05 * n)}
        for _ in range(20) for n in (16, 64, 256)
    ]  # fmt: skip
    path = tmp_path / "p.csv"
    write_profile(path, rows)
    return path


def test_fitted_sigma_recovers_the_profiles_noise(tmp_path):
    fit = fit_profile(read_profile(profile_with_noise(tmp_path, 0.06)))
    assert fit.noise is not None
    assert fit.noise.sigma == pytest.approx(0.06, rel=0.15)
    assert fit.noise.rows == 220
    # robust: a tenth of the rows 2x slow hardly moves it (a standard deviation would)
    m = np.exp(0.06 * np.random.default_rng(0).standard_normal(200))
    slow = m.copy()
    slow[::10] *= 2.0
    assert fitted_sigma(slow, np.ones(200)) < 1.3 * fitted_sigma(m, np.ones(200))
    assert np.std(np.log(slow)) > 3 * np.std(np.log(m))


def test_noise_fitted_reads_the_fit_file(tmp_path):
    out = tmp_path / "fit.yaml"
    assert main(["calibrate", str(profile_with_noise(tmp_path, 0.06)), "--out", str(out)]) == 0
    sc = scenario_from_dict(raw("fitted", out))
    assert sc.cost.jitter.sigma == "fitted"
    fitted = fit_sigma(sc.cost)
    assert fitted == pytest.approx(0.06, rel=0.15)
    # the run draws exp(fitted z): the same steps as giving that sigma by hand
    by_hand = scenario_from_dict(raw({"sigma": fitted}, out))
    np.testing.assert_array_equal(durations(simulate(sc)), durations(simulate(by_hand)))
    with pytest.raises(ScenarioError, match=r"jitter.sigma: got 'fitted', but the fit"):
        scenario_from_dict(raw("fitted"))  # the old synthetic fit has no noise
    with pytest.raises(ScenarioError, match=r"jitter\.sigma"):
        scenario_from_dict(raw({"sigma": -1}))
    with pytest.raises(ScenarioError, match=r"give one of them"):
        scenario_from_dict(raw({"sigma": 0.1, "cv": 0.1}))
    linear = raw()
    linear["cost"] = {"name": "linear", "base_ms": 5.0, "jitter": "fitted"}
    with pytest.raises(ScenarioError, match=r"the linear cost model has no fit file"):
        scenario_from_dict(linear)


def test_band_widens_with_sigma_and_compare_says_inside(tmp_path, capsys):
    metrics = ("median_tpot_ms", "request_throughput")
    narrow = band(scenario_from_dict(raw({"sigma": 0.02}, n=12)), 4, metrics)
    wide = band(scenario_from_dict(raw({"sigma": 0.2}, n=12)), 4, metrics)
    for m in metrics:
        assert narrow[m]["low"] < narrow[m]["high"]
        assert wide[m]["high"] - wide[m]["low"] > 3 * (narrow[m]["high"] - narrow[m]["low"])
    assert inside(1.0, {"low": 0.5, "high": 1.5}) is True
    assert inside(2.0, {"low": 0.5, "high": 1.5}) is False
    with pytest.raises(LyraError, match=r"cost\.jitter is off"):
        band(scenario_from_dict(raw(n=4)), 3, metrics)

    # compare: a "real" run (another noise draw) against the band
    def run_dir(name: str, scenario_raw: dict) -> Path:
        res = simulate(scenario_from_dict(scenario_raw))
        folder = tmp_path / name
        folder.mkdir()
        write_json(folder / "summary.json", res.summary)
        return folder

    sim = run_dir("sim", raw(n=12))
    real = run_dir("real", raw({"sigma": 0.05, "session": 7}, n=12))
    scen = tmp_path / "s.yaml"
    scen.write_text(json.dumps(raw({"sigma": 0.05}, n=12)))
    assert main(["compare", str(sim), str(real), "--band", str(scen), "--seeds", "5"]) == 0
    text = capsys.readouterr().out
    assert "real inside" in text
    assert "band: min-max of 5 noise draws (covers a further draw 67%)" in text
    # the verdict per metric: inside, outside, or no band
    real_ttft = json.loads((real / "summary.json").read_text())["median_ttft_ms"]
    bands = {m: {"low": None, "high": None} for m in METRICS}
    bands["median_ttft_ms"] = {"low": real_ttft * 0.9, "high": real_ttft * 1.1}
    bands["median_tpot_ms"] = {"low": 1e6, "high": 2e6}
    table = {r["metric"]: r for r in compare(sim, [real], bands=bands)}
    assert table["median_ttft_ms"]["inside"] is True
    assert table["median_tpot_ms"]["inside"] is False
    assert table["p99_itl_ms"]["inside"] is None
    assert "n/a" in format_comparison(list(table.values()))


def synthetic_profile(tmp_path: Path) -> tuple[Path, Any]:
    """The shipped synthetic profile copied to *tmp_path* (so probe files can go beside
    it) and its fit, which has noise but nothing read from probes beside the rows."""
    profile = tmp_path / "p.csv"
    shutil.copy(DATA / "synthetic_profile.csv", profile)
    plain = calibrate(profile)
    assert plain.noise is not None
    return profile, plain


def test_a_profiles_wander_probe_gives_the_fit_its_wander(tmp_path):
    # PROFILE.wander.csv beside the profile: 10 minutes of 4-way decode steps under a
    # drift of sigma 0.07 over 1.5 s; calibrate reads it against the fit's charge
    from lyra_simpy.calibration.fit import predict_ms

    profile, plain = synthetic_profile(tmp_path)
    assert plain.noise.wander is None
    rng = np.random.default_rng(4)
    n, step_s, tau = 20_000, 0.03, 1.5
    a = math.exp(-step_s / tau)
    x = np.empty(n)
    x[0] = 0.07 * rng.standard_normal()
    for i in range(1, n):
        x[i] = x[i - 1] * a + 0.07 * math.sqrt(1 - a * a) * rng.standard_normal()
    context = 64 + np.arange(n) % 500
    rows = [f"decode,4,0,{c},1.0,{(i + 1) * step_s:.3f}" for i, c in enumerate(context)]
    head = "phase,batch_size,input_tokens,context_len,latency_ms,end_s"
    steps_csv = tmp_path / "p.wander.csv"
    steps_csv.write_text("\n".join([head, *rows]) + "\n")
    charged = predict_ms(plain, read_profile(steps_csv))
    times = charged * np.exp(x)
    rows = [f"decode,4,0,{c},{ms:.5f},{(i + 1) * step_s:.3f}"
            for i, (c, ms) in enumerate(zip(context, times, strict=True))]  # fmt: skip
    steps_csv.write_text("\n".join([head, *rows]) + "\n")
    fit = calibrate(profile)
    wander = fit.noise.wander
    assert wander is not None
    assert wander.source == "profile"
    assert wander.sigma == pytest.approx(0.07, rel=0.2)
    assert wander.seconds == pytest.approx(1.5, rel=0.5)
    assert fit.coefficients == plain.coefficients  # the probe is not fitted
    assert "wander probe steps' autocovariance" in format_report(fit)
    # a bad end_s is one line naming it
    steps_csv.write_text(head + "\ndecode,4,0,64,1.0,soon\n")
    with pytest.raises(TraceError, match=r"p.wander.csv: row 2: end_s: got 'soon'"):
        calibrate(profile)


def speed_references(levels: list[float], per: int, scatter: float, seed: int = 5) -> np.ndarray:
    """Lone-step references, *per* a stretch at each of *levels* (the host's factor there),
    each with its own scatter: what a profile's ``PROFILE.speed.csv`` holds in order."""
    rng = np.random.default_rng(seed)
    level = np.repeat(np.asarray(levels), per)
    return 12.0 * level * np.exp(scatter * rng.standard_normal(len(level)))


def test_fitted_session_reads_the_hosts_level_between_stretches():
    from lyra_simpy.cost.hostnoise import SESSION_STRETCHES, fitted_session

    levels = [1.0, 1.05, 0.97, 1.02, 0.94, 1.03]
    assert len(levels) == SESSION_STRETCHES
    truth = float(np.std(np.log(levels), ddof=1))
    cv, stretches = fitted_session(speed_references(levels, 200, 0.04))
    assert stretches == 6
    assert cv == pytest.approx(math.sqrt(math.expm1(truth**2)), rel=0.1)
    # a host at one level: the references' own scatter is taken out of the medians'
    steady = [fitted_session(speed_references([1.0] * 6, 16, 0.05, s))[0] for s in range(20)]
    assert float(np.median(steady)) < 0.006
    # with stretches of 16 noisy references, a 3 % level is still told apart from none
    moving = [fitted_session(speed_references(levels, 16, 0.05, s))[0] for s in range(20)]
    assert float(np.median(moving)) > 0.025
    assert fitted_session(np.full(11, 12.0)) is None  # fewer than two a stretch


def write_speed_csv(path: Path, refs: np.ndarray, rows_per_probe: int = 1) -> None:
    """*refs* as ``PROFILE.speed.csv``: each probe's reference on its rows, 3 rounds."""
    lines = ["round,row,phase,batch_size,input_tokens,context_len,reference_ms,latency_ms"]
    per_round = len(refs) // 3
    for k, ref in enumerate(refs):
        for j in range(rows_per_probe):
            row = (k % per_round) * rows_per_probe + j + 1
            lines.append(f"{k // per_round + 1},{row},decode,1,0,64,{ref:.4f},10.0")
    path.write_text("\n".join(lines) + "\n")


def test_a_profiles_speed_references_give_the_fit_its_session_spread(tmp_path):
    from lyra_simpy.calibration.profiles import read_speed_references

    profile, plain = synthetic_profile(tmp_path)
    assert plain.noise.session is None
    refs = speed_references([1.0, 1.05, 0.97, 1.02, 0.94, 1.03], 20, 0.03)
    # a probe's several rows (a prompt's steps) share its reference: counted once
    write_speed_csv(profile.with_suffix(".speed.csv"), refs, rows_per_probe=2)
    np.testing.assert_allclose(read_speed_references(profile), refs, atol=1e-4)
    fit = calibrate(profile)
    assert fit.noise.session is not None
    assert fit.noise.session.references == 120
    assert fit.noise.session.cv == pytest.approx(0.039, abs=0.01)
    assert fit.coefficients == plain.coefficients  # the references are not fitted
    assert "cost.jitter.session_cv: fitted" in format_report(fit)
    # a run's factor drawn by that CV: the same steps as giving it by hand
    out = tmp_path / "fit.yaml"
    assert main(["calibrate", str(profile), "--out", str(out)]) == 0

    def steps_of(jitter: Any) -> np.ndarray:
        return durations(simulate(scenario_from_dict(raw(jitter, out))))

    by_hand = steps_of({"session_cv": fit.noise.session.cv, "session": 2})
    np.testing.assert_array_equal(steps_of({"session_cv": "fitted", "session": 2}), by_hand)
    # every step of one draw moves by one factor; draws differ by about the CV
    plain_steps = steps_of(None)
    factors = []
    for k in range(12):
        ratio = steps_of({"session_cv": "fitted", "session": k}) / plain_steps
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
        factors.append(ratio[0])
    assert 0.01 < float(np.std(np.log(factors))) < 0.08
    # bad input: one line naming the file, the row and the column
    profile.with_suffix(".speed.csv").write_text(
        "round,row,phase,batch_size,input_tokens,context_len,reference_ms,latency_ms\n"
        "1,1,decode,1,0,64,0,10.0\n"
    )
    bad = r"p.speed.csv: row 2: reference_ms: got '0', must be a positive number \(ms\)$"
    with pytest.raises(TraceError, match=bad):
        calibrate(profile)


def test_session_cv_fitted_needs_a_fit_with_it():
    lacking = r"jitter.session_cv: got 'fitted', but the fit .* has no session spread"
    with pytest.raises(ScenarioError, match=lacking):
        scenario_from_dict(raw({"session_cv": "fitted"}))  # the synthetic fit has none
    linear = raw()
    linear["cost"] = {"name": "linear", "base_ms": 5.0, "jitter": {"session_cv": "fitted"}}
    with pytest.raises(ScenarioError, match=r"jitter.session_cv: got 'fitted', but the linear"):
        scenario_from_dict(linear)
