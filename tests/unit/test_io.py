"""Result files: JSONL / JSON / CSV round trips and the atomic result folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lyra_simpy import simulate
from lyra_simpy.metrics.io import (
    atomic_dir,
    read_itl_csv,
    read_jsonl,
    read_series,
    read_series_csv,
    write_itl_csv,
    write_json,
    write_jsonl,
    write_series_csv,
    write_series_npz,
)


def write_then_fail(final: Path, exc: BaseException) -> None:
    with atomic_dir(final) as tmp:
        (tmp / "requests.jsonl").write_text("{}\n")
        (tmp / "sub").mkdir()
        raise exc


def test_atomic_dir_leaves_nothing_when_the_block_raises(tmp_path):
    final = tmp_path / "results" / "scenario"
    with pytest.raises(RuntimeError, match="boom"):
        write_then_fail(final, RuntimeError("boom"))
    assert not final.exists()
    assert list((tmp_path / "results").iterdir()) == []


def test_atomic_dir_keeps_the_old_folder_when_the_block_raises(tmp_path):
    final = tmp_path / "scenario"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        write_then_fail(final, KeyboardInterrupt())
    assert [p.name for p in final.iterdir()] == ["old.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["scenario"]


def test_atomic_dir_replaces_on_success(tmp_path):
    final = tmp_path / "scenario"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with atomic_dir(final) as tmp:
        assert tmp != final
        assert not (tmp / "old.txt").exists()
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["scenario"]  # no temp or .old left


def test_jsonl_round_trip_with_rejections(make_scenario, tmp_path):
    res = simulate(make_scenario({"scheduler.max_num_batched_tokens": 30}))
    rows = list(res.requests())
    assert any(r["status"] == "rejected" for r in rows)
    write_jsonl(tmp_path / "r.jsonl", rows)  # NaN must have become null (allow_nan=False)
    assert read_jsonl(tmp_path / "r.jsonl") == rows


def test_json_refuses_nan(tmp_path):
    with pytest.raises(ValueError, match="Out of range float"):
        write_json(tmp_path / "s.json", {"x": float("nan")})


def test_series_csv_round_trip(tiny_scenario, tmp_path):
    res = simulate(tiny_scenario)
    write_series_csv(tmp_path / "t.csv", res.timeseries)
    back = read_series_csv(tmp_path / "t.csv")
    assert list(back) == list(res.timeseries)
    for name, col in res.timeseries.items():
        np.testing.assert_array_equal(back[name], col)


def test_empty_series_csv(tmp_path):
    write_series_csv(tmp_path / "t.csv", {})
    assert read_series_csv(tmp_path / "t.csv") == {}


def test_itl_csv_merges_equal_gaps_and_keeps_counts(tiny_scenario, tmp_path):
    res = simulate(tiny_scenario)
    values, counts = res.itl_s
    write_itl_csv(tmp_path / "itl.csv", values, counts)
    ms, n = read_itl_csv(tmp_path / "itl.csv")
    assert int(n.sum()) == int(counts.sum())  # every gap kept
    assert (np.diff(ms) > 0).all()  # sorted, equal gaps merged
    assert float((ms * n).sum()) == pytest.approx(float((values * counts).sum()) * 1000.0)


def test_itl_csv_writes_each_gap_as_its_exact_decimal_in_ms(tmp_path):
    gaps_s = np.array([0.031, 0.031, 0.022153846153846, 0.0, 1e-12, 120.5, 0.031000000000001])
    counts = np.array([3, 4, 1, 2, 5, 12345, 1])
    write_itl_csv(tmp_path / "itl.csv", gaps_s, counts)
    assert (tmp_path / "itl.csv").read_bytes() == (
        b"itl_ms,count\r\n"
        b"0.0,2\r\n"  # 0 ms, and 1e-12 s = 1e-9 ms (a picosecond) is its own row...
        b"0.000000001,5\r\n"  # ...written as a decimal, never 1e-09
        b"22.153846154,1\r\n"  # rounded to 9 decimals
        b"31.0,8\r\n"  # equal after rounding: merged (3 + 4 + 1)
        b"120500.0,12345\r\n"
    )
    ms, n = read_itl_csv(tmp_path / "itl.csv")
    assert ms.tolist() == [0.0, 1e-9, 22.153846154, 31.0, 120500.0]
    assert n.tolist() == [2, 5, 1, 8, 12345]


def test_itl_csv_text_is_what_repr_of_the_rounded_gap_gives(tiny_scenario, tmp_path):
    """The column-wise text equals ``csv.writer`` on ``round(gap_ms, 9)`` wherever
    ``repr`` writes a plain decimal (every gap of a simulated run)."""
    values, counts = simulate(tiny_scenario).itl_s
    write_itl_csv(tmp_path / "itl.csv", values, counts)
    ms, inverse = np.unique(np.round(values * 1000.0, 9), return_inverse=True)
    totals = np.bincount(inverse, weights=counts).astype(np.int64)
    expected = "".join(f"{m!r},{c}\r\n" for m, c in zip(ms.tolist(), totals.tolist(), strict=True))
    assert (tmp_path / "itl.csv").read_bytes() == ("itl_ms,count\r\n" + expected).encode()


def test_itl_csv_of_a_run_without_gaps_reads_back_empty(tmp_path):
    write_itl_csv(tmp_path / "itl.csv", np.empty(0), np.empty(0, np.int64))
    assert (tmp_path / "itl.csv").read_bytes() == b"itl_ms,count\r\n"
    ms, n = read_itl_csv(tmp_path / "itl.csv")
    assert ms.size == 0
    assert n.size == 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.001])
def test_itl_csv_refuses_a_gap_that_is_not_a_duration(tmp_path, bad):
    with pytest.raises(ValueError, match="finite and non-negative"):
        write_itl_csv(tmp_path / "itl.csv", np.array([0.01, bad]), np.array([1, 1]))


def test_series_npz_round_trip_is_exact_and_the_same_bytes_twice(tiny_scenario, tmp_path):
    res = simulate(tiny_scenario)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_series_npz(tmp_path / name / "timeseries.npz", res.timeseries)
    first = (tmp_path / "a" / "timeseries.npz").read_bytes()
    assert (tmp_path / "b" / "timeseries.npz").read_bytes() == first  # no time stamps
    back = read_series(tmp_path / "a")
    assert list(back) == list(res.timeseries)
    for name, col in res.timeseries.items():
        assert back[name].dtype == col.dtype
        assert back[name].tobytes() == col.tobytes()
    # np.load reads it as any .npz
    with np.load(tmp_path / "a" / "timeseries.npz") as data:
        assert sorted(data.files) == sorted(res.timeseries)


def test_read_series_falls_back_to_the_csv(tiny_scenario, tmp_path):
    res = simulate(tiny_scenario)
    write_series_csv(tmp_path / "timeseries.csv", res.timeseries)
    back = read_series(tmp_path)
    for name, col in res.timeseries.items():
        np.testing.assert_array_equal(back[name], col)


def test_run_writes_the_csv_too_when_asked(tmp_path):
    from lyra_simpy.cli import main

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "lab02_static_vs_continuous.yaml"
    args = ["run", str(scenario), "--quick", "--no-figures", "--out", str(tmp_path)]
    assert main([*args, "--timeseries-csv"]) == 0
    folder = tmp_path / "lab02_static_vs_continuous" / "continuous"
    from_csv = read_series_csv(folder / "timeseries.csv")
    for name, col in read_series(folder).items():
        np.testing.assert_array_equal(from_csv[name], col)


def test_records_jsonl_is_byte_for_byte_the_row_writer(make_scenario, tmp_path):
    from lyra_simpy.engine.request import RECORD_FIELDS
    from lyra_simpy.metrics.io import write_records_jsonl

    # rejections (NaN times, null reasons and reasons), preemptions, fractional times
    res = simulate(make_scenario({"scheduler.max_num_batched_tokens": 30}))
    assert any(r["status"] == "rejected" for r in res.requests())
    write_jsonl(tmp_path / "rows.jsonl", res.requests())
    write_records_jsonl(tmp_path / "cols.jsonl", res.records, RECORD_FIELDS)
    assert (tmp_path / "cols.jsonl").read_bytes() == (tmp_path / "rows.jsonl").read_bytes()
    records = {**res.records, "ttft_ms": np.full(len(res.records["ttft_ms"]), np.inf)}
    with pytest.raises(ValueError, match="Out of range float"):
        write_records_jsonl(tmp_path / "inf.jsonl", records, RECORD_FIELDS)
