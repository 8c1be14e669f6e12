"""Token-length samplers (workload/lengths.py) and how build_source pairs trace rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter

from lyra_simpy.rng import Streams
from lyra_simpy.workload import WorkloadConfig, build_source
from lyra_simpy.workload.lengths import LengthConfig, LengthContext, sample_lengths


def draw(cfg: dict, n: int, rng: np.random.Generator, **ctx_kw) -> np.ndarray:
    model = TypeAdapter(LengthConfig).validate_python(cfg)

    def no_rows(*_a):
        raise AssertionError("no trace rows expected")

    ctx = LengthContext(rng, Path("."), ctx_kw.pop("rows", no_rows), **ctx_kw)
    out = sample_lengths(model, ctx, n)
    assert out.dtype == np.int64
    assert out.shape == (n,)
    return out


def test_fixed(rng):
    assert (draw({"name": "fixed", "tokens": 37}, 50, rng) == 37).all()


def test_uniform_inclusive_bounds(rng):
    x = draw({"name": "uniform", "low": 3, "high": 6}, 4000, rng)
    assert set(np.unique(x).tolist()) == {3, 4, 5, 6}
    assert x.mean() == pytest.approx(4.5, abs=0.1)


def test_uniform_degenerate(rng):
    assert (draw({"name": "uniform", "low": 9, "high": 9}, 20, rng) == 9).all()


def test_normal_clipped_to_min_max(rng):
    x = draw({"name": "normal", "mean": 100, "std": 80, "min": 50, "max": 120}, 5000, rng)
    assert x.min() == 50
    assert x.max() == 120
    # P(N(100, 80) < 50) ≈ 0.266: about that many draws sit exactly at the floor
    assert (x == 50).mean() == pytest.approx(0.266, abs=0.03)


def test_normal_never_below_one(rng):
    x = draw({"name": "normal", "mean": 2, "std": 10}, 2000, rng)
    assert x.min() == 1


def test_lognormal_mean_matches_configured_mean(rng):
    x = draw({"name": "lognormal", "mean": 200, "sigma": 0.5}, 200_000, rng)
    assert x.mean() == pytest.approx(200, rel=0.01)
    # sigma is the log-space std
    assert np.log(x).std() == pytest.approx(0.5, rel=0.02)


def test_lognormal_clipped(rng):
    x = draw({"name": "lognormal", "mean": 128, "sigma": 0.8, "min": 8, "max": 300}, 20_000, rng)
    assert x.min() == 8
    assert x.max() == 300


def test_mixture_weights(rng):
    cfg = {
        "name": "mixture",
        "components": [
            {"weight": 3, "dist": {"name": "fixed", "tokens": 10}},
            {"weight": 1, "dist": {"name": "uniform", "low": 1000, "high": 2000}},
        ],
    }
    x = draw(cfg, 20_000, rng)
    short = x == 10
    assert short.mean() == pytest.approx(0.75, abs=0.015)
    assert ((x[~short] >= 1000) & (x[~short] <= 2000)).all()


def test_trace_lengths_need_a_trace_arrival(rng):
    with pytest.raises(ValueError, match="needs a 'trace' arrival"):
        draw({"name": "trace"}, 3, rng)


def write_csv_trace(path: Path, rows: list[tuple[float, int, int]]) -> Path:
    path.write_text(
        "arrival_s,input_tokens,output_tokens\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows)
    )
    return path


def workload(raw: dict) -> WorkloadConfig:
    return WorkloadConfig.model_validate(raw)


def test_empirical_input_and_output_use_the_same_rows(tmp_path):
    # output = 10 × input + 1: a draw is paired only if both columns come from one row
    rows = [(0.1 * k, k, 10 * k + 1) for k in range(1, 41)]
    write_csv_trace(tmp_path / "t.csv", rows)
    emp = {"name": "empirical", "path": "t.csv", "format": "csv"}
    cfg = workload(
        {
            "num_requests": 500,
            "arrival": {"name": "poisson", "rate_per_s": 1.0},
            "input_tokens": {**emp, "field": "input"},
            "output_tokens": {**emp, "field": "output"},
        }
    )
    src = build_source(cfg, Streams(3), tmp_path)
    inp, out = src.input_tokens, src.output_tokens
    assert len(inp) == 500
    np.testing.assert_array_equal(out, 10 * inp + 1)
    assert len(np.unique(inp)) > 30  # rows are resampled, not one row repeated


def test_trace_lengths_follow_the_replayed_rows(tmp_path):
    rows = [(0.0, 5, 50), (0.5, 6, 60), (1.0, 7, 70), (2.0, 8, 80), (3.0, 9, 90)]
    write_csv_trace(tmp_path / "t.csv", rows)
    cfg = workload(
        {
            "num_requests": 3,
            "arrival": {"name": "trace", "path": "t.csv", "format": "csv", "skip_rows": 1},
            "input_tokens": {"name": "trace"},
            "output_tokens": {"name": "trace"},
        }
    )
    src = build_source(cfg, Streams(0), tmp_path)
    np.testing.assert_array_equal(src.input_tokens, [6, 7, 8])
    np.testing.assert_array_equal(src.output_tokens, [60, 70, 80])
    np.testing.assert_allclose(src.arrival_s, [0.0, 0.5, 1.5])


def test_trace_replay_duration_cut(tmp_path):
    rows = [(float(t), 5, 5) for t in range(10)]
    write_csv_trace(tmp_path / "t.csv", rows)
    cfg = workload(
        {
            "duration_s": 4.5,
            "arrival": {"name": "trace", "path": "t.csv", "format": "csv"},
            "input_tokens": {"name": "trace"},
            "output_tokens": {"name": "fixed", "tokens": 3},
        }
    )
    src = build_source(cfg, Streams(0), tmp_path)
    np.testing.assert_array_equal(src.arrival_s, [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(src.output_tokens, [3] * 5)


def test_max_total_tokens_scales_long_requests_down():
    cfg = workload(
        {
            "num_requests": 4,
            "arrival": {"name": "constant", "rate_per_s": 1.0},
            "input_tokens": {"name": "fixed", "tokens": 300},
            "output_tokens": {"name": "fixed", "tokens": 100},
            "max_total_tokens": 200,
        }
    )
    src = build_source(cfg, Streams(0), Path("."))
    np.testing.assert_array_equal(src.input_tokens, [150] * 4)
    np.testing.assert_array_equal(src.output_tokens, [50] * 4)


def test_streams_are_independent_per_name():
    a, b = Streams(11), Streams(11)
    b.get("something_else").random(1000)  # drawing from another consumer shifts nothing
    np.testing.assert_array_equal(a.get("arrivals").random(5), b.get("arrivals").random(5))
    assert a.get("arrivals") is a.get("arrivals")
    assert not np.array_equal(
        Streams(11).get("input_tokens").random(5), Streams(11).get("output_tokens").random(5)
    )
    assert not np.array_equal(Streams(1).get("x").random(5), Streams(2).get("x").random(5))
