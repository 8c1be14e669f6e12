"""Running sweeps: every point exactly once, resumable after SIGKILL, identical tables
from every executor, and a rerun that computes nothing."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import TINY
from lyra_simpy import LyraError, simulate
from lyra_simpy.cli import main
from lyra_simpy.sweep import load_sweep, load_table, run_sweep, sweep_from_dict

SRC = Path(__file__).resolve().parents[2] / "src"


def _small(**fields: Any) -> dict[str, Any]:
    return {
        "base": copy.deepcopy(TINY),
        "grid": {"scheduler.max_num_seqs": [1, 2, 4], "workload.arrival.rate_per_s": [10.0, 40.0]},
        "seeds": 2,
        **fields,
    }


def test_a_sweep_writes_one_file_per_point_and_a_tidy_table(tmp_path):
    sweep = sweep_from_dict(_small())
    report = run_sweep(sweep, tmp_path, workers=1)
    assert (report.rows, report.distinct, report.computed) == (12, 12, 12)
    files = sorted((tmp_path / "points").iterdir())
    assert [f.stem for f in files] == sorted(p.key for p in sweep.points)
    table = load_table(tmp_path)
    assert list(table.columns[:4]) == [
        "scheduler.max_num_seqs",
        "workload.arrival.rate_per_s",
        "seed",
        "key",
    ]
    assert {"slo_attainment", "request_goodput", "p99_ttft_ms"} <= set(table.columns)
    assert list(table["key"]) == [p.key for p in sweep.points]
    # the numbers are the simulation's, exactly
    point = sweep.points[5]
    expected = simulate(point.scenario).summary
    row = table.iloc[5]
    assert row["seed"] == point.seed
    assert row["scheduler.max_num_seqs"] == point.values["scheduler.max_num_seqs"]
    for metric in ("slo_attainment", "mean_ttft_ms", "output_throughput", "completed"):
        assert row[metric] == expected[metric]
    stored = json.loads(files[0].read_text())
    assert {"key", "values", "seed", "summary", "scenario", "version"} <= set(stored)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["rows"] == 12


def test_a_rerun_with_nothing_changed_computes_nothing(tmp_path):
    first = run_sweep(sweep_from_dict(_small()), tmp_path, workers=1)
    table = (tmp_path / "sweep.csv").read_bytes()
    again = run_sweep(sweep_from_dict(_small()), tmp_path, workers=1)
    assert again.computed == 0
    assert (tmp_path / "sweep.csv").read_bytes() == table
    # one more grid value: only its points are computed
    grown = _small(grid={**_small()["grid"], "scheduler.max_num_seqs": [1, 2, 4, 8]})
    more = run_sweep(sweep_from_dict(grown), tmp_path, workers=1)
    assert (first.computed, more.computed, more.rows) == (12, 4, 16)


def test_equal_points_are_computed_once(tmp_path):
    report = run_sweep(
        sweep_from_dict(_small(grid={}, zip={"scheduler.max_num_seqs": [4, 4, 2]})),
        tmp_path,
        workers=1,
    )
    assert (report.rows, report.distinct, report.computed) == (6, 4, 4)
    table = load_table(tmp_path)
    assert list(table["key"][:2]) == list(table["key"][2:4])


def test_a_damaged_point_file_is_computed_again(tmp_path):
    sweep = sweep_from_dict(_small())
    run_sweep(sweep, tmp_path, workers=1)
    table = (tmp_path / "sweep.csv").read_bytes()
    damaged = tmp_path / "points" / f"{sweep.points[3].key}.json"
    damaged.write_text(damaged.read_text()[:50])
    (tmp_path / "points" / f".{sweep.points[4].key}.json.123.tmp").write_text("{")
    report = run_sweep(sweep, tmp_path, workers=1)
    assert report.computed == 1
    assert (tmp_path / "sweep.csv").read_bytes() == table
    assert not list((tmp_path / "points").glob(".*"))


def test_process_pool_and_dask_give_the_in_process_table(tmp_path):
    distributed = pytest.importorskip("distributed")
    sweep = sweep_from_dict(_small())
    run_sweep(sweep, tmp_path / "serial", workers=1)
    run_sweep(sweep, tmp_path / "pool", workers=2)
    # threads in one process keep the test quick; `--dask local` uses processes
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        run_sweep(sweep, tmp_path / "dask", dask=client)
        # by the scheduler's address, as `--dask tcp://HOST:PORT` connects
        run_sweep(sweep, tmp_path / "address", dask=cluster.scheduler_address)
    serial = (tmp_path / "serial" / "sweep.csv").read_bytes()
    assert (tmp_path / "pool" / "sweep.csv").read_bytes() == serial
    assert (tmp_path / "dask" / "sweep.csv").read_bytes() == serial
    assert (tmp_path / "address" / "sweep.csv").read_bytes() == serial
    assert load_table(tmp_path / "dask").equals(load_table(tmp_path / "serial"))


def _slow_sweep_file(tmp_path: Path) -> Path:
    """24 points of about 0.1 s each: long enough to be killed in the middle."""
    base = copy.deepcopy(TINY)
    base["workload"]["num_requests"] = 1500
    path = tmp_path / "slow.yaml"
    path.write_text(
        yaml.safe_dump(
            {"base": base, "grid": {"cost.base_ms": [8.0, 9.0, 10.0, 11.0, 12.0, 13.0]}, "seeds": 4}
        )
    )
    return path


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_sweep_killed_with_sigkill_resumes_without_losing_or_repeating_points(tmp_path):
    path = _slow_sweep_file(tmp_path)
    out = tmp_path / "killed"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "lyra_simpy", "sweep", str(path), "--out", str(out)]
    proc = subprocess.Popen([*cmd, "--workers", "2", "--quiet"], env=env, start_new_session=True)
    points = out / "points"
    try:
        # (finished points only: a point being written is a hidden ``.*.json`` temporary)
        while proc.poll() is None and len(list(points.glob("[!.]*.json"))) < 3:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)  # `kill -9 PID`: the sweep, not its workers
        proc.wait()
        # the pool's workers notice their parent is gone and end (a liveness check with a
        # generous deadline, not a timing assertion)
        deadline = time.monotonic() + 60
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _group_alive(proc.pid), "the pool's workers outlived the killed sweep"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    results = [f for f in points.glob("*.json") if not f.name.startswith(".")]
    done = {f.name for f in results}
    assert 3 <= len(done) < 24, "the sweep must be killed in the middle"
    for f in results:  # (a hidden file is a write cut short: the resume removes it)
        json.loads(f.read_text())  # every result file there is complete

    sweep = load_sweep(path)
    resumed = run_sweep(sweep, out, workers=1)
    assert resumed.computed == 24 - len(done)
    whole = run_sweep(sweep, tmp_path / "whole", workers=1)
    assert whole.computed == 24
    assert (out / "sweep.csv").read_bytes() == (tmp_path / "whole" / "sweep.csv").read_bytes()
    assert sorted(f.name for f in points.iterdir()) == sorted(f"{p.key}.json" for p in sweep.points)
    assert run_sweep(sweep, out, workers=1).computed == 0


def test_cli_sweep_runs_and_reports_what_it_computed(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_small(seeds=1)))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "s: 6 rows, 6 points: 6 computed, 0 already done" in out
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--workers", "1"]) == 0
    assert "6 points: 0 computed, 6 already done" in capsys.readouterr().out


def test_cli_sweep_errors_are_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_small(grid={"scheduler.max_num_seqs": [0]})))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lyra-simpy: sweep point (scheduler.max_num_seqs=0, seed=7)")
    assert "\n" not in err
    assert not (tmp_path / "o").exists()
    path.write_text(yaml.safe_dump(_small()))
    assert main(["sweep", str(path), "--out", str(tmp_path / "o"), "--dask", "udp://x"]) == 2
    assert "--dask: got 'udp://x', must be 'local' or an address" in capsys.readouterr().err


def test_load_table_without_a_run_says_so(tmp_path):
    with pytest.raises(LyraError, match="no sweep table"):
        load_table(tmp_path)


def test_the_progress_bar_counts_points_done_over_total(tmp_path, capsys):
    sweep = sweep_from_dict(_small())
    part = _small(grid={**_small()["grid"], "scheduler.max_num_seqs": [1]})
    run_sweep(sweep_from_dict(part), tmp_path, workers=1)
    run_sweep(sweep, tmp_path, workers=1, progress=True)
    err = capsys.readouterr().err
    counts = re.findall(r"(?<!\d)(\d+)/12", err)
    assert counts[0] == "4"  # resumed: the 4 points already done count from the start
    assert counts[-1] == "12"
    assert "point" in err
    run_sweep(sweep, tmp_path, workers=1, progress=False)
    assert capsys.readouterr().err == ""
