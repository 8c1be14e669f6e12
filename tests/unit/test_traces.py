"""Trace rows are refused, not dropped (issue 13): a NaN, infinite, negative or
decreasing time and a token count below 1 fail with the file and the line; the engine
never spins on a time it cannot reach."""

from __future__ import annotations

import json

import pytest

from builders import trace_workload
from lyra_simpy import simulate
from lyra_simpy.cost.linear import LinearCost
from lyra_simpy.engine.timing import delay_at_least, delay_until
from lyra_simpy.errors import ScenarioError, SimulationError, TraceError
from lyra_simpy.workload.traces import read_trace

HEADER = "arrival_s,input_tokens,output_tokens\n"


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("nan,10,2", "line 3: arrival_s nan, must be a finite time >= 0"),
        ("inf,10,2", "line 3: arrival_s inf, must be a finite time >= 0"),
        ("-1,10,2", "line 3: arrival_s -1.0, must be a finite time >= 0"),
        ("0.5,10,2", "line 3: arrival_s 0.5 is before the previous row's 1.0"),
        ("2,0,2", "line 3: input_tokens '0', must be a whole number >= 1"),
        ("2,10,-3", "line 3: output_tokens '-3', must be a whole number >= 1"),
        ("2,10.5,2", "line 3: input_tokens '10.5', must be a whole number >= 1"),
        ("2,nan,2", "line 3: input_tokens 'nan', must be a whole number >= 1"),
        ("2,ten,2", "line 3: input_tokens 'ten', must be a whole number >= 1"),
        ("soon,10,2", "line 3: arrival_s 'soon', must be a time"),
    ],
)
def test_bad_csv_row_refused_with_file_and_line(tmp_path, row, expected):
    p = tmp_path / "t.csv"
    p.write_text(HEADER + "1,10,2\n" + row + "\n3,10,2\n")
    with pytest.raises(TraceError) as info:
        read_trace(p, "csv")
    msg = str(info.value)
    assert msg.startswith(f"{p.resolve()}: {expected}")
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"timestamp": 500}, "line 2: timestamp 500.0 is before the previous row's 1000.0"),
        ({"input_length": 0}, "line 2: input_length 0, must be a whole number >= 1"),
        ({"output_length": True}, "line 2: output_length True, must be a whole number >= 1"),
        ({"timestamp": float("nan")}, "line 2: timestamp nan, must be a finite time >= 0"),
    ],
)
def test_bad_mooncake_row_refused_with_file_and_line(tmp_path, row, expected):
    good = {"timestamp": 1000, "input_length": 10, "output_length": 2, "hash_ids": [1]}
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(good) + "\n" + json.dumps({**good, **row}) + "\n")
    with pytest.raises(TraceError) as info:
        read_trace(p, "mooncake")
    assert str(info.value).startswith(f"{p.resolve()}: {expected}")


def test_equal_times_are_in_order(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(HEADER + "1,10,2\n1,20,3\n")
    assert read_trace(p, "csv").arrival_s.tolist() == [0.0, 0.0]


def test_burstgpt_failed_requests_are_the_only_rows_skipped(tmp_path):
    """BurstGPT logs a failed request with 0 response tokens (the dataset's convention);
    a 0-token prompt there is still refused."""
    head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    p = tmp_path / "b.csv"
    p.write_text(head + "5,ChatGPT,472,18,490,x\n6,ChatGPT,100,0,100,x\n7,ChatGPT,0,5,5,x\n")
    with pytest.raises(TraceError, match="line 4: Request tokens '0'"):
        read_trace(p, "burstgpt")


def test_nan_arrival_fails_validation_naming_field_file_and_line(make_scenario, tmp_path):
    """The hang of issue 13: a NaN arrival passed validate and `run` spun forever."""
    changes = trace_workload(tmp_path, [(0.0, 10, 2), (float("nan"), 10, 2)])
    with pytest.raises(ScenarioError) as info:
        make_scenario(changes, base_dir=tmp_path)
    msg = str(info.value)
    assert msg.startswith("workload.arrival.path: ")
    assert "t.csv: line 3: arrival_s nan, must be a finite time >= 0" in msg


@pytest.mark.parametrize("target", [float("nan"), float("inf")])
def test_clock_refuses_a_time_it_can_never_reach(target):
    for delay in (delay_until, delay_at_least):
        with pytest.raises(SimulationError, match="not finite"):
            delay(1.0, target)


def test_engine_refuses_a_non_finite_iteration(make_scenario, monkeypatch):
    """An iteration that would end at NaN raises instead of being scheduled."""
    nan = float("nan")
    monkeypatch.setattr(LinearCost, "iteration_s", lambda self, shape: nan)
    monkeypatch.setattr(LinearCost, "decode_span_s", lambda self, *args: [nan] * args[-1])
    with pytest.raises(SimulationError, match="not finite"):
        simulate(make_scenario())


def test_the_column_reader_and_the_row_reader_agree_on_every_shipped_csv_trace():
    """The array path (read first) gives exactly what the row-by-row checker gives."""
    import numpy as np

    from lyra_simpy.workload import traces
    from lyra_simpy.workload.catalog import PACKAGE_TRACES, known_traces

    for entry in known_traces().values():
        if not entry.vendored or entry.format == "mooncake":
            continue
        path = PACKAGE_TRACES / entry.file
        fast = traces._fast_csv(path, entry.format)  # type: ignore[arg-type]
        assert fast is not None, entry.name
        rows = traces._read_rows(path, entry.format, [])  # type: ignore[arg-type]
        t = np.asarray(rows.times)
        assert fast.arrival_s.tobytes() == (t - t[0]).tobytes()
        assert fast.input_tokens.tolist() == rows.ins
        assert fast.output_tokens.tolist() == rows.outs


def test_a_bad_row_makes_the_column_reader_hand_over_to_the_row_reader(tmp_path):
    from lyra_simpy.workload import traces

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1,2.5,6\n")
    assert traces._fast_csv(path, "csv") is None
    with pytest.raises(TraceError, match=r"t\.csv: line 3: input_tokens '2\.5', must be"):
        traces.read_trace(path, "csv")


@pytest.mark.parametrize(
    "text",
    [
        'arrival_s,input_tokens,output_tokens\n0,10,5\n"1",12,6\n',  # quoted: csv.reader
        "arrival_s,input_tokens,output_tokens\r\n0,10,5\r\n1,12,6\r\n",  # CRLF rows
        "arrival_s,input_tokens,output_tokens\n0,10,5\n1,12,6",  # no final newline
        "input_tokens,arrival_s,x,output_tokens\n10,0,a,5\n12,1,b,6\n",  # other order
    ],
)
def test_the_plain_split_reads_what_csv_reader_reads(tmp_path, text):
    from lyra_simpy.workload import traces

    path = tmp_path / "t.csv"
    path.write_bytes(text.encode())
    got = traces._fast_csv(path, "csv")
    assert got is not None
    assert got.arrival_s.tolist() == [0.0, 1.0]
    assert got.input_tokens.tolist() == [10, 12]
    assert got.output_tokens.tolist() == [5, 6]


@pytest.mark.parametrize(
    "text",
    [
        "arrival_s,input_tokens,output_tokens\n0,10,5\n\n1,12,6\n",  # a blank row
        "arrival_s,input_tokens,output_tokens\n0,10,5\n1,12\n",  # a short row
    ],
)
def test_a_row_without_every_column_still_goes_to_the_row_reader(tmp_path, text):
    from lyra_simpy.workload import traces

    path = tmp_path / "t.csv"
    path.write_text(text)
    assert traces._split_plain(text) is None
    assert traces._fast_csv(path, "csv") is None


def test_azure_times_in_the_fixed_form_and_otherwise_agree():
    """The byte-array path takes only the usual form; odd strings go the general way
    and give the values the general path gives."""
    from lyra_simpy.workload import traces

    usual = ["2023-11-16 18:15:46.6805900", "2023-11-16 18:15:50.9951690"]
    fixed = traces._azure_times_fixed(usual)
    assert fixed is not None
    assert fixed[1] - fixed[0] == pytest.approx(4.314579)
    for odd in (
        [" 2023-11-16 18:15:46.6805900", "2023-11-16 18:15:50.9951690 "],  # spaces
        ["2023-11-16 18:15:46", "2023-11-16 18:15:50.5"],  # no fraction, other widths
    ):
        assert traces._azure_times_fixed(odd) is None
        assert traces._azure_times(odd).tolist() == [
            traces._azure_times([t.strip()])[0] for t in odd
        ]
    assert traces._azure_times_fixed(["2023-11-16 18:15:46,6805900"] * 2) is None
