"""Open-loop arrival processes and trace readers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter

from lyra_simpy.errors import ScenarioError, TraceError
from lyra_simpy.workload.arrivals import ArrivalConfig, open_loop_times, trace_times
from lyra_simpy.workload.traces import read_trace


def times(cfg: dict, rng, n=None, duration_s=None) -> np.ndarray:
    model = TypeAdapter(ArrivalConfig).validate_python(cfg)
    return open_loop_times(model, rng, n, duration_s)


def test_poisson_mean_gap_and_first_arrival_at_zero(rng):
    t = times({"name": "poisson", "rate_per_s": 5.0}, rng, n=40_000)
    assert len(t) == 40_000
    assert t[0] == 0.0
    gaps = np.diff(t)
    assert (gaps >= 0).all()
    assert gaps.mean() == pytest.approx(0.2, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)  # exponential: CV 1


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_rate_and_cv(rng, cv):
    t = times({"name": "gamma", "rate_per_s": 10.0, "cv": cv}, rng, n=60_000)
    assert t[0] == 0.0
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_constant_spacing_is_exact(rng):
    t = times({"name": "constant", "rate_per_s": 4.0}, rng, n=9)
    np.testing.assert_array_equal(t, np.arange(9) / 4.0)


@pytest.mark.parametrize(("duration_s", "count"), [(3.0, 6), (3.2, 7), (0.1, 1)])
def test_constant_duration_truncation(rng, duration_s, count):
    t = times({"name": "constant", "rate_per_s": 2.0}, rng, duration_s=duration_s)
    np.testing.assert_array_equal(t, np.arange(count) / 2.0)


def test_poisson_duration_truncation(rng):
    t = times({"name": "poisson", "rate_per_s": 50.0}, rng, duration_s=200.0)
    assert t[0] == 0.0
    assert t.max() < 200.0
    assert (np.diff(t) >= 0).all()
    # 10 000 expected; ± 4 standard deviations (100)
    assert abs(len(t) - 10_000) < 400


def test_num_requests_and_duration_whichever_first(rng):
    t = times({"name": "constant", "rate_per_s": 1.0}, rng, n=100, duration_s=10.0)
    assert len(t) == 10
    t = times({"name": "constant", "rate_per_s": 1.0}, rng, n=5, duration_s=10.0)
    assert len(t) == 5
    t = times({"name": "poisson", "rate_per_s": 1.0}, rng, n=3, duration_s=1e6)
    assert len(t) == 3


def test_trace_times_rescaled_to_rate():
    cfg = TypeAdapter(ArrivalConfig).validate_python(
        {"name": "trace", "path": "x", "rate_per_s": 4.0}
    )
    t = trace_times(cfg, np.array([10.0, 11.0, 13.0, 20.0]))
    # 3 gaps over 10 s (0.3/s) rescaled to 4/s: last arrival at 3 / 4 = 0.75 s
    np.testing.assert_allclose(t, [0.0, 0.075, 0.225, 0.75])
    cfg = TypeAdapter(ArrivalConfig).validate_python({"name": "trace", "path": "x", "skip_rows": 2})
    np.testing.assert_allclose(trace_times(cfg, np.array([10.0, 11.0, 13.0, 20.0])), [0.0, 7.0])


def test_trace_rate_is_the_replayed_windows():
    cfg = TypeAdapter(ArrivalConfig).validate_python(
        {"name": "trace", "path": "x", "rate_per_s": 4.0, "skip_rows": 1}
    )
    # rows 1..3 (11, 13, 20) are replayed: 2 gaps over 2 s -> rescaled to 2 / 4 = 0.5 s;
    # the later, sparser rows (100) do not dilute the rate of the window
    t = trace_times(cfg, np.array([10.0, 11.0, 12.0, 13.0, 100.0]), n=3)
    np.testing.assert_allclose(t, [0.0, 0.25, 0.5])


def test_trace_window_replays_at_the_target_rate(tmp_path):
    from lyra_simpy import scenario_from_dict, simulate

    rows = "\n".join(f"{t},10,2" for t in [0, 1, 2, 3, 4, 50, 51, 52, 53, 1000])
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + rows + "\n")
    raw = {
        "workload": {
            "num_requests": 4,
            "arrival": {
                "name": "trace", "path": "t.csv", "format": "csv",
                "rate_per_s": 2.0, "skip_rows": 5,
            },
            "input_tokens": {"name": "trace"},
            "output_tokens": {"name": "trace"},
        },
        "kv_cache": {"block_size": 16, "num_blocks": 100},
        "cost": {"name": "linear", "base_ms": 1.0},
    }  # fmt: skip
    rec = simulate(scenario_from_dict(raw, base_dir=tmp_path)).records
    # rows 50..53: 3 gaps at 2/s
    np.testing.assert_allclose(rec["arrival_s"], [0.0, 0.5, 1.0, 1.5])


# -- trace readers --------------------------------------------------------------------


def test_azure_reader(tmp_path):
    p = tmp_path / "azure.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:16:46,1000,1\n"
    )
    tr = read_trace(p, "azure")
    assert len(tr) == 3
    np.testing.assert_allclose(tr.arrival_s, [0.0, 4.314579, 59.31941], atol=1e-6)
    np.testing.assert_array_equal(tr.input_tokens, [374, 396, 1000])
    np.testing.assert_array_equal(tr.output_tokens, [44, 109, 1])


def test_mooncake_reader_ms_timestamps(tmp_path):
    p = tmp_path / "mc.jsonl"
    rows = [
        {"timestamp": 1000, "input_length": 10, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 3000, "input_length": 30, "output_length": 3, "hash_ids": [1, 2]},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    tr = read_trace(p, "mooncake")
    np.testing.assert_allclose(tr.arrival_s, [0.0, 2.0])
    np.testing.assert_array_equal(tr.input_tokens, [10, 30])
    np.testing.assert_array_equal(tr.output_tokens, [1, 3])
    assert tr.hash_ids == ((1,), (1, 2))


def test_csv_and_burstgpt_readers(tmp_path):
    p = tmp_path / "plain.csv"
    p.write_text("arrival_s,input_tokens,output_tokens,extra\n5.5,10,2,x\n6.0,20.0,4,y\n")
    tr = read_trace(p, "csv")
    np.testing.assert_allclose(tr.arrival_s, [0.0, 0.5])
    np.testing.assert_array_equal(tr.input_tokens, [10, 20])
    q = tmp_path / "burst.csv"
    q.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,GPT-4,1087,0,1087,Conversation log\n"
        "47,ChatGPT,200,30,230,API log\n"
    )
    tr = read_trace(q, "burstgpt")
    np.testing.assert_allclose(tr.arrival_s, [0.0, 42.0])
    np.testing.assert_array_equal(tr.output_tokens, [18, 30])


def test_missing_trace_file_says_where_to_download(tmp_path):
    with pytest.raises(TraceError) as info:
        read_trace(tmp_path / "AzureLLMInferenceTrace_conv.csv", "azure")
    msg = str(info.value)
    assert "not found" in msg
    assert "github.com/Azure/AzurePublicDataset" in msg
    assert "\n" not in msg
    with pytest.raises(TraceError, match=r"github\.com/kvcache-ai/Mooncake"):
        read_trace(tmp_path / "x.jsonl", "mooncake")


def test_wrong_columns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(TraceError, match=r"not a csv trace, missing columns \['arrival_s'"):
        read_trace(p, "csv")


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("mooncake", '{"timestamp": 1, "input_length": 2}\n'),
        ("mooncake", "{not json\n"),
    ],
)
def test_malformed_trace(tmp_path, fmt, text):
    p = tmp_path / "t.txt"
    p.write_text(text)
    with pytest.raises(TraceError, match=f"malformed {fmt} trace"):
        read_trace(p, fmt)


def test_trace_without_usable_rows(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n")
    with pytest.raises(TraceError, match="no usable rows"):
        read_trace(p, "csv")


def test_trace_reread_after_change(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n1,2,3\n")
    assert read_trace(p, "csv").input_tokens.tolist() == [2]
    p.write_text("arrival_s,input_tokens,output_tokens\n1,5,3\n2,6,3\n")
    import os

    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert read_trace(p, "csv").input_tokens.tolist() == [5, 6]


def test_missing_trace_fails_at_validation_naming_the_field(make_scenario, tmp_path):
    with pytest.raises(ScenarioError) as info:
        make_scenario(
            {"workload.arrival": {"name": "trace", "path": "nope.csv", "format": "csv"}},
            base_dir=Path(tmp_path),
        )
    msg = str(info.value)
    assert msg.startswith("workload.arrival.path: trace file not found")
    assert "nope.csv" in msg
    assert "\n" not in msg


def test_missing_empirical_trace_inside_a_mixture(make_scenario, tmp_path):
    emp = {"name": "empirical", "path": "gone.csv", "format": "azure", "field": "output"}
    mix = {
        "name": "mixture",
        "components": [
            {"weight": 1, "dist": {"name": "fixed", "tokens": 3}},
            {"weight": 1, "dist": emp},
        ],
    }
    with pytest.raises(ScenarioError) as info:
        make_scenario({"workload.output_tokens": mix}, base_dir=Path(tmp_path))
    msg = str(info.value)
    assert msg.startswith("workload.output_tokens.components[1].dist.path: trace file not found")
    assert "github.com/Azure/AzurePublicDataset" in msg


def test_skip_rows_beyond_the_trace(make_scenario, tmp_path):
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,1,1\n1,1,1\n")
    arrival = {"name": "trace", "path": "t.csv", "format": "csv", "skip_rows": 2}
    with pytest.raises(ScenarioError, match=r"^workload.arrival.skip_rows: got 2, must be < "):
        make_scenario({"workload.arrival": arrival}, base_dir=Path(tmp_path))


@pytest.mark.parametrize("model", [{"name": "poisson"}, {"name": "gamma", "cv": 4.0}])
def test_exact_rate_stretches_the_draws_to_the_rate(model, rng):
    cfg = {**model, "rate_per_s": 4.0}
    drawn = times(cfg, np.random.default_rng(5), n=500)
    exact = times({**cfg, "exact_rate": True}, np.random.default_rng(5), n=500)
    assert exact[-1] == pytest.approx(499 / 4.0)
    # the same gaps, scaled: burstiness kept
    np.testing.assert_allclose(exact, drawn * (exact[-1] / drawn[-1]))


def test_exact_rate_needs_num_requests(make_scenario):
    arrival = {"name": "gamma", "rate_per_s": 4.0, "cv": 2.0, "exact_rate": True}
    with pytest.raises(ScenarioError, match="exact_rate needs num_requests"):
        make_scenario(
            {"workload.arrival": arrival, "workload.num_requests": None, "workload.duration_s": 5}
        )


# Bounded memory (issue 13): times drawn in chunks, and only up to the run's stop.


def _one_draw(cfg, rng, n, duration_s):
    """The reference: every gap drawn at once (how the times were first drawn)."""
    if n is not None:
        gaps = rng.exponential(1 / cfg.rate_per_s, n - 1) if cfg.name == "poisson" else None
        if gaps is None:
            shape = 1.0 / cfg.cv**2
            gaps = rng.gamma(shape, 1.0 / (cfg.rate_per_s * shape), n - 1)
        times = np.concatenate(([0.0], np.cumsum(gaps)))
        if cfg.exact_rate and n > 1:
            times = times * ((n - 1) / times[-1] / cfg.rate_per_s)
    else:
        block = max(64, int(duration_s * cfg.rate_per_s * 1.2))
        chunks, last = [np.zeros(1)], 0.0
        while last < duration_s:
            steps = last + np.cumsum(rng.exponential(1 / cfg.rate_per_s, block))
            chunks.append(steps)
            last = float(steps[-1])
        times = np.concatenate(chunks)
    return times if duration_s is None else times[times < duration_s]


@pytest.mark.parametrize(
    ("arrival", "n", "duration_s"),
    [
        ({"name": "poisson", "rate_per_s": 3.0}, 1000, None),
        ({"name": "poisson", "rate_per_s": 3.0}, None, 40.0),
        ({"name": "poisson", "rate_per_s": 3.0}, 1000, 40.0),
        ({"name": "gamma", "rate_per_s": 2.0, "cv": 4.0}, 1000, None),
        ({"name": "gamma", "rate_per_s": 2.0, "cv": 0.5, "exact_rate": True}, 1000, None),
        ({"name": "poisson", "rate_per_s": 3.0, "exact_rate": True}, 2, None),
    ],
)
def test_chunked_times_equal_one_draw(monkeypatch, arrival, n, duration_s):
    from lyra_simpy.workload import arrivals

    cfg = TypeAdapter(ArrivalConfig).validate_python(arrival)
    want = _one_draw(cfg, np.random.default_rng(7), n, duration_s)
    for chunk in (1, 7, 1 << 20):
        monkeypatch.setattr(arrivals, "CHUNK", chunk)
        got = open_loop_times(cfg, np.random.default_rng(7), n, duration_s)
        np.testing.assert_array_equal(got, want)  # value for value, not approximately


@pytest.mark.parametrize("spare", [1, 5])
def test_horizon_keeps_the_times_up_to_it_and_spare_after(monkeypatch, spare):
    from lyra_simpy.workload import arrivals

    monkeypatch.setattr(arrivals, "CHUNK", 16)
    cfg = TypeAdapter(ArrivalConfig).validate_python(
        {"name": "gamma", "rate_per_s": 5.0, "cv": 2.0}
    )
    full = open_loop_times(cfg, np.random.default_rng(3), 5000, None)
    got = open_loop_times(cfg, np.random.default_rng(3), 5000, None, 10.0, spare)
    assert np.count_nonzero(got > 10.0) == spare
    np.testing.assert_array_equal(got, full[: len(got)])
    assert np.count_nonzero(full <= 10.0) == len(got) - spare


def test_huge_num_requests_cut_by_until_draws_only_what_arrives(make_scenario):
    """num_requests: 300000000 with until_s: 0.01 drew every arrival up front and died
    of memory; now only the requests before the stop (and the next one) are drawn."""
    from lyra_simpy import simulate
    from lyra_simpy.rng import Streams
    from lyra_simpy.workload import build_source

    sc = make_scenario({"workload.num_requests": 300_000_000, "simulation.until_s": 0.01})
    src = build_source(sc.workload, Streams(sc.seed), sc.base_dir, 16, 0.01)
    assert len(src.input_tokens) < 10
    res = simulate(sc)
    assert len(res.records["request_id"]) >= 1


def test_horizon_draws_are_the_full_draws_first_requests(make_scenario):
    """Cutting at the stop changes no number the run reports."""
    from lyra_simpy.rng import Streams
    from lyra_simpy.workload import build_source

    dist = {"name": "lognormal", "mean": 50, "sigma": 1, "max": 400}
    sc = make_scenario({"workload.num_requests": 3000, "workload.input_tokens": dist})
    full = build_source(sc.workload, Streams(1), sc.base_dir, 16)
    cut = build_source(sc.workload, Streams(1), sc.base_dir, 16, 5.0)
    k = len(cut.arrival_s)
    assert 0 < k < 3000
    np.testing.assert_array_equal(cut.arrival_s, full.arrival_s[:k])
    np.testing.assert_array_equal(cut.input_tokens, full.input_tokens[:k])
    np.testing.assert_array_equal(cut.output_tokens, full.output_tokens[:k])


def test_mixture_lengths_are_drawn_whole(make_scenario):
    """A mixture's components draw after every pick, so the first k lengths depend on
    how many are drawn: with a mixture, the horizon does not cut the draw."""
    from lyra_simpy.rng import Streams
    from lyra_simpy.workload import build_source

    comps = [{"weight": 1, "dist": {"name": "uniform", "low": 1, "high": 9}}] * 2
    mix = {"name": "mixture", "components": comps}
    sc = make_scenario({"workload.num_requests": 300, "workload.input_tokens": mix})
    cut = build_source(sc.workload, Streams(1), sc.base_dir, 16, 1.0)
    assert len(cut.input_tokens) == 300


def test_mixture_cut_by_the_stop_draws_whole_chunks(make_scenario, monkeypatch):
    """300 million mixture requests stopped at 2 s drew every length (and every system
    prompt key) up front; now one chunk is drawn, whole, and the requests that arrive
    are the first ones of the full draw."""
    from lyra_simpy.rng import Streams
    from lyra_simpy.workload import build_source, source

    comps = [{"weight": 1, "dist": {"name": "uniform", "low": 1, "high": 9}}] * 2
    mix = {"name": "mixture", "components": comps}
    prefix = {"name": "system_prompt", "groups": 3, "prefix_tokens": 16}
    huge = make_scenario(
        {
            "workload.num_requests": 300_000_000,
            "workload.input_tokens": mix,
            "workload.prefix": prefix,
        }
    )
    cut = build_source(huge.workload, Streams(1), huge.base_dir, 8, 2.0)
    assert len(cut.input_tokens) == source.CHUNK
    assert len(cut.keys) == source.CHUNK

    monkeypatch.setattr(source, "CHUNK", 7)
    sc = make_scenario(
        {"workload.num_requests": 200, "workload.input_tokens": mix, "workload.prefix": prefix}
    )
    full = build_source(sc.workload, Streams(1), sc.base_dir, 8)
    cut = build_source(sc.workload, Streams(1), sc.base_dir, 8, 1.0)
    k = len(cut.arrival_s)
    assert 7 < k < 200
    assert len(cut.input_tokens) == -(-k // 7) * 7  # whole chunks
    np.testing.assert_array_equal(cut.input_tokens, full.input_tokens[: len(cut.input_tokens)])
    assert cut.keys == full.keys[: len(cut.keys)]


def _closed(make_scenario, n, **changes):
    return make_scenario(
        {
            "workload.num_requests": n,
            "workload.arrival": {"name": "closed_loop", "concurrency": 3},
            "workload.input_tokens": {"name": "lognormal", "mean": 30, "sigma": 0.5, "max": 90},
            "workload.output_tokens": {"name": "normal", "mean": 12, "std": 4, "min": 1},
            **changes,
        }
    )


def test_closed_loop_draws_its_requests_as_the_clients_reach_them(make_scenario):
    """A closed loop of 300 million requests stopped at 0.5 s drew (and held, with a
    result slot each) every request up front: 18 GB. Now it draws one chunk, and the
    next only when a client reaches it."""
    from lyra_simpy import simulate
    from lyra_simpy.rng import Streams
    from lyra_simpy.workload import build_source, source

    sc = _closed(make_scenario, 300_000_000, **{"simulation.until_s": 0.5})
    src = build_source(sc.workload, Streams(sc.seed), sc.base_dir, 8, 0.5)
    assert len(src.input_tokens) == len(src.arrival_s) == source.CHUNK
    res = simulate(sc)
    n = len(res.records["request_id"])
    assert 3 <= n < 1000
    s = res.summary
    assert s["completed"] + s["rejected"] + s["unfinished"] == n
    assert s["unfinished"] <= 3  # at most one per client, cut by the stop


def test_closed_loop_chunks_change_no_number(make_scenario, monkeypatch):
    """Log-normal and normal lengths and conversation keys draw element by element, so
    a closed loop drawn 7 requests at a time (its collector growing with it) reports
    what one draw reports, request for request."""
    from lyra_simpy import simulate
    from lyra_simpy.workload import source

    conv = {"name": "conversation", "turns": 3, "concurrent": 2}
    sc = _closed(make_scenario, 40, **{"workload.prefix": conv, "kv_cache.num_blocks": 4096})
    whole = simulate(sc)
    monkeypatch.setattr(source, "CHUNK", 7)
    chunked = simulate(sc)
    assert list(chunked.requests()) == list(whole.requests())
    assert chunked.summary == whole.summary
    assert all(r["status"] == "ok" for r in whole.requests())
