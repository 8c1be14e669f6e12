"""The command line: exit codes, one-line errors, and the files a run writes (DESIGN §4)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from lyra_simpy import load_scenario, read_series
from lyra_simpy.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

#: The per-request JSONL contract, in order (DESIGN §4).
RECORD_FIELDS = [
    "request_id",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "first_token_s",
    "finish_s",
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
    "status",
    "reject_reason",
    "replica",
    "preemptions",
]
#: Summary names as vLLM's serving benchmark writes them (DESIGN §4).
SUMMARY_FIELDS = [
    "duration",
    "completed",
    "rejected",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "request_goodput",
    "goodput_token_throughput",
    "slo_attainment",
] + [
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p90", "p99")
]
SERIES_FIELDS = [
    "replica",
    "start_s",
    "end_s",
    "batch_seqs",
    "prefill_tokens",
    "decode_seqs",
    "kv_blocks",
    "waiting",
]


@pytest.fixture
def tiny_file(tmp_path, tiny_raw) -> Path:
    tiny_raw["quick"] = {"workload": {"num_requests": 4}}
    tiny_raw["variants"] = [
        {"label": "cont"},
        {"label": "stat", "set": {"scheduler": {"name": "static", "max_batch": 2}}},
    ]
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_raw))
    return path


@pytest.fixture
def bad_file(tmp_path, tiny_raw) -> Path:
    tiny_raw["scheduler"]["max_num_seqs"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_raw))
    return path


def test_validate_ok(tiny_file, capsys):
    assert main(["validate", str(tiny_file)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"{tiny_file}: ok (2 run(s))"


def test_validate_folder_of_lab_scenarios(capsys):
    assert main(["validate", "--quick", str(SCENARIOS)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(list(SCENARIOS.glob("*.yaml")))
    assert all(": ok (" in line for line in out)


@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_file_exits_2_with_one_line_and_no_results(
    command, bad_file, tiny_file, tmp_path, capsys
):
    out_dir = tmp_path / "results"
    extra = ["--out", str(out_dir), "--no-figures"] if command == "run" else []
    # the good file is named first: nothing may be simulated or written for it either
    assert main([command, str(tiny_file), str(bad_file), *extra]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0
    assert err.startswith("lyra-simpy: scheduler.continuous.max_num_seqs: got 0, ")
    assert "Traceback" not in captured.err
    assert not out_dir.exists()


def test_bad_override_exits_2(tiny_file, capsys):
    assert main(["validate", str(tiny_file), "--set", "scheduler.name=fifo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lyra-simpy: scheduler: got 'fifo', must be one of ")


def test_missing_scenario_file_exits_2(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read scenario" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["validate", "run"])
def test_folder_without_scenarios_exits_2(command, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no scenarios here")
    extra = ["--out", str(tmp_path / "results")] if command == "run" else []
    assert main([command, str(empty), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"lyra-simpy: {empty}: folder has no scenario files (*.yaml)\n"
    assert captured.out == ""


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("workload.arrival.rate_per_s=1e400", "workload.arrival.poisson.rate_per_s: got inf, "),
        ("seed=-1", "seed: got -1, must be greater than or equal to 0"),
        ("scheduler.max_num_seqs=true", "scheduler.continuous.max_num_seqs: got True, "),
    ],
)
def test_refused_at_the_edge_exits_2_with_one_line(tiny_file, override, expected, capsys):
    assert main(["validate", str(tiny_file), "--set", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"lyra-simpy: {expected}")
    assert err.count("\n") == 1


def test_typo_in_quick_block_caught_by_validate(tiny_file, capsys):
    raw = yaml.safe_load(tiny_file.read_text())
    raw["quick"] = {"workload": {"num_requsts": 4}}
    tiny_file.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(tiny_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lyra-simpy: quick: workload.num_requsts: unknown field")


def test_schema_prints_json(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "Scenario"
    assert {"workload", "scheduler", "kv_cache", "cost"} <= set(schema["properties"])
    assert set(schema["required"]) >= {"workload", "kv_cache", "cost"}


def test_run_writes_contract_files(tiny_file, tmp_path, capsys):
    out_dir = tmp_path / "results"
    assert main(["run", "--quick", str(tiny_file), "--out", str(out_dir), "--no-figures"]) == 0
    stdout = capsys.readouterr().out
    assert "== tiny" in stdout
    folder = out_dir / "tiny"
    assert sorted(p.name for p in folder.iterdir()) == ["cont", "stat", "table.csv"]
    with (folder / "table.csv").open() as fh:
        table = list(csv.reader(fh))
    assert [row[0] for row in table[1:]] == ["cont", "stat"]
    for i, label in enumerate(["cont", "stat"]):
        check_variant(folder / label, label, i, n_requests=4)


def check_variant(
    folder: Path, label: str, index: int, n_requests: int | None = None, trace: bool = False
) -> None:
    assert sorted(p.name for p in folder.iterdir()) == [
        "itl.csv",
        "manifest.json",
        "requests.jsonl",
        "summary.json",
        "timeseries.npz",
        *(["trace_events.json"] if trace else []),
    ]
    rows = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    if n_requests is not None:
        assert len(rows) == n_requests
    for row in rows:
        assert list(row) == RECORD_FIELDS
        assert row["status"] in ("ok", "rejected", "unfinished")
    summary = json.loads((folder / "summary.json").read_text())
    # every vLLM name is there, in vLLM's order (extra counters may sit between them)
    assert [k for k in summary if k in SUMMARY_FIELDS] == SUMMARY_FIELDS
    assert summary["completed"] == sum(r["status"] == "ok" for r in rows)
    series = read_series(folder)
    assert list(series) == SERIES_FIELDS
    assert len({len(column) for column in series.values()}) == 1
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["scenario"]["label"] == label
    assert manifest["variant_index"] == index
    assert manifest["seed"] == manifest["scenario"]["seed"]
    for key in ("version", "git_revision", "python", "platform", "date", "cost_model", "engine"):
        assert key in manifest
    assert manifest["cost_model"]["name"] == manifest["scenario"]["cost"]["name"]
    assert manifest["engine"]["iterations"] > 0


def test_run_every_scenario_quick_with_figures(quick_run_all):
    scen = SCENARIOS  # in place: trace paths are relative to the scenario files
    out_dir, fig_dir = quick_run_all.results, quick_run_all.figures
    stdout = quick_run_all.stdout
    assert "best goodput_token_throughput: 16" in stdout
    static_cont = out_dir / "lab02_static_vs_continuous"
    for i, label in enumerate(["static", "continuous"]):
        check_variant(static_cont / label, label, i, n_requests=150)
    goodput = out_dir / "lab02_goodput_vs_batch"
    for i, depth in enumerate([4, 8, 16, 32, 64]):  # (its scenario asks for timelines)
        check_variant(goodput / str(depth), str(depth), i, n_requests=150, trace=True)
    figures = sorted(p.name for p in fig_dir.iterdir())
    assert {
        "lab02_goodput_vs_batch_vs_max_num_seqs.png",
        "lab02_static_vs_continuous_timeline_static.png",
        "lab02_static_vs_continuous_ttft_cdf.png",
    } <= set(figures)
    # every figure every scenario declares, and nothing else
    declared = set()
    for path in sorted(scen.glob("*.yaml")):
        sc = load_scenario(path, quick=True)
        declared |= {f"{spec.file_stem(sc.name)}.png" for spec in sc.figures}
    assert set(figures) == declared
    overload = out_dir / "slo_admission_overload"
    check_variant(overload / "slo_8.0", "slo_8.0", 13, n_requests=300)
    for name in figures:
        assert (fig_dir / name).read_bytes()[:4] == b"\x89PNG"


def test_every_command_has_one_entry_in_the_command_table():
    """One table maps each parsed command to what runs it (issue 15): every subcommand
    the parser declares has an entry, and every entry a subcommand."""
    import argparse

    from lyra_simpy.cli import COMMANDS, _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)


def test_run_on_worker_processes_writes_the_same_results(tiny_file, tmp_path, capsys):
    """``--workers 2`` runs the variants on a process pool: the same table, the same
    result files byte for byte (only the manifest's wall time and date differ)."""
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["run", "--quick", str(tiny_file), "--out", str(one), "--no-figures"]) == 0
    printed_one = capsys.readouterr().out
    args = ["run", "--quick", str(tiny_file), "--out", str(two), "--no-figures"]
    assert main([*args, "--workers", "2"]) == 0
    printed_two = capsys.readouterr().out
    assert printed_one.replace(str(one), "") == printed_two.replace(str(two), "")
    for label in ("cont", "stat"):
        for name in ("requests.jsonl", "summary.json", "timeseries.npz", "itl.csv"):
            a = (one / "tiny" / label / name).read_bytes()
            assert a == (two / "tiny" / label / name).read_bytes(), (label, name)
    with pytest.raises(SystemExit) as exc:
        main([*args, "--workers", "0"])
    assert exc.value.code == 2
    assert "--workers: got '0', must be an integer >= 1 or auto" in capsys.readouterr().err
