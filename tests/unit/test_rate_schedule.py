"""Load that changes over time (``workload.rate_schedule``): a time warp of the drawn
arrivals — exact for constant arrivals, the right counts per segment for Poisson,
gamma's burstiness kept, drawn in chunks and cut at the stop like any arrival."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter

from lyra_simpy import scenario_from_dict, simulate
from lyra_simpy.rng import Streams
from lyra_simpy.workload import build_source
from lyra_simpy.workload.arrivals import ArrivalConfig, open_loop_times
from lyra_simpy.workload.rate import RateSchedule, Warp


def schedule(*points: tuple[float, float], shape: str = "step") -> RateSchedule:
    return RateSchedule(shape=shape, points=[{"at_s": a, "factor": f} for a, f in points])


def times(arrival: dict, n=None, duration_s=None, warp=None, seed=7, horizon_s=None, spare=1):
    cfg = TypeAdapter(ArrivalConfig).validate_python(arrival)
    rng = np.random.default_rng(seed)
    return open_loop_times(cfg, rng, n, duration_s, horizon_s, spare, warp)


def test_constant_arrivals_move_exactly_where_the_warp_puts_them():
    # 1 req/s; twice as fast from 4 s to 6 s: Λ⁻¹ is exact in binary here
    warp = schedule((0, 1.0), (4, 2.0), (6, 1.0)).warp()
    got = times({"name": "constant", "rate_per_s": 1.0}, n=12, warp=warp)
    assert got.tolist() == [0, 1, 2, 3, 4, 4.5, 5, 5.5, 6, 7, 8, 9]
    # a factor of 0 stops arrivals: none in [2, 5)
    pause = schedule((0, 1.0), (2, 0.0), (5, 1.0)).warp()
    got = times({"name": "constant", "rate_per_s": 1.0}, n=5, warp=pause)
    assert got.tolist() == [0, 1, 5, 6, 7]
    # a linear ramp 1 → 3 over [0, 4]: Λ(τ) = τ + τ²/4, so the k-th arrival is at
    # τ = 2(√(1 + k) − 1)
    ramp = schedule((0, 1.0), (4, 3.0), shape="linear").warp()
    got = times({"name": "constant", "rate_per_s": 1.0}, n=9, warp=ramp)
    k = np.arange(8)  # Λ(4) = 8: the 9th (k = 8) is past the ramp, at 4 + 0/3
    np.testing.assert_allclose(got[:8], 2 * (np.sqrt(1 + k) - 1), rtol=1e-15, atol=1e-15)
    assert got[8] == 4.0


def test_factor_one_changes_no_time_at_all():
    poisson = {"name": "gamma", "rate_per_s": 3.0, "cv": 2.5}
    plain = times(poisson, n=5000)
    same = times(poisson, n=5000, warp=schedule((0, 1.0)).warp())
    np.testing.assert_array_equal(plain, same)  # bit for bit
    assert Warp.identity().inverse(plain).tolist() == plain.tolist()


def test_poisson_counts_per_segment_follow_the_schedule():
    warp = schedule((0, 1.0), (100, 3.0), (200, 0.5)).warp()
    got = times({"name": "poisson", "rate_per_s": 100.0}, duration_s=300.0, warp=warp)
    counts = np.histogram(got, bins=[0, 100, 200, 300])[0]
    for count, expected in zip(counts, [10_000, 30_000, 5_000], strict=True):
        assert abs(count - expected) < 4 * np.sqrt(expected)  # Poisson: sd = √mean
    assert got.max() < 300.0


def test_a_linear_ramp_has_the_integral_of_its_rate():
    warp = schedule((0, 1.0), (100, 3.0), shape="linear").warp()
    got = times({"name": "poisson", "rate_per_s": 100.0}, duration_s=100.0, warp=warp)
    # ∫₀⁵⁰ (1 + t/50) dt = 75 and ∫₅₀¹⁰⁰ = 125 (× 100 req/s)
    first, second = np.histogram(got, bins=[0, 50, 100])[0]
    assert abs(first - 7_500) < 4 * np.sqrt(7_500)
    assert abs(second - 12_500) < 4 * np.sqrt(12_500)


def test_gamma_keeps_its_burstiness_under_a_factor():
    warp = schedule((0, 4.0)).warp()
    got = times({"name": "gamma", "rate_per_s": 10.0, "cv": 3.0}, n=60_000, warp=warp)
    gaps = np.diff(got)
    assert gaps.mean() == pytest.approx(1 / 40.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_warped_times_are_drawn_in_chunks_and_cut_at_the_stop(monkeypatch):
    from lyra_simpy.workload import arrivals

    warp = schedule((0, 1.0), (20, 5.0)).warp()
    gamma = {"name": "gamma", "rate_per_s": 5.0, "cv": 2.0}
    full = times(gamma, n=5000, warp=warp)
    for chunk in (1, 7, 1 << 20):
        monkeypatch.setattr(arrivals, "CHUNK", chunk)
        np.testing.assert_array_equal(times(gamma, n=5000, warp=warp), full)
        cut = times(gamma, n=5000, warp=warp, horizon_s=30.0, spare=3)
        assert np.count_nonzero(cut > 30.0) == 3
        np.testing.assert_array_equal(cut, full[: len(cut)])
        by_time = times(gamma, duration_s=30.0, warp=warp)
        assert by_time.max() < 30.0
    # about 5 × 20 + 25 × 10 = 350 arrivals before 30 s
    assert 200 < np.count_nonzero(full < 30.0) < 500


def test_a_scenario_schedule_equals_the_same_spike_made_by_a_process(tiny_raw):
    tiny_raw["workload"] = {
        "num_requests": 40,
        "arrival": {"name": "constant", "rate_per_s": 4.0},
        "input_tokens": {"name": "fixed", "tokens": 8},
        "output_tokens": {"name": "fixed", "tokens": 4},
    }
    spiked = dict(tiny_raw, processes={"load_spike": {"at_s": 2, "for_s": 3, "factor": 2}})
    by_process = simulate(scenario_from_dict(spiked)).records["arrival_s"]
    tiny_raw["workload"]["rate_schedule"] = {
        "points": [{"at_s": 0, "factor": 1}, {"at_s": 2, "factor": 2}, {"at_s": 5, "factor": 1}]
    }
    by_schedule = simulate(scenario_from_dict(tiny_raw)).records["arrival_s"]
    np.testing.assert_array_equal(by_process, by_schedule)


def test_a_trace_is_warped_too(make_scenario, tmp_path):
    (tmp_path / "t.csv").write_text(
        "arrival_s,input_tokens,output_tokens\n" + "".join(f"{t},8,4\n" for t in range(8))
    )
    points = [{"at_s": 0, "factor": 1}, {"at_s": 2, "factor": 4}]
    sc = make_scenario(
        {
            "workload.num_requests": None,
            "workload.arrival": {"name": "trace", "path": str(tmp_path / "t.csv"), "format": "csv"},
            "workload.input_tokens": {"name": "trace"},
            "workload.output_tokens": {"name": "trace"},
            "workload.rate_schedule": {"points": points},
        }
    )
    src = build_source(sc.workload, Streams(sc.seed), sc.base_dir)
    assert src.arrival_s.tolist() == [0, 1, 2, 2.25, 2.5, 2.75, 3, 3.25]
