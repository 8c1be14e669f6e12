"""validation/validate_cpu.py's command line: help and bad flags never start a run."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builders import validation_module

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "LYRA_CACHE": "/nonexistent"}
    return subprocess.run(
        [sys.executable, str(ROOT / "validation" / "validate_cpu.py"), *args],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip


@functools.cache
def _matrix() -> Any:
    """``validation/llamacpp_matrix.py``, loaded once for :func:`_summary_text` (``--summary``
    sets nothing a later call reads: its flags' defaults)."""
    return validation_module("llamacpp_matrix")


def _summary_text(stored: Path) -> str:
    """What ``validate_cpu.py --matrix --summary STORED`` prints, run in this process:
    ``llamacpp_matrix.main``, which the script hands ``--matrix`` to (a process of its own
    took 1.4 s a call, most of it starting Python, and the tests read 80 summaries;
    :func:`test_the_summary_of_a_stored_matrix_is_its_table_and_runs_nothing` checks the
    script prints the same)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _matrix().main(["--summary", str(stored)]) == 0
    return out.getvalue()


def _summary(stored: Path) -> list[str]:
    """``--matrix --summary`` of a stored matrix: its table's rows, header left out (up to
    the blank line before the cells by step fit)."""
    return _summary_text(stored).split("\n\n")[0].splitlines()[2:]


def _cells(stored: Path) -> list[list[str]]:
    """:func:`_summary`'s rows, each split on " | "."""
    return [line.split(" | ") for line in _summary(stored)]


def _by_point(rows: list[list[str]]) -> dict[tuple[str, str], list[str]]:
    """:func:`_cells`'s rows by (server flags, regime)."""
    return {(r[0].strip("| `"), r[1]): r for r in rows}


def _totals(rows: list[list[str]]) -> list[int]:
    """Cells in target over a ``--summary``'s rows (split on " | "), Tables 1, 2 and 3."""
    return [sum(int(r[k].split(" / ")[0]) for r in rows) for k in (2, 4, 6)]


def test_help_prints_the_usage_and_runs_nothing() -> None:
    out = _run("--help")
    assert out.returncode == 0
    assert "--doc-only" in out.stdout
    assert "--matrix" in out.stdout


def test_an_unknown_flag_is_one_line_and_exit_2() -> None:
    # it used to start the whole validation (build, server, profile) and overwrite the
    # published profile and figures
    out = _run("--repeats", "5")
    assert out.returncode == 2
    assert "unrecognized arguments: --repeats 5" in out.stderr
    assert out.stdout == ""


def test_a_matrix_gate_outside_zero_to_one_is_one_line_and_runs_nothing() -> None:
    out = _run("--matrix", "--gate", "1.5")
    assert out.returncode == 1
    assert out.stderr.strip() == "--gate: got 1.5, must be a fraction between 0 and 1"


def test_steps_check_of_a_point_not_stored_is_one_line_and_runs_nothing() -> None:
    out = _run("--matrix", "--steps-check", "--only", "kvu/medium")
    assert out.returncode == 1
    line = out.stderr.strip()
    assert "\n" not in line
    assert line.startswith("--only: no stored point 'kvu/medium'; stored: [")
    assert "'default/short'" in line


def test_resimulating_points_whose_runs_are_elsewhere_is_one_line_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fresh clone holds matrix.json's tables but none of the real runs (they stay in
    # results/ where the matrix ran): --resimulate used to simulate the points it had,
    # rewriting their files, and then stop with a traceback at the first it had not
    matrix = validation_module("llamacpp_matrix")
    monkeypatch.setattr(matrix, "OUT", tmp_path)
    published = json.loads((ROOT / "docs" / "validation" / "llamacpp-matrix.json").read_text())
    here = tmp_path / "np2_b64_short"
    (here / "real").mkdir(parents=True)
    (here / "profile.csv").write_text("")
    got = matrix.stored_points(published, ["np2_b64/short"])
    assert [k for k, _ in got] == ["np2_b64/short"]
    with pytest.raises(SystemExit) as stop:
        matrix.stored_points(published, None)
    line = str(stop.value)
    assert "\n" not in line
    assert line == (
        f"--resimulate: point 'default/short' has no profile and real runs in "
        f"{tmp_path / 'default_short'} (they stay where the matrix ran them); points here: "
        "['np2_b64/short']; run it again with --only default/short"
    )
    with pytest.raises(SystemExit, match=r"^--steps-check: point 'kvu/long' has no"):
        matrix.stored_points(published, ["kvu/long", "np2_b64/short"], "--steps-check")


def test_the_summary_of_a_stored_matrix_is_its_table_and_runs_nothing() -> None:
    # the steady-host run of -kvu long that docs/VALIDATION-llamacpp.md item 9 quotes
    steady = ROOT / "docs" / "validation" / "llamacpp-kvu-long-steady.json"
    out = _run("--matrix", "--summary", str(steady))
    assert out.returncode == 0, out.stderr
    assert out.stdout == _summary_text(steady)  # (the other tests read it in process)
    rows = out.stdout.splitlines()
    assert len(rows) == 3
    assert rows[2] == (
        "| `-np 4 -c 4096 -t 2 -kvu` | long | 30 / 35 | 2 % | 31 / 35 | 2 % | 31 / 35 | 2 % "
        "| 1.00–1.02 |"
    )


def test_the_kvu_long_run_with_mixed_rows_at_two_contexts_is_stored_apart() -> None:
    # docs/VALIDATION-llamacpp.md item 10: -kvu long again with the mixed probe rows at
    # 200 and 400 decoder tokens, kept out of the tables
    stored = ROOT / "docs" / "validation" / "llamacpp-kvu-long-mixed.json"
    assert _summary(stored)[0] == (
        "| `-np 4 -c 4096 -t 2 -kvu` | long | 26 / 35 | 4 % | 28 / 35 | 2 % | 29 / 35 | 2 % "
        "| 0.96–1.04 |"
    )


def test_the_partial_matrix_of_the_amd_host_is_stored_apart() -> None:
    # docs/VALIDATION-llamacpp.md item 11: three points on another machine
    stored = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc.json"
    assert _summary(stored) == [
        "| `-np 4 -c 4096 -t 2` | short | 28 / 35 | 5 % | 31 / 35 | 3 % | 28 / 35 | 3 % "
        "| 0.88–1.03 |",
        "| `-np 4 -c 4096 -t 2` | long | 19 / 35 | 13 % | 27 / 35 | 9 % | 28 / 35 | 8 % "
        "| 0.81–0.90 |",
        "| `-np 2 -c 4096 -t 2 -b 64` | long | 29 / 35 | 3 % | 14 / 35 | 12 % | 14 / 35 | 12 % "
        "| 0.95–1.06 |",
    ]


@pytest.mark.parametrize(
    ("name", "table1"),
    [
        ("llamacpp-matrix-epyc-speedref", (7, 29, 29)),
        ("llamacpp-matrix-epyc-speedref-unscaled", (6, 26, 30)),
    ],
)
def test_the_amd_hosts_speed_reference_runs_are_stored_apart(
    name: str, table1: tuple[int, int, int]
) -> None:
    # docs/VALIDATION-llamacpp.md item 12: the same runs priced by the scaled and the
    # unscaled profile rows; Tables 2 and 3 fit on the runs and agree
    rows = _cells(ROOT / "docs" / "validation" / f"{name}.json")
    assert tuple(int(r[2].split(" / ")[0]) for r in rows) == table1
    assert [(r[4], r[6]) for r in rows] == [
        ("17 / 35", "17 / 35"),
        ("25 / 35", "25 / 35"),
        ("29 / 35", "29 / 35"),
    ]


def test_the_amd_hosts_whole_gated_matrix_is_stored_apart() -> None:
    # docs/VALIDATION-llamacpp.md item 12: every point's runs gated on its profile's
    # own speed; Tables 1-3 137, 154 and 152 of 210
    stored = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-gated.json"
    rows = _cells(stored)
    assert len(rows) == 6
    totals = _totals(rows)
    assert totals == [137, 154, 152]


def test_the_amd_hosts_matrix_with_prompt_steps_is_stored_apart() -> None:
    # docs/VALIDATION-llamacpp.md item 13: the three short points and -np 4 long run
    # again with mixed probe rows one per step (from probes: -np 4 short 7 -> 29, -np 2
    # -b 64 short 8 -> 19, -kvu short 32 -> 34, -np 4 long 29 -> 34), the other two
    # item 12's
    stored = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-steps.json"
    rows = _cells(stored)
    short = {r[0].strip("| `"): r[2] for r in rows if r[1] == "short"}
    assert short["-np 4 -c 4096 -t 2"] == "29 / 35"
    assert short["-np 2 -c 4096 -t 2 -b 64"] == "19 / 35"
    assert short["-np 4 -c 4096 -t 2 -kvu"] == "34 / 35"
    long = {r[0].strip("| `"): r[2] for r in rows if r[1] == "long"}
    assert long["-np 4 -c 4096 -t 2"] == "34 / 35"
    totals = _totals(rows)
    assert totals == [177, 177, 180]


def test_a_probes_prompt_steps_add_up_to_the_servers_prompt_time() -> None:
    # docs/VALIDATION-llamacpp.md item 13 (validation/llamacpp_mixed_steps.py): the two
    # steps the decoders' streams show for a probe's prompt against the server's own
    # prompt_ms, every trial; a first step of 64 tokens costs more than its last of 4
    doc = json.loads((ROOT / "docs" / "validation" / "llamacpp-mixed-steps-epyc.json").read_text())
    for trials in doc["trials"].values():
        for t in trials:
            assert sum(t["steps_ms"]) == pytest.approx(t["prompt_ms"], rel=0.05)
    assert all(t["steps_ms"][0] > 2 * t["steps_ms"][1] for t in doc["trials"]["64"])
    assert doc["client_ms"]["own_tls"] > 10 * doc["client_ms"]["shared_tls"]


def test_the_arrival_split_of_item_12s_runs_is_stored() -> None:
    # docs/VALIDATION-llamacpp.md item 13 and the README ("7-50 % low"): the first prompt
    # steps of item 12's runs against its probe fits, by point (llamacpp_steps.py
    # --arrivals before the points were run again)
    text = (ROOT / "docs" / "validation" / "llamacpp-arrivals-epyc-item12.txt").read_text()
    first: dict[str, list[float]] = {}
    point = ""
    for line in text.splitlines():
        if not line.startswith("  "):
            point = line.split()[0]
            continue
        cells = line.split("   ")
        prompt = next(c for c in cells if c.strip().startswith("prompt "))
        first.setdefault(point, []).append(float(prompt.split()[1]))
    assert (min(first["default_short"]), max(first["default_short"])) == (1.20, 1.31)
    assert (min(first["np2_b64_short"]), max(first["np2_b64_short"])) == (1.36, 1.50)
    assert (min(first["kvu_short"]), max(first["kvu_short"])) == (1.07, 1.16)


def test_the_published_matrix_is_item_23s_round_with_later_points_again() -> None:
    # docs/VALIDATION-llamacpp.md items 23-32 and the README's table: every point run
    # again in the matrix's order (item 23), then -np 4 short and long (item 25), -kvu
    # long (item 28), the three short points (item 29), -np 4 short (item 30) and the
    # three long points with the profile's wander probe (item 32) and the three short points
    # with its wake probe (item 33), the long ones (item 34), -np 4 short (item 35), -kvu
    # short (item 36), the -np 2 -b 64 points (item 37), -np 4 and -kvu long (item 39) and
    # the -np 4 and -kvu points in one pass (item 40), then the -np 2 -b 64 and -np 4
    # points in one pass (item 41), then every point but -np 2 -b 64 long with lyra-simpy
    # speed before every run (item 42), then the -np 2 -b 64 points and -kvu short with
    # readings 6 probes long (item 43), then -np 4 short and -kvu short so (item 45), -np 4
    # long (item 46) and -kvu long (item 47) again, -kvu long and short once more with
    # their KV cells placed as llama.cpp places them (items 48 and 49), -np 4 short on the
    # same quiet host (item 50), -np 2 -b 64 short, -np 4 short (six runs a load, the
    # tables on runs 1-3) and -np 4 long on the Xeon VM (item 52), -np 2 -b 64 long there
    # too (item 53), every decode pass priced at its own rows (item 54, --resimulate),
    # -np 4 short and long again with the split decode probe (item 55), the gap between
    # passes from every split shape (item 56, --resimulate), the runs' slots replayed in
    # the server's launch order (items 58-59, --resimulate), -np 2 -b 64 short and long
    # again on a host slower than at their profiles (item 60), -kvu short and long again
    # with the matrix reading the host itself (item 61), Table 1 charging the prompt
    # cache's save (item 63, --resimulate), -np 4 long and -kvu long again with the
    # prompt-cache probe in their profiles (item 64), -np 2 -b 64 short and long again so
    # (item 65), -np 4 short and -kvu short again so (item 66), -kvu long, -np 2 -b 64
    # long, -kvu short and -np 4 short again with the slots emptied before each run and
    # every point simulated with same-step releases given out lowest id first (item 67,
    # --resimulate), -np 2 -b 64 short and -np 4 long again so on an AMD EPYC VM whose
    # speed swung from one run to the next (item 68), -np 4 short, -kvu short and -np 2 -b
    # 64 long again so, their raw runs kept in docs/validation/points (item 69), -kvu long
    # again so, all six points' raw runs kept (item 70), -np 4 long again with lyra-simpy
    # speed --prompt before each run too (item 71), -np 4 short and -np 2 -b 64 long again
    # so (item 72), -np 2 -b 64 long and -np 4 short again with speed --prompt N --beside
    # NP-1 too (item 75), -np 2 -b 64 short, -kvu long and -kvu short again so (item 76),
    # -np 4 long again so (item 77), -np 4 short again with the beside reading's own
    # reference in its profile (item 78), -np 2 -b 64 short and -kvu short again so (item
    # 79), -np 2 -b 64 long again so (item 80), -np 4 long and -kvu long again so (item
    # 81), each with
    # a prompt's steps
    # as probe rows (item 13), the full-batch check (item 20) and Table 1 charging each
    # request's path (item 18); Tables 2 and 3 fitted on log errors (item 26); the last
    # column is compare --steps on each load's runs against Table 1's charge
    rows = _cells(ROOT / "docs" / "validation" / "llamacpp-matrix.json")
    assert [(r[0].strip("| `"), r[1]) for r in rows] == [
        (flags, reg)
        for flags in ("-np 4 -c 4096 -t 2", "-np 4 -c 4096 -t 2 -kvu", "-np 2 -c 4096 -t 2 -b 64")
        for reg in ("short", "long")
    ]
    assert _totals(rows) == [139, 166, 161]
    by = _by_point(rows)
    cells = {k: (v[2], v[4], v[6], v[8]) for k, v in by.items()}
    assert cells == {
        ("-np 4 -c 4096 -t 2", "short"): ("32 / 35", "23 / 35", "23 / 35", "0.95–1.02 |"),
        ("-np 4 -c 4096 -t 2", "long"): ("32 / 35", "33 / 35", "32 / 35", "1.03–1.06 |"),
        ("-np 4 -c 4096 -t 2 -kvu", "short"): ("18 / 35", "22 / 35", "18 / 35", "1.00–1.16 |"),
        ("-np 4 -c 4096 -t 2 -kvu", "long"): ("24 / 35", "28 / 35", "28 / 35", "0.95–1.02 |"),
        ("-np 2 -c 4096 -t 2 -b 64", "short"): ("29 / 35", "30 / 35", "29 / 35", "0.94–1.00 |"),
        ("-np 2 -c 4096 -t 2 -b 64", "long"): ("4 / 35", "30 / 35", "31 / 35", "0.86–0.95 |"),
    }
    assert by["-np 2 -c 4096 -t 2 -b 64", "long"][3] == "18 %"
    bands = validation_module("llamacpp_report").cells_by_steps(
        json.loads((ROOT / "docs" / "validation" / "llamacpp-matrix.json").read_text())["results"]
    )
    assert bands == {
        "within 3 %": [83, 91, 13],
        "3–6 %": [49, 63, 9],
        "beyond 6 %": [7, 56, 8],
    }
    # the README's sentence on them: each band's share of cells in target, and the steps
    # of the loads beyond 6 % (every one from the EPYC's points, 3 slow and 5 fast)
    results = json.loads((ROOT / "docs" / "validation" / "llamacpp-matrix.json").read_text())
    beyond = sorted(round(v["steps_vs_charge"]["decode"]["median"], 2)
                    for r in results["results"].values() for v in r["loads"].values()
                    if abs(v["steps_vs_charge"]["decode"]["median"] - 1) > 0.06)  # fmt: skip
    assert beyond == [0.86, 0.88, 0.91, 0.92, 0.94, 1.12, 1.15, 1.16]
    assert {r["hardware"] for r in results["results"].values()
            if any(abs(v["steps_vs_charge"]["decode"]["median"] - 1) > 0.06
                   for v in r["loads"].values())} == {"AMD EPYC (2 cores)"}  # fmt: skip
    share = [round(100 * n / cells) for n, cells, _ in bands.values()]
    readme = " ".join(
        (ROOT / "docs" / "llamacpp-fidelity.md").read_text().split()
    )  # (the README's account)
    assert (
        f"at the 13 loads whose real decode steps ran within 3 % of what the model charges, "
        f"{share[0]} % of the cells are in target, at the 9 between 3 and 6 % off {share[1]} %, "
        f"at the 8 beyond (3 slow, 1.12–1.16 ×, 5 fast, 0.86–0.94 ×) {share[2]} %"
    ) in readme
    # the headline of docs/VALIDATION-llamacpp.md: the same totals, ranges and shares, and
    # the cells at each phase's own speed on the published set's at-speed outputs
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    t1, t2, t3 = ([int(row[c].split()[0]) for row in by.values()] for c in (2, 4, 6))
    assert (
        f"Table 1 puts {min(t1)}–{max(t1)} inside the target (**{sum(t1)} of 210**), Table 2 "
        f"{min(t2)}–{max(t2)} ({sum(t2)}), Table 3, probes and one load run together, "
        f"{min(t3)}–{max(t3)} ({sum(t3)};"
    ) in doc
    assert (
        f"At the 13 loads whose steps ran within 3 % of the charge, Table 1 holds {share[0]} % "
        f"of the cells, at the 9 loads 3–6 % off {share[1]} %, at the 8 beyond (3 slow, "
        f"1.12–1.16 ×, 5 fast, 0.86–0.94 ×) {share[2]} %"
    ) in doc
    for item in (80, 79, 78, 77, 76, 75, 72, 71, 70):
        kept = ROOT / "docs" / "validation" / f"llamacpp-matrix-epyc-item{item}.json"
        earlier = json.loads(kept.read_text())["results"]
        was = validation_module("llamacpp_report").cells_by_steps(earlier).values()
        assert "on item {}'s set {} %, {} % and {} %".format(
            item, *(round(100 * n / cells) for n, cells, _ in was)) in doc  # fmt: skip
    phase = json.loads((ROOT / "docs" / "validation" / "llamacpp-at-speed-item81.json").read_text())
    per_point = _points_at_speed(phase, "phase", tuple(phase["phase"]["points"]))
    assert (sum(per_point.values()), min(per_point.values()), max(per_point.values())) == (
        187, 28, 34)  # fmt: skip
    assert "Table 1 holds **187 of 210**, 28–34 at every point (item 80's set 196, item 79's " \
           "198, item 78's 197, item 77's 196, item 76's 194, item 75's 192, item 72's " \
           "195, item 71's 194, item 70's 196)" in doc  # fmt: skip
    phase = json.loads((ROOT / "docs" / "validation" / "llamacpp-at-speed-item72.json").read_text())
    # read before each run on the three points with the prompt reading (items 71-72): both
    # phases, the full batch's reading alone, the lone one and the profile's speed
    both = json.loads((ROOT / "docs" / "validation" / "llamacpp-at-speed-phase-item72.json")
                      .read_text())["points"]  # fmt: skip
    three = tuple(both)
    figures = [sum(v["at_speed"]["in_target"] for p in three for v in both[p].values()),
               sum(_points_at_speed(phase, "speed-batch", three).values()),
               sum(_points_at_speed(phase, "speed", three).values()),
               sum(v["table1"]["in_target"] for p in three for v in both[p].values())]  # fmt: skip
    assert figures == [85, 89, 82, 64]
    assert "both phases give 85 of 105, the full batch's reading alone 89, the lone reading 82, " \
           "the profile's speed 64" in doc  # fmt: skip
    assert "both phases hold 85 of 105, the full batch's reading alone 89, the profile's speed " \
           "64" in readme  # fmt: skip


def test_item_29s_short_points_again() -> None:
    # item 29: -kvu short on a steady host (check passed first, every run inside the gate,
    # steps 0.94-0.99 x the charge) holds 32 of 35 from probes; -np 4 short's Poisson 0.6
    # ran 1.13 x (two runs after the gate gave up at 1.18-1.20), and Table 2, fitted on it,
    # charges the other loads' decode steps 9-17 % too much
    kept = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item29.json"
    results = json.loads(kept.read_text())["results"]
    kvu = results["kvu/short"]
    assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(kvu))
    steps = _decode_steps(kvu)
    assert steps == [0.98, 0.96, 0.96, 0.94, 0.99]
    assert sum(_inside(kvu).values()) == 32
    short = results["default/short"]
    late = sorted(round(x, 2) for x, _ in _gate_readings(short) if x > 1.1)
    assert late == [1.18, 1.2]
    steps = _decode_steps(short)
    assert steps == [1.02, 1.13, 1.02, 0.99, 0.98]
    t2 = [round(v["decode"]["median"], 2) for k, v in short["table2_charge"].items()
          if k != "poisson_0.6"]  # fmt: skip
    assert (min(t2), max(t2)) == (0.85, 0.91)

    # the prompt steps over the decode steps, by load (compare --steps medians)
    def over(point: str) -> list[float]:
        checks = [v["steps_vs_charge"] for v in results[point]["loads"].values()]
        return [round(c["prompt"]["median"] - c["decode"]["median"], 2) for c in checks]

    gap = {p: over(p) for p in ("default/short", "np2_b64/short", "kvu/short", "kvu/long")}
    assert min(gap["default/short"] + gap["np2_b64/short"]) == 0.04
    assert max(gap["default/short"] + gap["np2_b64/short"]) == 0.16
    assert (min(gap["kvu/short"] + gap["kvu/long"]), max(gap["kvu/short"] + gap["kvu/long"])) == (
        -0.06, 0.08)  # fmt: skip


def _worst_prompt_bin(results: dict, table: str, least_steps: int = 10) -> tuple[float, str]:
    """The fitted load's prompt range (of at least *least_steps* steps) whose real steps
    ran furthest from *table*'s charge (compare --steps), and its point."""
    return max(
        (abs(v["median"] - 1), f"{point} {size}")
        for point, res in results.items()
        for size, v in res[f"{table}_charge"]["poisson_0.6"]["prompt_by_tokens"].items()
        if v["steps"] >= least_steps
    )


def test_item_26s_log_loss_charges_every_prompt_range_of_the_fitted_load() -> None:
    # item 26: the same stored runs fitted with soft_l1 (item 25's set) and soft_l1_log
    # (published): one split step at -np 4 long put the prompts on the attention term and
    # charged 65-256-token prompts 1/1.85 of their time; in logs every range with ten
    # steps or more is charged within 3 % (Table 2) and 5 % (Table 3)
    stored = ROOT / "docs" / "validation"
    before = json.loads((stored / "llamacpp-matrix-epyc-item25.json").read_text())["results"]
    after = json.loads((stored / "llamacpp-matrix-epyc-item26.json").read_text())["results"]
    worst_before = _worst_prompt_bin(before, "table2")
    assert worst_before[1] == "default/long 65-256"
    assert 0.85 < worst_before[0] < 0.86
    assert _worst_prompt_bin(after, "table2")[0] < 0.03
    assert _worst_prompt_bin(after, "table3")[0] < 0.05
    assert _worst_prompt_bin(before, "table3")[0] > 0.85
    # Table 1 is untouched (its fit is the probes', soft_l1)
    for point in before:
        assert before[point]["loads"] == after[point]["loads"]
    # the fits of runs: the prompt's per-token cost back at -np 4 long
    runs = after["default/long"]["fits"]["runs"]
    assert before["default/long"]["fits"]["runs"]["per_prefill_token_ms"] < 1e-6
    assert 1.1 < runs["per_prefill_token_ms"] < 1.3


NP4, NP2 = "-np 4 -c 4096 -t 2", "-np 2 -c 4096 -t 2 -b 64"
KVU = NP4 + " -kvu"

KEPT_SETS = [
    # item 80's set (published until item 81; item 80's tests read it): -np 2 -b 64 long
    # again with the beside reading's own reference in its profile
    ("item80", [127, 163, 157], (NP4, "long"), (2, 4, 6), ("23 / 35", "32 / 35", "31 / 35")),
    # item 79's set (published until item 80; item 79's tests read it): -np 2 -b 64 short
    # and -kvu short again with the beside reading's own reference in their profiles
    ("item79", [139, 165, 157], (NP2, "long"), (2, 4, 6), ("16 / 35", "32 / 35", "31 / 35")),
    # item 78's set (published until item 79; item 78's tests read it): -np 4 short again
    # with the beside reading's own reference in its profile
    ("item78", [136, 165, 157], (KVU, "short"), (2, 4, 6), ("16 / 35", "26 / 35", "21 / 35")),
    # item 77's set (published until item 78; item 77's tests read it): -np 4 long again
    # with the prompt also read beside the decoders
    ("item77", [134, 170, 163], (NP4, "short"), (2, 4, 6), ("30 / 35", "28 / 35", "29 / 35")),
    # item 76's set (published until item 77; item 76's tests read it): -np 2 -b 64 short,
    # -kvu long and -kvu short again with the prompt also read beside the decoders
    ("item76", [135, 170, 164], (NP4, "long"), (2, 4, 6), ("24 / 35", "32 / 35", "32 / 35")),
    # item 75's set (published until item 76; item 75's tests read it): -np 2 -b 64 long and
    # -np 4 short again with the prompt also read beside the decoders before each run
    ("item75", [155, 179, 184], (NP2, "long"), (2, 4, 6), ("16 / 35", "32 / 35", "31 / 35")),
    # item 72's set (published until item 75; item 72's tests read it): -np 4 short and
    # -np 2 -b 64 long again with the prompt reading before each run
    ("item72", [149, 187, 189], (NP4, "short"), (2, 4, 6), ("24 / 35", "34 / 35", "31 / 35")),
    # item 71's set (published until item 72; item 71's tests read it): -np 4 long again
    # with the prompt reading before each run
    ("item71", [163, 178, 183], (NP4, "long"), (2, 4, 6), ("24 / 35", "32 / 35", "32 / 35")),
    # item 70's set (published until item 71; item 70's tests read it): -kvu long again on
    # the EPYC VM, packed, so that all six points are kept
    ("item70", [161, 171, 177], (NP4, "long"), (2, 4, 6), ("22 / 35", "25 / 35", "26 / 35")),
    # item 69's set (published until item 70; item 69's tests read it): -np 4 short, -kvu
    # short and -np 2 -b 64 long again on item 68's VM, packed
    ("item69", [164, 177, 181], (KVU, "long"), (2, 4, 6), ("32 / 35", "34 / 35", "33 / 35")),
    # item 68's set (published until item 69; item 68's tests read it): -np 2 -b 64 short
    # and -np 4 long again on a fresh AMD EPYC VM
    ("item68", [161, 181, 180], (NP2, "long"), (2, 4, 6), ("33 / 35", "32 / 35", "32 / 35")),
    # item 67's set (published until item 68; item 67's tests read it): -kvu long, -np 2
    # -b 64 long, -kvu short and -np 4 short again with the slots emptied before each run
    ("item67", [165, 179, 177], (NP2, "short"), (2, 4, 6), ("21 / 35", "27 / 35", "26 / 35")),
    # item 66's set (published until item 67; item 66's test reads it): -np 4 short and
    # -kvu short again with the prompt-cache probe in their profiles
    ("item66", [170, 174, 170], (KVU, "short"), (2, 4, 6), ("31 / 35", "33 / 35", "33 / 35")),
    # item 65's set (published until item 66; item 65's test reads it): -np 2 -b 64 short
    # and long again with the prompt-cache probe in their profiles
    ("item65", [158, 168, 161], (NP2, "short"), (2, 4, 6), ("21 / 35", "27 / 35", "26 / 35")),
    # item 64's set (published until item 65; item 64's test reads it): -np 4 long and
    # -kvu long again with the prompt-cache probe in their profiles
    ("item64", [158, 174, 167], (NP4, "long"), (2, 4, 6), ("30 / 35", "28 / 35", "28 / 35")),
    # item 63's set (published until item 64; item 63's tests read it): item 61's runs,
    # Table 1 charging the prompt cache's save
    ("item63", [160, 175, 168], (NP4, "long"), (2, 4, 6), ("34 / 35", "32 / 35", "32 / 35")),
    # item 61's set (published until item 63; item 61's tests read it): -kvu short and
    # long again with the matrix reading the host, before the prompt cache's save
    ("item61", [157, 175, 168], (KVU, "short"), (2, 4, 6), ("21 / 35", "27 / 35", "25 / 35")),
    # item 60's set (published until item 61; item 60's tests read it): -np 2 -b 64 short
    # and long again on a host slower than at their profiles
    ("item60", [168, 166, 162], (KVU, "short"), (2, 4, 6), ("31 / 35", "23 / 35", "20 / 35")),
    # item 59's set (published until item 60; items 59-60's tests read it): item 58's runs
    # and tables, requests sent together replayed in launch order
    ("item59", [172, 165, 163], (NP2, "short"), (2, 4, 6), ("22 / 35", "30 / 35", "30 / 35")),
    # item 58's set (published until item 59; item 58's test reads it): requests sent
    # together replayed in order of sending
    ("item58", [172, 165, 163], (NP4, "short"), (2, 4, 6), ("31 / 35", "33 / 35", "31 / 35")),
    # item 56's set (published until item 58; items 56-57's tests read it): the runs'
    # slots replayed in order of sending
    ("item56", [172, 165, 163], (NP4, "short"), (2, 4, 6), ("31 / 35", "33 / 35", "31 / 35")),
    # item 55's set (published until item 56; item 55's test reads it): -np 4 short and
    # long again with the split probe, the gap from rows of a sequence a pass
    ("item55", [172, 165, 164], (NP4, "short"), (2, 4, 6), ("31 / 35", "33 / 35", "32 / 35")),
    # item 54's set (published until item 55; item 54's test reads it): each decode pass
    # priced at its own rows, every point's runs item 53's
    ("item54", [159, 162, 163], (NP4, "short"), (2, 4, 6), ("32 / 35", "31 / 35", "32 / 35")),
    # item 53's set (published until item 54; item 53's test reads it): every point on the
    # Xeon VM, a decode step's passes priced with the step's rows
    ("item53", [158, 162, 162], (NP4, "short"), (2, 4, 6), ("31 / 35", "32 / 35", "32 / 35")),
    # item 52's set (published until item 53; item 52's test reads it): three points again
    # on the Xeon VM, -np 2 -b 64 long still item 43's
    ("item52", [163, 168, 168], (NP2, "long"), (2, 4, 6), ("31 / 35", "29 / 35", "29 / 35")),
    # item 50's set (published until item 52; item 50's test reads it): -np 4 short on the
    # quiet host
    ("item50", [171, 155, 155], (NP4, "short"), (2, 4, 6), ("23 / 35", "31 / 35", "30 / 35")),
    # item 49's set (published until item 50; item 49's test reads it): -kvu short with its
    # cells placed, -np 4 short still item 45's
    ("item49", [167, 153, 153], (KVU, "short"), (2, 4, 6), ("31 / 35", "23 / 35", "20 / 35")),
    # item 48's set (published until item 49; item 48's test reads it): -kvu long with its
    # KV cells placed, -kvu short still item 45's
    ("item48", [169, 162, 165], (KVU, "long"), (2, 4, 6), ("29 / 35", "24 / 35", "27 / 35")),
    # item 47's set (published until item 48; item 47's test reads it): -kvu long again,
    # its Table 1 with the cells packed
    ("item47", [161, 167, 166], (KVU, "long"), (2, 4, 6), ("21 / 35", "29 / 35", "28 / 35")),
    # item 46's set (published until item 47; item 46's test reads it): -np 4 long again,
    # -kvu long still item 42's
    ("item46", [166, 169, 168], (KVU, "long"), (2, 4, 6), ("26 / 35", "31 / 35", "30 / 35")),
    # item 45's set (published until item 46; item 45's test reads it): -np 4 short and -kvu
    # short again, the -np 2 -b 64 points item 43's, -np 4 long and -kvu long item 42's
    ("item45", [158, 177, 176], (NP4, "long"), (2, 4, 6), ("20 / 35", "30 / 35", "31 / 35")),
    # item 43's set (published until item 45; item 43's test reads it): the -np 2 -b 64
    # points and -kvu short with readings 6 probes long, the other three item 42's
    ("item43", [155, 179, 179], (KVU, "short"), (2, 4, 6), ("20 / 35", "33 / 35", "33 / 35")),
    # item 42's set (published until item 43; item 42's test reads it): five points with
    # lyra-simpy speed before every run, -np 2 -b 64 long item 41's
    ("item42", [160, 166, 171], (KVU, "short"), (2, 4, 6), ("32 / 35", "23 / 35", "27 / 35")),
    # item 41's set (published until item 42; item 41's test reads it): the -np 2 -b 64 and
    # -np 4 points in one pass, the -kvu points item 40's
    ("item41", [146, 144, 148], (NP4, "short"), (2, 4, 6), ("25 / 35", "29 / 35", "30 / 35")),
    # item 40's set (published until item 41; item 40's test reads it): -np 4 and -kvu in
    # one pass, the -np 2 -b 64 points still item 37's
    ("item40", [154, 153, 157], (NP4, "short"), (2, 4, 6), ("24 / 35", "34 / 35", "34 / 35")),
    # item 39's set (published until item 40; items 35-39's tests read it): every point
    # with --batch-before, -np 4 long and -kvu long last
    ("item39", [172, 163, 164], (NP4, "long"), (2, 4, 6), ("30 / 35", "26 / 35", "27 / 35")),
    # item 37's set (published until item 39; items 37-38's at-speed figures' set): -np 4
    # and -kvu long still item 34's
    ("item37", [177, 170, 171], (NP4, "long"), (2, 4, 6), ("33 / 35", "33 / 35", "33 / 35")),
    # item 36's set (published until item 37): the -np 2 -b 64 points still items 33-34's
    ("item36", [180, 175, 176], (NP2, "short"), (2, 4, 6), ("30 / 35", "32 / 35", "32 / 35")),
    # item 14's set: -np 2 -b 64 long from a profile that caught the host running two
    # sequences quick (item 15); its real decode steps ran up to 1.23 x the probe fit
    ("item14", [160, 153, 155], (NP2, "long"), (2, 8), ("15 / 35", "0.96–1.23 |")),
    # item 16's set (published until item 17): -np 2 -b 64 short with three runs started
    # after the gate gave up, 19 of 35 from probes
    ("item16", [175, 164, 167], (NP2, "short"), (2, 8), ("19 / 35", "1.05–1.16 |")),
    # item 17's set: Table 1 without the request path charged to the engine, 182 of 210
    # (`--resimulate --path-cpu-share 0` gives it again)
    ("item17", [182, 166, 169], (NP2, "short"), (2, 4, 6), ("26 / 35", "28 / 35", "28 / 35")),
    # item 19's set (published until item 20): -np 4 short from a profile that caught four
    # sequences quick, 19 of 35 from probes
    ("item19", [175, 157, 157], (NP4, "short"), (2, 4, 6), ("19 / 35", "20 / 35", "17 / 35")),
    # item 20's set: -np 4 short with the check; the other points as before
    ("item20", [183, 169, 171], (NP4, "short"), (2, 4, 6), ("27 / 35", "32 / 35", "31 / 35")),
    # item 21's set (published until item 22): -np 2 -b 64 with their runs before the check
    ("item21", [176, 173, 173], (NP2, "long"), (2, 8), ("30 / 35", "0.98–1.08 |")),
    # item 22's set (published until item 23): -np 2 -b 64 long from a profile and a check
    # both taken in a slow spell, 9 of 35 from probes
    ("item22", [156, 180, 176], (NP2, "long"), (2, 8), ("9 / 35", "0.81–0.93 |")),
    # item 23's set (published until item 25): every point again in the matrix's order
    ("item23", [131, 157, 159], (NP4, "short"), (2, 8), ("29 / 35", "0.99–1.10 |")),
    # item 25's set (published until item 26): Tables 2 and 3 fitted with soft_l1
    ("item25", [126, 146, 143], (NP4, "long"), (4, 6), ("21 / 35", "20 / 35")),
    # item 35's set (published until item 36): -kvu short still item 33's
    ("item35", [178, 177, 176], (NP4, "short"), (2, 4, 6), ("28 / 35", "33 / 35", "31 / 35")),
    # item 34's set (published until item 35): -np 4 short from a run 3-18 % slower than
    # its profile (item 33's), the long points again with the wake probe
    ("item34", [161, 169, 168], (NP4, "short"), (2, 4, 6), ("11 / 35", "25 / 35", "23 / 35")),
    # item 33's set (published until item 34): the long points still item 32's
    ("item33", [126, 165, 166], (NP4, "long"), (2, 4, 6), ("14 / 35", "29 / 35", "31 / 35")),
    # item 32's set (published until item 33): the three long points with the wander probe
    ("item32", [136, 161, 162], (NP4, "short"), (2, 4, 6), ("19 / 35", "22 / 35", "20 / 35")),
    # item 30's set (published until item 32): -np 4 long from item 25's steady run
    ("item30", [157, 154, 153], (NP4, "long"), (2, 4, 6), ("29 / 35", "29 / 35", "30 / 35")),
    # item 29's set (published until item 30): -np 4 short from a run whose second load
    # ran 13 % slow
    ("item29", [154, 141, 145], (NP4, "short"), (2, 4, 6), ("16 / 35", "9 / 35", "12 / 35")),
    # item 28's set (published until item 29): -kvu long again
    ("item28", [137, 142, 145], (KVU, "short"), (2, 4, 6), ("18 / 35", "27 / 35", "27 / 35")),
    # item 26's set (published until item 28): Tables 2 and 3 on log errors, -kvu long
    # from item 23's run
    (
        "item26",
        [126, 153, 155],
        (KVU, "long"),
        (2, 4, 6),
        ("16 / 35", "28 / 35", "28 / 35"),
    ),
]


@pytest.mark.parametrize(("item", "totals", "point", "columns", "cells"), KEPT_SETS,
                         ids=[k[0] for k in KEPT_SETS])  # fmt: skip
def test_each_earlier_matrix_is_kept(
    item: str, totals: list[int], point: tuple[str, str], columns: tuple[int, ...],
    cells: tuple[str, ...],
) -> None:  # fmt: skip
    rows = _cells(ROOT / "docs" / "validation" / f"llamacpp-matrix-epyc-{item}.json")
    assert _totals(rows) == totals
    row = _by_point(rows)[point]
    assert tuple(row[c] for c in columns) == cells


@functools.cache
def _points() -> Any:
    """``validation/llamacpp_points.py``, loaded once: :func:`_inside` reads it for each of
    4,000 points (loading it anew each time, and compiling it where Python writes no
    bytecode, took 16 s)."""
    return validation_module("llamacpp_points")


def _inside(point: dict) -> dict[tuple[str, str], bool]:
    """A stored point's Table 1 cells: (load, metric) -> inside the target (the matrix's
    own rule)."""
    matrix = _points()
    return {(load, r["metric"]): matrix.cell(r)[1] for load, v in point["loads"].items()
            for r in v["table"] if r["metric"] in matrix.METRICS}  # fmt: skip


def _run_again(kept: str, before: str, again: dict[str, tuple[str, int]]) -> dict:
    """The results of the matrix kept as *kept* (in docs/validation), whose points *again*
    were run again since *before* and the others are *before*'s: each point run again
    with (when it finished, Table 1's cells in target)."""
    validation = ROOT / "docs" / "validation"
    now, was = (json.loads((validation / f).read_text())["results"] for f in (kept, before))
    assert {p for p in now if now[p] != was[p]} == set(again)
    assert {p: (now[p]["finished"], sum(_inside(now[p]).values())) for p in again} == again
    return now


def _epyc_points_again(kept: str, before: str, again: dict[str, tuple[str, int]],
                       item: int) -> dict:  # fmt: skip
    """:func:`_run_again` for item *item*'s points run again on the AMD EPYC VM (items 68
    on): each on that host, every real run begun with its slots emptied
    (:func:`_all_settled`) and its host noise as the item's line logs it
    (:func:`_noise_as_kept`)."""
    now = _run_again(kept, before, again)
    assert {now[p]["hardware"] for p in again} == {"AMD EPYC (2 cores)"}
    _all_settled(now, again)
    _noise_as_kept(now, again, item)
    return now


def _noise_as_kept(now: dict, points: dict, item: int) -> None:
    """Each of *points*' ``host_noise`` median in the matrix *now* is the one its line for
    item *item* in ``llamacpp-host-noise.txt`` gives."""
    lines = (ROOT / "docs" / "validation" / "llamacpp-host-noise.txt").read_text().splitlines()
    noise = {x.split()[3]: x.split() for x in lines if f" item {item} " in x}
    assert {p: round(now[p]["host_noise"]["median_ms"]) for p in points} == {
        p: int(noise[p][9]) for p in points
    }


def _all_settled(now: dict, points: dict) -> None:
    """Every real run of each of *points* began with all its slots answered, highest id
    first (``--settle``)."""
    for p in points:
        slots = int(now[p]["flags"][now[p]["flags"].index("-np") + 1])
        settled = [m["settled"] for v in now[p]["loads"].values() for m in v["machine"]]
        assert settled == [list(range(slots - 1, -1, -1))] * 15


def _decode_steps(point: dict) -> list[float]:
    """A stored point's real decode steps over Table 1's charge, load by load (each load's
    median, two places)."""
    return [round(v["steps_vs_charge"]["decode"]["median"], 2) for v in point["loads"].values()]


def _prompt_steps(point: dict) -> list[float]:
    """:func:`_decode_steps` for the steps that carry prompt tokens."""
    return [round(v["steps_vs_charge"]["prompt"]["median"], 2) for v in point["loads"].values()]


def _save_probes(now: dict, points: dict) -> list[float]:
    """Each of *points*' prompt-cache probe in the matrix *now* (ms a token saved, four
    places)."""
    return [round(now[p]["prompt_save"]["ms_per_token"], 4) for p in points]


def _gate_readings(point: dict) -> list[tuple[float, int]]:
    """A stored point's real runs, in order: the gate's last probe over the speed the runs
    waited for, and the probes it took."""
    ref = point["gate"]["run_ref_ms"]
    return [(m["step_before"] / ref, m["gate_probes"])
            for v in point["loads"].values() for m in v["machine"]]  # fmt: skip


def _at_speed_totals(kept: dict, *ratios: str) -> dict[str, str]:
    """The last line of the table ``llamacpp_at_speed.py --ratio R`` prints (Table 1's
    cells in target and those at that speed, over every point) for each of *ratios* of a
    kept output."""
    at_speed = validation_module("llamacpp_at_speed")
    return {r: at_speed.report(kept[r]["points"], r)[-1] for r in ratios}


def _table1_as_published(stored: dict, results: dict) -> None:
    """Each load's Table 1 cells in a kept at-speed output (*stored*, one ratio's) are the
    matrix's own count of them in *results*."""
    for p, loads in stored["points"].items():
        for load, got in loads.items():
            assert got["table1"]["in_target"] == sum(
                ok for (lo, _), ok in _inside(results[p]).items() if lo == load
            )


def _at_speed_checked(file: Path, results: dict, table1: int, totals: dict[str, int]) -> dict:
    """A kept at-speed output (*file*): for each ratio of *totals*, its table's last line (Table 1
    *table1* cells in target, that many at that speed, of the points the ratio took) and
    its Table 1 cells as the matrix in *results* counts them, load by load; the output,
    for what else a test reads."""
    kept = json.loads(file.read_text())
    metrics = len(validation_module("llamacpp_points").METRICS)
    for r, n in totals.items():
        cells = metrics * sum(len(loads) for loads in kept[r]["points"].values())
        assert _at_speed_totals(kept, r) == {
            r: f"| all | | {table1} / {cells} | | {n} / {cells} | |"
        }
        _table1_as_published(kept[r], results)
    return kept


def _prompt_readings_kept(
    now: dict, points: dict, item: int
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, tuple[float, float]]]]:
    """Item *item*'s two prompt readings before each run of *points* (kept as
    ``llamacpp-at-speed-beside-itemN.json`` and ``-phase-itemN.json``), checked against the
    readings the matrix *now* stored: each point's Table 1 cells at each, and its loads'
    mean readings' bias and spread from the runs' prompt steps (llamacpp_at_speed.py's
    ``prompt_against_runs``)."""
    validation = ROOT / "docs" / "validation"
    at_speed = validation_module("llamacpp_at_speed")
    held, strays = {}, {}
    for name, ratio in (("beside", "speed-beside"), ("phase", "speed-phase")):
        kept = json.loads((validation / f"llamacpp-at-speed-{name}-item{item}.json").read_text())
        assert kept["ratio"] == ratio
        field = "speed_beside" if name == "beside" else "speed_prompt"
        for p in points:
            assert [v["prompt_ratio"] for v in kept["points"][p].values()] == [
                round(sum(m[field] for m in v["machine"]) / 3, 4)
                for v in now[p]["loads"].values()]  # fmt: skip
        held[name] = {p: sum(v["at_speed"]["in_target"] for v in kept["points"][p].values())
                      for p in points}  # fmt: skip
        strays[name] = {
            p: (round(b, 3), round(s, 3))
            for p, (b, s) in at_speed.prompt_against_runs(kept["points"], now).items()
        }
    return held, strays


def _readings_over_six(now: dict, again: dict, item: int, before: int) -> dict[str, dict[str, int]]:
    """Item *item*'s three readings before each run over all six points (kept as
    ``llamacpp-at-speed-{beside,phase,lone-beside}-itemN.json``): each point's Table 1
    cells at each; the points not in *again* are item *before*'s outputs unchanged."""
    validation = ROOT / "docs" / "validation"
    per_point = {}
    for name in ("beside", "phase", "lone-beside"):
        kept = json.loads((validation / f"llamacpp-at-speed-{name}-item{item}.json").read_text())
        earlier = json.loads(
            (validation / f"llamacpp-at-speed-{name}-item{before}.json").read_text()
        )
        others = set(now) - set(again)
        assert {p: kept["points"][p] for p in others} == {p: earlier["points"][p] for p in others}
        per_point[name] = {p: sum(v["at_speed"]["in_target"] for v in loads.values())
                           for p, loads in kept["points"].items()}  # fmt: skip
    return per_point


def _six_at_speed(sets: dict, now: dict) -> dict[str, int]:
    """Table 1's cells over every point of the matrix *now* in a kept set at the speeds read
    (*sets*): at the full batch's reading, at the lone one and with each phase at the runs'
    own median ratio, and at the profile's speed."""
    out = {r: sum(_points_at_speed(sets, r, tuple(now)).values())
           for r in ("speed-batch", "speed", "phase")}  # fmt: skip
    out["profile"] = sum(sum(_inside(now[p]).values()) for p in now)
    return out


def _archived_beside(point: str, decoders: int, tokens: int) -> tuple[list[dict], dict[str, float]]:
    """*point*'s archive (``docs/validation/points``): its kept beside readings, and its
    profile's mixed rows of a prompt of *tokens* beside *decoders*, the prompt's steps
    summed by the decoders' context (ms; the rows ``speed --beside`` falls back on)."""
    validation = ROOT / "docs" / "validation"
    index = json.loads((validation / "points" / "index.json").read_text())
    with tarfile.open(validation / "points" / index[point]["file"]) as tar:
        kept = [json.load(tar.extractfile(n)) for n in tar.getnames() if n.endswith("-beside.json")]
        profile = tar.extractfile(f"{point.replace('/', '_')}/profile.csv")
        assert profile is not None
        rows = [r.split(",") for r in profile.read().decode().splitlines()]
    col = {name: k for k, name in enumerate(rows[0])}
    sums: dict[str, float] = {}
    for r in rows[1:]:
        if (r[0], r[1], r[col["prompt_tokens"]]) == ("mixed", str(decoders), str(tokens)):
            ctx = r[col["context_len"]]
            sums[ctx] = sums.get(ctx, 0.0) + float(r[col["latency_ms"]])
    return kept, sums


READINGS = ("speed_batch", "speed_lone", "speed_beside", "speed_prompt")
"""The readings ``lyra-simpy speed`` took before each real run (``--speed-before``)."""


def _reading_spans(point: dict, fields: tuple[str, ...] = READINGS
                   ) -> dict[str, tuple[float, float]]:  # fmt: skip
    """The lowest and the highest of each reading *fields* taken before a stored point's
    real runs."""
    return {f: (min(got), max(got)) for f in fields
            for got in [[m[f] for v in point["loads"].values() for m in v["machine"]]]}  # fmt: skip


def _kept_against_reference(now: dict, point: str, decoders: int, tokens: int
                            ) -> tuple[list[dict], dict[str, float]]:  # fmt: skip
    """:func:`_archived_beside` for a *point* whose archive holds the runs of the matrix
    *now*: its 15 kept beside readings, each taken against the profile's own beside
    reference (item 78 on), and the pair's rows summed by the decoders' context."""
    index = json.loads((ROOT / "docs" / "validation" / "points" / "index.json").read_text())
    assert index[point]["finished"] == now[point]["finished"]
    kept, sums = _archived_beside(point, decoders, tokens)
    assert len(kept) == 15
    ref = now[point]["gate"]["speed_reference"]["beside"]["median_ms"]
    assert {(r["against"], r["profile_ms"]) for r in kept} == {("beside reference", ref)}
    return kept, sums


def _set_at_speed(
    item: str,
    matrix: str,
    table1: tuple[int, dict[str, int]],
    strays: dict[str, list[float]],
    bands: dict[str, dict[str, int]],
) -> dict:
    """A kept set at the speeds read (``llamacpp-at-speed-ITEM.json``) against the matrix
    kept as *matrix*: Table 1's cells at the profile's speed and at each ratio's
    (*table1*, :func:`_at_speed_checked`); the lone and the full batch's readings' bias
    and spread from each load's mean step, and each load's mean step from its point's
    level (*strays*); the bands' totals (*bands*: ``--wander`` plus a key's flags, a
    ratio's name meaning ``--at-speed RATIO --wander --session``). The kept output."""
    validation = ROOT / "docs" / "validation"
    results = json.loads((validation / matrix).read_text())["results"]
    kept = _at_speed_checked(validation / f"llamacpp-at-speed-{item}.json", results, *table1)
    at_speed = validation_module("llamacpp_at_speed")
    got = {r: [round(e, 3) for e in at_speed.against_mean(kept[r]["points"], results)]
           for r in ("speed", "speed-batch")}  # fmt: skip
    got["level"] = [round(at_speed.point_level(results, list(results)), 3)]
    assert got == strays
    printed = kept["noise_printed"]["by_flags"]
    flags = {k: f"--at-speed {k} --wander --session" if k in kept else f"--wander{k}"
             for k in bands}  # fmt: skip
    assert {k: _band_totals(printed[f]) for k, f in flags.items()} == bands
    return kept


def _points_at_speed(kept: dict, ratio: str, points: tuple[str, ...]) -> dict[str, int]:
    """Each of *points*' Table 1 cells in target at *ratio*'s speed in a kept output."""
    loads = kept[ratio]["points"]
    return {p: sum(v["at_speed"]["in_target"] for v in loads[p].values()) for p in points}


def _skew(kept: dict) -> list[float]:
    """Each load's mean real decode step over its median one (a kept output's ``mean``
    ratio over its ``runs`` ratio)."""
    mean, median = kept["mean"]["points"], kept["runs"]["points"]
    return [mean[p][load]["ratio"] / v["ratio"] for p, loads in median.items()
            for load, v in loads.items()]  # fmt: skip


def _charged_against_not(point: dict, share0: str) -> tuple[int, int]:
    """Table 1's cells in target on -np 4 short's runs without the request path charged
    (``--resimulate --path-cpu-share 0``, stored apart as *share0*) and with it (*point*);
    charging it loses none, and Table 2 is the same."""
    plain = json.loads((ROOT / "docs" / "validation" / share0).read_text())
    plain = plain["results"]["default/short"]
    a, b = _inside(plain), _inside(point)
    assert all(b[k] for k in a if a[k])  # nothing lost
    assert plain["table2"] == point["table2"]
    return sum(a.values()), sum(b.values())


def test_charging_the_request_path_moves_only_table_1s_ten_cells() -> None:
    # item 18: the same profiles and runs; Tables 2 and 3 untouched, Table 1 gains eight
    # cells and loses two, both at -kvu short
    stored = ROOT / "docs" / "validation"
    before = json.loads((stored / "llamacpp-matrix-epyc-item17.json").read_text())["results"]
    after = json.loads((stored / "llamacpp-matrix-epyc-item18.json").read_text())["results"]
    assert _totals(_cells(stored / "llamacpp-matrix-epyc-item18.json")) == [188, 166, 169]
    moved = []
    for key, res in after.items():
        assert res["table2"] == before[key]["table2"]
        assert res["table3"] == before[key]["table3"]
        was, now = _inside(before[key]), _inside(res)
        moved += [(key, load, m, ok) for (load, m), ok in now.items() if ok != was[load, m]]
    assert len(moved) == 10
    assert sorted((k, load, m) for k, load, m, ok in moved if not ok) == [
        ("kvu/short", "poisson_0.6", "p90_ttft_ms"),
        ("kvu/short", "poisson_0.9", "median_ttft_ms"),
    ]
    assert {k for k, _, _, ok in moved if ok} == {"default/short", "np2_b64/short"}


def test_the_xeon_hosts_whole_run_is_kept() -> None:
    # the matrix the README showed before item 14: the Xeon's whole run of 2026-12-02
    # (items 8-10), whole-prompt mixed probe rows
    stored = ROOT / "docs" / "validation" / "llamacpp-matrix-xeon.json"
    rows = _cells(stored)
    totals = _totals(rows)
    assert totals == [153, 157, 153]


def test_no_server_state_slows_a_busy_minus_np_2_server() -> None:
    # docs/VALIDATION-llamacpp.md item 14 (validation/llamacpp_after_load.py): requests
    # waiting in the queue leave the running ones' decode step within 10 %, and a lone
    # request right after 40 s of load is not the 1.11-1.19 x the matrix's gate read
    text = (ROOT / "docs" / "validation" / "llamacpp-after-load-epyc.txt").read_text()
    queued = [line for line in text.splitlines() if "queued" in line]
    assert len(queued) == 2
    for line in queued:
        medians = [float(c.split(" queued ")[1].split()[0]) for c in line.split("; ")]
        assert max(medians) / min(medians) < 1.1
    for line in (x for x in text.splitlines() if "lone request" in x):
        lists = [json.loads("[" + part.split("]")[0] + "]") for part in line.split("[")[1:]]
        before, after = (float(np.median(v)) for v in lists[:2])
        assert after / before < 1.08, line


def test_the_readmes_fidelity_table_is_the_published_matrixs_summary() -> None:
    # issue 12: the README's error table is the matrix's summary (its header reworded)
    rows = _summary(ROOT / "docs" / "validation" / "llamacpp-matrix.json")
    readme = (ROOT / "README.md").read_text().splitlines()
    at = readme.index(rows[0])
    assert readme[at : at + len(rows)] == rows
    assert readme[at - 2].startswith("| server flags | requests | from probes")
    # the sentences below it: the totals, each point's range from probes and its median
    # p50 error, and when the last point finished
    cells = _by_point(_cells(ROOT / "docs" / "validation" / "llamacpp-matrix.json")).values()
    t1, t2, t3 = ([int(row[c].split()[0]) for row in cells] for c in (2, 4, 6))
    p50 = [int(row[3].rstrip(" %")) for row in cells]
    text = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert (
        f"**The target is not met: {sum(t1)} of 210 cells from probes, {sum(t2)} from one load "
        f"run, {sum(t3)} from both**"
    ) in text
    assert (
        f"The points hold {min(t1)}–{max(t1)} of 35 from probes, with a median p50 error of "
        f"{min(p50)}–{max(p50)} %"
    ) in text
    published = json.loads((ROOT / "docs" / "validation" / "llamacpp-matrix.json").read_text())
    last = max(r["finished"] for r in published["results"].values())
    noise = (ROOT / "docs" / "validation" / "llamacpp-host-noise.txt").read_text().splitlines()
    first = min(x.split()[1][:5] for x in noise if " item 68 " in x)  # (the EPYC's first run)
    assert f"2026-12-06 {first}–{last.split()[0]} {last.split()[1]} UTC, items 68–81" in text


def test_the_gate_at_both_ends_run_is_stored_apart() -> None:
    # docs/VALIDATION-llamacpp.md item 14: -np 2 -b 64 short with --gate-after 2; 22 tries
    # set aside, 7 kept runs still out of band afterwards, the busy loads' steps slow
    stored = ROOT / "docs" / "validation" / "llamacpp-np2-b64-short-gate-after.json"
    row = _cells(stored)[0]
    assert (row[2], row[4], row[6], row[8]) == ("17 / 35", "15 / 35", "15 / 35", "1.02–1.16 |")
    res = json.loads(stored.read_text())["results"]["np2_b64/short"]
    machine = [m for v in res["loads"].values() for m in v["machine"]]
    assert sum(len(m["out_of_band"]) for m in machine) == 22
    assert all(len(m["out_of_band"]) <= 2 for m in machine)
    # the README's "still ran 12-16 % slow": the busy loads' decode steps over the fit
    busy = [round(res["loads"][k]["steps_vs_fit"]["decode_p50"], 2)
            for k in ("poisson_0.9", "closed_4", "closed_8")]  # fmt: skip
    assert (min(busy), max(busy)) == (1.12, 1.16)


def test_item_19s_fresh_run_charged_and_not() -> None:
    # item 19: -np 4 short run afresh; on its runs Table 1 holds 19 with the path charged
    # (published) and 15 without (stored apart), four cells in and none out; its profile's
    # capacity 2.99 -> 3.16 req/s, and Poisson 0.9 overloaded the real server (2.48-2.83
    # req/s served of 2.84 offered)
    stored = ROOT / "docs" / "validation"
    charged = json.loads((stored / "llamacpp-matrix-epyc-item19.json").read_text())["results"]
    charged = charged["default/short"]
    assert _charged_against_not(charged, "llamacpp-default-short-item19-share0.json") == (15, 19)
    before = json.loads((stored / "llamacpp-matrix-epyc-item18.json").read_text())
    assert round(before["results"]["default/short"]["capacity_req_s"], 2) == 2.99
    assert round(charged["capacity_req_s"], 2) == 3.16
    table = {r["metric"]: r for r in charged["loads"]["poisson_0.9"]["table"]}
    served = table["request_throughput"]["runs"]
    assert (round(min(served), 2), round(max(served), 2)) == (2.48, 2.83)
    seen = _gate_readings(charged)
    assert sum(abs(x - 1) <= 0.05 for x, _ in seen) == 14  # one 6 % off, after 7 probes
    late = [n for x, n in seen if abs(x - 1) > 0.05]
    assert (late, round(max(abs(x - 1) for x, _ in seen), 2)) == ([7], 0.06)


def test_item_20s_full_batch_check_and_fresh_run() -> None:
    # item 20: -np 4 short with the full-batch check: three profiles (41.5 vs 38.4 and
    # 38.0 vs 41.3 off the 5 % gate in opposite directions, 38.4 vs 38.9 kept); every run
    # inside the gate; capacity 3.32 req/s, Poisson 0.9 (2.98 offered) served 3.04-3.50;
    # Table 1 27 with the path charged against 22 without, five in and none out
    stored = ROOT / "docs" / "validation"
    kept = json.loads((stored / "llamacpp-matrix-epyc-item22.json").read_text())  # item 23 on
    point = kept["results"]["default/short"]
    gate = point["gate"]
    assert [(c["profile_ms"], c["check_ms"]) for c in gate["batch_check"]] == [
        (41.5, 38.4), (38.0, 41.3), (38.4, 38.9)
    ]  # fmt: skip
    assert len(gate["superseded"]) == 2
    assert gate["run_ref_ms"] == 16.199  # the kept profile's speed reference (item 19: 18.0)
    seen = _gate_readings(point)
    assert len(seen) == 15
    assert round(max(abs(x - 1) for x, _ in seen), 3) == 0.043
    assert round(point["capacity_req_s"], 2) == 3.32
    assert round(0.9 * point["capacity_req_s"], 2) == 2.98
    table = {r["metric"]: r for r in point["loads"]["poisson_0.9"]["table"]}
    served = table["request_throughput"]["runs"]
    assert (round(min(served), 2), round(max(served), 2)) == (3.04, 3.5)
    assert _charged_against_not(point, "llamacpp-default-short-item20-share0.json") == (22, 27)
    # the simulator quick at Poisson 0.6
    misses = sorted(k for k, ok in _inside(point).items() if not ok)
    assert [m for load, m in misses if load == "poisson_0.6"] == [
        "median_e2el_ms", "p90_e2el_ms", "p90_tpot_ms", "p90_ttft_ms"
    ]  # fmt: skip
    assert len(misses) == 8


def test_item_21s_full_batch_checks_at_the_next_points() -> None:
    # item 21: -np 4 long, -kvu short and -kvu long with the check, each retaken once; of
    # the nine profiles read at the four points checked, five off by 5.4-9.7 % both ways;
    # at each point 14 of 15 runs inside the gate, one 5-15 % off after 7 probes
    stored = ROOT / "docs" / "validation"
    kept = stored / "llamacpp-matrix-epyc-item22.json"  # (published until item 23)
    results = json.loads(kept.read_text())["results"]
    checks = {k: [(c["profile_ms"], c["check_ms"]) for c in results[k]["gate"]["batch_check"]]
              for k in ("default/short", "default/long", "kvu/short", "kvu/long")}  # fmt: skip
    assert checks["default/long"] == [(43.2, 39.0), (40.5, 40.3)]
    assert checks["kvu/short"] == [(39.2, 41.3), (40.0, 39.8)]
    assert checks["kvu/long"] == [(45.3, 42.8), (42.2, 42.5)]
    off = sorted(abs(c / r - 1) for v in checks.values() for r, c in v if abs(c / r - 1) > 0.05)
    assert (len(off), round(off[0], 3), round(off[-1], 3)) == (5, 0.054, 0.097)
    assert sum(len(v) for v in checks.values()) == 9
    for key, worst in (("default/long", 1.148), ("kvu/short", 1.134), ("kvu/long", 1.051)):
        seen = _gate_readings(results[key])
        late = [(round(x, 3), n) for x, n in seen if abs(x - 1) > 0.05]
        assert (len(seen), late) == (15, [(worst, 7)])


def test_item_22s_slow_profile_the_check_kept() -> None:
    # item 22: -np 2 -b 64 short and long with the check, each retaken once; long's kept
    # profile and its check both slow (33.9 / 32.9 ms), its runs' two-sequence steps then
    # 26.7-32.5 ms, six of 15 runs started after the gate gave up with the host 11-27 %
    # quick, and Table 1 priced every step slow (p50 TPOT +21 to +32 % from Poisson 0.6)
    stored = ROOT / "docs" / "validation"
    kept = stored / "llamacpp-matrix-epyc-item22.json"  # (published until item 23)
    results = json.loads(kept.read_text())["results"]
    checks = {k: [(c["profile_ms"], c["check_ms"]) for c in results[k]["gate"]["batch_check"]]
              for k in ("np2_b64/short", "np2_b64/long")}  # fmt: skip
    assert checks == {"np2_b64/short": [(28.8, 30.6), (29.3, 29.5)],
                      "np2_b64/long": [(29.9, 32.6), (33.9, 32.9)]}  # fmt: skip
    seen = _gate_readings(results["np2_b64/long"])
    late = sorted(round(x, 3) for x, n in seen if abs(x - 1) > 0.05 and n == 7)
    assert (len(seen), len(late), late[0], late[-1]) == (15, 6, 0.727, 0.887)
    short_late = [(round(x, 3), n) for x, n in _gate_readings(results["np2_b64/short"])
                  if abs(x - 1) > 0.05]  # fmt: skip
    assert short_late == [(0.868, 7)]
    long = results["np2_b64/long"]["loads"]
    tpot = {load: round(100 * r["error"], 1) for load, v in long.items() for r in v["table"]
            if r["metric"] == "median_tpot_ms"}  # fmt: skip
    assert tpot == {"poisson_0.3": 4.8, "poisson_0.6": 20.9, "poisson_0.9": 27.9,
                    "closed_4": 24.0, "closed_8": 31.8}  # fmt: skip
    text = (stored / "llamacpp-by-batch-item22.txt").read_text()
    two = [float(m) for m in re.findall(r"b2/p1 ([\d.]+)", text.split("np2_b64_long:")[1])]
    assert two[0] == 33.9  # the profile's row
    assert (min(two[1:]), max(two[1:])) == (26.7, 32.5)


def test_item_23s_round_the_errors_follow_the_steps() -> None:
    # item 23: every point again in order; the check agreed with the first profile at the
    # four -np 4 points and took three at each -np 2 -b 64 point; runs outside the gate
    # 0, 3, 5, 0, 0, 5 of 15; compare --steps on each load against Table 1's charge: at
    # the 13 loads whose decode steps ran within 3 % of it Table 1 holds 69 of 91 cells,
    # within 3-6 % 38 of 49, beyond 6 % 24 of 70 (-kvu short's Poisson 0.9 1.18: 0 of 7)
    matrix = validation_module("llamacpp_points")
    kept = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item23.json"  # (until item 25)
    results = json.loads(kept.read_text())["results"]
    checks = {k: [(c["profile_ms"], c["check_ms"]) for c in r["gate"]["batch_check"]]
              for k, r in results.items()}  # fmt: skip
    assert checks["default/short"] == [(38.7, 40.4)]
    assert checks["kvu/long"] == [(37.0, 35.2)]
    assert checks["np2_b64/short"] == [(28.7, 30.5), (28.3, 29.7), (28.6, 29.1)]
    assert checks["np2_b64/long"] == [(30.1, 25.1), (26.1, 24.6), (27.6, 26.9)]
    outside = {k: sum(abs(x - 1) > 0.05 for x, _ in _gate_readings(r))
               for k, r in results.items()}  # fmt: skip
    assert outside == {"default/short": 0, "default/long": 3, "kvu/short": 5, "kvu/long": 0,
                       "np2_b64/short": 0, "np2_b64/long": 5}  # fmt: skip
    bands = validation_module("llamacpp_report").cells_by_steps(results)
    assert bands == {"within 3 %": [69, 91, 13], "3–6 %": [38, 49, 7],
                     "beyond 6 %": [24, 70, 10]}  # fmt: skip
    worst = results["kvu/short"]["loads"]["poisson_0.9"]
    assert round(worst["steps_vs_charge"]["decode"]["median"], 2) == 1.18
    assert not any(matrix.cell(r)[1] for r in worst["table"] if r["metric"] in matrix.METRICS)
    # the prompt steps over the decode steps, load by load: rising with load at the long
    # points with per-slot KV, 0.95-1.10 elsewhere (item 24: the host)
    ratio = {k: [round(v["steps_vs_charge"]["prompt"]["median"]
                       / v["steps_vs_charge"]["decode"]["median"], 2)
                 for v in r["loads"].values()] for k, r in results.items()}  # fmt: skip
    assert ratio["default/long"] == [1.01, 1.07, 1.06, 1.1, 1.08]
    assert ratio["np2_b64/long"] == [1.05, 1.09, 1.1, 1.12, 1.13]
    rest = [x for k, v in ratio.items() if k not in ("default/long", "np2_b64/long") for x in v]
    assert (min(rest), max(rest)) == (0.95, 1.1)


def test_the_profilers_own_arrivals_cost_less_than_the_path() -> None:
    # item 18: the step a probe request arrived in, less the trial's decode step
    # (item 13's stored trials): -0.1 to 6.2 ms, median 1.1, under the 4.66 ms path
    doc = json.loads((ROOT / "docs" / "validation" / "llamacpp-mixed-steps-epyc.json").read_text())
    extra = [t["around_ms"][0] - t["decode_ms"] for ts in doc["trials"].values() for t in ts]
    assert len(extra) == 8
    assert (round(min(extra), 1), round(max(extra), 1)) == (-0.1, 6.2)
    assert round(float(np.median(extra)), 1) == 1.1


def test_the_arrival_steps_item_18_quotes_are_stored() -> None:
    # item 18: on item 18's runs (llamacpp_steps.py --arrivals, stored) decode steps with a
    # request sent during them ran 0.98-1.24 x the fit, 0.06-0.28 above the other decode
    # steps of the same load at all 22 loads that had them (those 0.86-1.15)
    text = (ROOT / "docs" / "validation" / "llamacpp-arrivals-epyc-item18.txt").read_text()
    found = re.findall(r"decode ([\d.]+) \(\d+\)\s+decode\+arrival ([\d.]+) \(", text)
    pairs = [(float(a), float(b)) for a, b in found]
    assert len(pairs) == 22
    assert (min(b for _, b in pairs), max(b for _, b in pairs)) == (0.98, 1.24)
    gaps = [round(b - a, 2) for a, b in pairs]
    assert (min(gaps), max(gaps)) == (0.06, 0.28)
    others = [float(a) for a in re.findall(r"  decode ([\d.]+) \(", text)]
    assert (min(others), max(others)) == (0.86, 1.15)


def test_each_points_request_path_is_stored() -> None:
    # item 18 and the README: the profiles' paths, 3.9-5.2 ms in item 22's set (-np 4
    # short's: item 18's 4.66, item 19's 5.32, item 20's 5.2; -np 2 -b 64 short's item
    # 22's 3.85)
    stored = ROOT / "docs" / "validation"
    results = json.loads((stored / "llamacpp-matrix-epyc-item22.json").read_text())["results"]
    paths = {k: r["request_path_ms"] for k, r in results.items()}
    assert (min(paths.values()), max(paths.values())) == (3.85, 5.2)
    assert paths["default/short"] == 5.2
    item19 = json.loads((stored / "llamacpp-matrix-epyc-item19.json").read_text())["results"]
    assert item19["default/short"]["request_path_ms"] == 5.32
    before = json.loads((stored / "llamacpp-matrix-epyc-item18.json").read_text())["results"]
    assert before["default/short"]["request_path_ms"] == 4.66
    long = [p for k, p in paths.items() if k.endswith("/long")]
    assert (min(long), max(long)) == (4.39, 4.97)


def test_item_24s_long_prompt_beside_running_requests_is_the_host() -> None:
    # item 24 (llamacpp_steps.py --chunks): -np 2 -b 64 long's steps of one 63-token chunk
    # beside one decoder took the profile's time at Poisson 0.3 and slowed load by load,
    # more than the two-sequence decode steps did
    stored = ROOT / "docs" / "validation"
    text = (stored / "llamacpp-chunks-item24.txt").read_text().splitlines()
    by_load = {line.split()[0]: line for line in text[2:]}
    assert list(by_load) == ["poisson_0.3", "poisson_0.6", "poisson_0.9", "closed_4", "closed_8"]

    def place(load: str, k: int) -> float:
        return float(re.search(rf"c{k} (\d+) \(", by_load[load])[1])  # type: ignore[index]

    def decode(load: str) -> float:
        return float(re.search(r"decode b2 ([\d.]+)", by_load[load])[1])  # type: ignore[index]

    assert [place("poisson_0.3", k) for k in range(4)] == [107, 111, 117, 123]
    assert "c0 [98, 103, 104, 105]" in text[1]
    closed = [place(load, k) / place("poisson_0.3", k)
              for load in ("closed_4", "closed_8") for k in range(3)]  # fmt: skip
    assert (round(min(closed), 2), round(max(closed), 2)) == (1.15, 1.25)
    assert (decode("poisson_0.3"), decode("closed_4"), decode("closed_8")) == (25.5, 29.0, 29.5)
    # llamacpp_mixed_steps.py --alone: on the same minutes a prompt costs the same alone
    # and beside one decoder, less the decoder's share; --trace: the checkpoint copied in
    # a prompt's last step, 2.9 MiB at 196 tokens and 5.8 at 396, 0.35-0.45 ms and 3.6-4.6
    np4 = json.loads((stored / "llamacpp-mixed-steps-long-np4-item24.json").read_text())
    alone = [t["alone_prompt_ms"] for t in np4["trials"]["400"]]
    beside = [t["prompt_ms"] for t in np4["trials"]["400"]]
    assert (round(float(np.median(alone))), round(float(np.median(beside)))) == (621, 632)
    np2 = json.loads((stored / "llamacpp-mixed-steps-long-np2-b64-item24.json").read_text())
    last = {p: [t["steps_ms"][-1] for t in ts] for p, ts in np2["trials"].items()}
    assert (round(min(last["400"])), round(max(last["400"]))) == (36, 48)
    copies: dict[int, list[float]] = {}
    for c in np2["checkpoints"]:
        copies.setdefault(c["tokens"], []).append(c["copy_ms"])
    assert {c["tokens"]: c["mib"] for c in np2["checkpoints"]}[396] == 5.806
    quick = [round(x, 2) for x in copies[196] if x < 1.0]
    assert (len(quick), len(copies[196]), min(quick), max(quick)) == (16, 18, 0.35, 0.45)
    assert (round(min(copies[396]), 1), round(max(copies[396]), 1)) == (3.6, 4.6)
    assert max(m["ms"] for m in np2["samplers"]) <= 0.06


def test_the_trace_reader_times_each_checkpoint_copy() -> None:
    # llamacpp_mixed_steps.py --trace: a checkpoint's copy is from the server's decision
    # (main/do_checkpoint = yes) to its "created" line, per task, across a minute's end
    mixed = validation_module("llamacpp_mixed_steps")
    log = "\n".join([
        "0.59.999.500 D slot   operator(): id  0 | task 7 | main/do_checkpoint = yes, pos_min = 0",
        "0.59.999.600 D srv    operator(): http: streamed chunk: data: {}",
        "1.00.003.100 I slot create_check: id  0 | task 7 | created context checkpoint 2 of 32 "
        "(pos_min = 0, pos_max = 395, n_tokens = 396, size = 5.806 MiB)",
        "1.00.010.000 I slot init_sampler: id  1 | task 9 | init sampler, took 0.05 ms, "
        "tokens: text = 400, total = 400",
        "1.00.010.100 I slot create_check: id  1 | task 9 | created context checkpoint 1 of 32 "
        "(pos_min = 0, pos_max = 9, n_tokens = 10, size = 0.1 MiB)",
    ])  # fmt: skip
    got = mixed.traced(log)
    assert len(got["checkpoints"]) == 1  # task 9's has no decision line: not timed
    c = got["checkpoints"][0]
    assert (c["tokens"], c["mib"], round(c["copy_ms"], 3)) == (396, 5.806, 3.6)
    assert got["samplers"] == [{"prompt": 400, "ms": 0.05}]


def test_item_25s_np4_points_again() -> None:
    # item 25: -np 4 long's host held still (its check passed first, every run inside the
    # gate, decode steps 0.99-1.04 x Table 1's charge at every load): 29 of 35 from
    # probes; -np 4 short's profile was retaken twice and its busy loads ran 10-19 % quick
    # (steps 0.89-0.93): 17; over the published set Table 1 holds 84 of 105 cells at the
    # 15 loads whose steps ran within 3 % of its charge and 24 of 77 at the 11 beyond 6 %
    # (item 25's set, kept)
    stored = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item25.json"
    results = json.loads(stored.read_text())
    results = results["results"]
    long, short = results["default/long"], results["default/short"]
    assert [(c["profile_ms"], c["check_ms"]) for c in long["gate"]["batch_check"]] == [
        (34.3, 35.4)
    ]  # fmt: skip
    assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(long))
    steps = _decode_steps(long)
    assert steps == [1.01, 1.01, 1.0, 0.99, 1.04]
    assert sum(_inside(long).values()) == 29
    assert len(short["gate"]["batch_check"]) == 3
    quick = sorted(round(x, 2) for x, _ in _gate_readings(short) if abs(x - 1) > 0.05)
    assert quick == [0.81, 0.86, 0.88, 0.9]
    steps = _decode_steps(short)
    assert steps == [1.0, 1.08, 0.93, 0.93, 0.89]
    bands = validation_module("llamacpp_report").cells_by_steps(results)
    assert bands == {"within 3 %": [84, 105, 15], "3–6 %": [18, 28, 4],
                     "beyond 6 %": [24, 77, 11]}  # fmt: skip


def test_item_25s_fit_from_runs_halves_200_token_prompts() -> None:
    # item 25: compare --steps by prompt tokens at -np 4 long: Tables 2 and 3 (fitted on
    # Poisson 0.6's runs, alone and with the probes) charge prompts of 65-256 tokens at
    # 1/1.75-1/1.87 of their time at every load and longer ones within 5 %; Table 1
    # 1.00-1.10 in every range. Their fits carry no per-token prompt cost. (Item 25's set,
    # kept; item 26's log loss, kept, charges both ranges within 6 % at every load.)
    stored = ROOT / "docs" / "validation"
    results = json.loads((stored / "llamacpp-matrix-epyc-item25.json").read_text())
    long = results["results"]["default/long"]
    now = json.loads((stored / "llamacpp-matrix-epyc-item26.json").read_text())["results"]
    now = now["default/long"]
    for table in ("table2_charge", "table3_charge"):
        got = [v["prompt_by_tokens"][size]["median"] for v in now[table].values()
               for size in ("65-256", "257+")]  # fmt: skip
        assert all(abs(x - 1) < 0.06 for x in got)
    for table, span in (("table2_charge", (1.75, 1.85)), ("table3_charge", (1.76, 1.87))):
        mid = [v["prompt_by_tokens"]["65-256"]["median"] for v in long[table].values()]
        assert (round(min(mid), 2), round(max(mid), 2)) == span
        top = [v["prompt_by_tokens"]["257+"]["median"] for v in long[table].values()]
        assert all(abs(x - 1) < 0.05 for x in top)
    t1 = [x["median"] for v in long["loads"].values()
          for x in v["steps_vs_charge"]["prompt_by_tokens"].values()]  # fmt: skip
    assert (round(min(t1), 2), round(max(t1), 2)) == (1.0, 1.1)
    for fit in ("runs", "joint"):
        assert long["fits"][fit]["per_prefill_token_ms"] < 1e-9
        assert long["fits"][fit]["per_prefill_attention_ms"] > 0.0028


def test_item_28s_kvu_long_again() -> None:
    # item 28: -kvu long on a quieter host: its check passed first, decode steps 0.94-1.07
    # x Table 1's charge; Table 1 27 of 35 (item 23's run: 16), five of its eight misses at
    # Poisson 0.6, whose prompt steps ran quick; Tables 2 and 3, fitted on that load, 17
    # and 18, charging the other loads' prompts 1.07-1.23 x too little (published until
    # item 32: item 30's kept set)
    kept30 = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item30.json"
    results = json.loads(kept30.read_text())
    results = results["results"]
    point = results["kvu/long"]
    assert [(c["profile_ms"], c["check_ms"]) for c in point["gate"]["batch_check"]] == [
        (40.9, 40.9)
    ]  # fmt: skip
    steps = _decode_steps(point)
    assert steps == [1.07, 0.99, 0.95, 0.94, 0.95]
    inside = _inside(point)
    assert sum(inside.values()) == 27
    assert sum(not ok for (load, _), ok in inside.items() if load == "poisson_0.6") == 5
    mid = point["loads"]["poisson_0.6"]["steps_vs_charge"]["prompt_by_tokens"]
    assert all(0.9 < v["median"] < 0.96 for v in mid.values())
    others = [
        v["median"]
        for load, c in point["table2_charge"].items()
        if load != "poisson_0.6"
        for size, v in c["prompt_by_tokens"].items()
        if size in ("65-256", "257+")
    ]
    assert (round(min(others), 2), round(max(others), 2)) == (1.07, 1.23)
    rows = _by_point(_cells(kept30))
    row = rows["-np 4 -c 4096 -t 2 -kvu", "long"]
    assert (row[4], row[6]) == ("17 / 35", "18 / 35")
    kept = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item28.json"
    bands = validation_module("llamacpp_report").cells_by_steps(
        json.loads(kept.read_text())["results"]
    )
    assert bands == {"within 3 %": [81, 105, 15], "3–6 %": [27, 35, 5],
                     "beyond 6 %": [29, 70, 10]}  # fmt: skip


def test_item_30s_np4_short_on_a_steady_host() -> None:
    # item 30: -np 4 short again: its check passed first, every run inside the gate, its
    # decode steps 0.96-1.02 x the charge; 19 of 35 from probes, the median p50 error 4 %;
    # the closed loops' six misses are p90 cells 2.6-5.5 % off (published until item 33)
    kept = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item32.json"
    short = json.loads(kept.read_text())["results"]["default/short"]
    assert [(c["profile_ms"], c["check_ms"]) for c in short["gate"]["batch_check"]] == [
        (32.3, 31.8)
    ]
    assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(short))
    steps = _decode_steps(short)
    assert steps == [1.02, 1.01, 0.96, 1.01, 1.0]
    inside = _inside(short)
    assert sum(inside.values()) == 19
    matrix = validation_module("llamacpp_points")
    missed = [r for v in short["loads"].values() for r in v["table"]
              if r["metric"] in matrix.METRICS and not matrix.cell(r)[1]]  # fmt: skip
    closed = [r for k in ("closed_4", "closed_8") for r in short["loads"][k]["table"]
              if r in missed]  # fmt: skip
    assert len(missed) == 16
    assert len(closed) == 6
    assert all(r["metric"].startswith("p90") and 0.025 < abs(r["error"]) < 0.056 for r in closed)


def test_item_32s_long_points_again_with_the_wander_probe() -> None:
    # item 32: -np 2 -b 64 long profiled with the host at 17.1 ms a lone step, its runs
    # started at 0.84-1.04 x that, its decode steps 0.86-0.97 x the charge; -np 4 long's
    # runs slowed through its loads (three started after the gate gave up, 1.18-1.30 x),
    # 14 of 35 from probes and 29 and 31 from its own runs; -kvu long at 1.00-1.04 x, 24
    # (kept in item 33's set since item 34 ran the long points again)
    kept = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item33.json"
    results = json.loads(kept.read_text())
    results = results["results"]

    np2 = results["np2_b64/long"]
    assert round(np2["gate"]["run_ref_ms"], 1) == 17.1
    readings = [x for x, _ in _gate_readings(np2)]
    assert (round(min(readings), 2), round(max(readings), 2)) == (0.84, 1.04)
    assert _decode_steps(np2) == [0.92, 0.92, 0.97, 0.86, 0.96]
    assert sum(_inside(np2).values()) == 22
    np4 = results["default/long"]
    late = sorted(round(x, 2) for x, _ in _gate_readings(np4) if x > 1.05)
    assert (len(late), late[0], late[-1]) == (3, 1.18, 1.3)
    assert _decode_steps(np4) == [1.05, 1.12, 1.06, 1.06, 1.1]
    assert sum(_inside(np4).values()) == 14
    p90 = np4["loads"]["poisson_0.6"]["table"]
    assert round(next(r["error"] for r in p90 if r["metric"] == "p90_ttft_ms"), 3) == -0.443
    kvu = results["kvu/long"]
    assert _decode_steps(kvu) == [1.0, 1.04, 1.04, 1.02, 1.04]
    assert sum(_inside(kvu).values()) == 24


def test_item_33s_short_points_with_the_wake_probe() -> None:
    # item 33: each short point's profile read the engine's wake after idle (Table 1
    # charges it), the runs' lone prompts after idle took more than those after other
    # work; -np 4 short's runs ran 3-18 % over the charge at every load (11 of 35), -kvu
    # short's Poisson 0.9 0.89 x (seven of its ten misses); -np 4 short kept in item 34's set
    kept = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item34.json"
    results = json.loads(kept.read_text())["results"]
    wakes = {p: results[p]["wake"] for p in ("default/short", "np2_b64/short", "kvu/short")}
    assert {p: (w["after_s"], round(w["ms"], 1), w["prompts"]) for p, w in wakes.items()} == {
        "default/short": (0.3, 7.4, 40), "np2_b64/short": (3.0, 7.2, 40),
        "kvu/short": (0.3, 1.0, 40),
    }  # fmt: skip
    for p in wakes:
        idle = {name: ex for name, _, ex in results[p]["idle"]}
        assert idle["1-∞ s"] > idle["0-0.1 s"] + 4.0
    short = results["default/short"]
    steps = _decode_steps(short)
    assert steps == [1.08, 1.12, 1.03, 1.18, 1.12]
    assert sum(_inside(short).values()) == 11
    kvu = results["kvu/short"]
    missed = [load for load, ok in _inside(kvu).items() if not ok]
    assert len(missed) == 10
    assert sum(load == "poisson_0.9" for load, _ in missed) == 7
    assert round(kvu["loads"]["poisson_0.9"]["steps_vs_charge"]["decode"]["median"], 2) == 0.89
    assert sum(_inside(results["np2_b64/short"]).values()) == 30


def test_item_34s_long_points_again_and_table_1_at_the_runs_speed() -> None:
    # item 34: the long points with the wake probe, every run inside the gate, -np 4 and
    # -kvu long at 0.99-1.04 x the charge hold 33 and 32 from probes; priced at each
    # load's own decode-step speed Table 1 holds 182 of 210 (the gate's lone probe: 161)
    # (on item 34's set, kept since item 35 ran -np 4 short again)
    validation = ROOT / "docs" / "validation"
    results = json.loads((validation / "llamacpp-matrix-epyc-item34.json").read_text())
    results = results["results"]
    for p in ("default/long", "kvu/long", "np2_b64/long"):
        assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(results[p]))
        assert results[p]["wake"]["prompts"] == 40
    assert {p: sum(_inside(results[p]).values())
            for p in ("default/long", "kvu/long", "np2_b64/long")} == {
        "default/long": 33, "kvu/long": 32, "np2_b64/long": 30}  # fmt: skip
    kept = json.loads((validation / "llamacpp-at-speed-item34.json").read_text())
    runs, gate = kept["runs"], kept["gate"]
    assert (runs["ratio"], gate["ratio"]) == ("runs", "gate")
    assert _at_speed_totals(kept, "runs", "gate") == {
        "runs": "| all | | 161 / 210 | | 182 / 210 | |",
        "gate": "| all | | 161 / 210 | | 161 / 210 | |",
    }
    for stored in (runs, gate):  # Table 1's cells as the published matrix counts them
        _table1_as_published(stored, results)
    # each load's ratio is its runs' median decode step over the charge
    for p, loads in runs["points"].items():
        for load, got in loads.items():
            ratio = results[p]["loads"][load]["steps_vs_charge"]["decode"]["median"]
            assert got["ratio"] == round(ratio, 4)
    # the noise draws' totals the document quotes, as the command printed them
    printed = kept["noise_printed"]
    at_speed_line = printed[
        "PYTHONPATH=src python validation/llamacpp_noise.py --wander --at-speed"
    ]
    assert any(line.startswith("all ") and "T1 161 -> 193 (band 195) of 210" in line
               for line in at_speed_line)  # fmt: skip
    table1_line = printed["PYTHONPATH=src python validation/llamacpp_noise.py --wander"]
    assert any(line.startswith("all ") and "T1 161 -> 160 (band 156) of 210" in line
               for line in table1_line)  # fmt: skip
    # at the runs' speed the p50s are in target but three; what it misses is p90s
    missed = [m for loads in runs["points"].values() for v in loads.values()
              for m in v["at_speed"]["missed"]]  # fmt: skip
    assert len(missed) == 28
    assert sorted(m for m in missed if not m.startswith("p90")) == [
        "median_e2el_ms", "median_ttft_ms", "median_ttft_ms"]  # fmt: skip


def test_item_35s_np4_short_with_the_full_batch_timed_before_each_run() -> None:
    # item 35: -np 4 short again with --batch-before, the host steady (steps 1.00-1.03 x
    # the charge): 28 of 35 from probes, its seven misses all too low; priced at the full
    # batch's step before the runs 31
    validation = ROOT / "docs" / "validation"
    kept_set = validation / "llamacpp-matrix-epyc-item39.json"  # (published until item 40)
    results = json.loads(kept_set.read_text())["results"]
    short = results["default/short"]
    assert short["gate"]["batch_row_ms"] == 33.1
    runs = [m for v in short["loads"].values() for m in v["machine"]]
    assert len(runs) == 15
    assert all(m["batch_before"] > 0 for m in runs)
    assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(short))
    inside = _inside(short)
    assert sum(inside.values()) == 28
    by = {(load, r["metric"]): r for load, v in short["loads"].items() for r in v["table"]}
    assert all(by[cell]["error"] < 0 for cell, ok in inside.items() if not ok)
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item35.json", results, 28,
                             {"batch": 31, "runs": 33, "gate": 29})  # fmt: skip
    assert kept["batch"]["ratio"] == "batch"


def test_item_36s_kvu_short_and_the_full_batch_as_a_forecast() -> None:
    # item 36: -kvu short again with --batch-before; its first two loads ran 0.91 and 0.93
    # x the charge (27 of 35 from probes); the full batch's step before the runs read
    # 0.96 and 0.94 there, the gate's lone probe 0.98 and 0.98: priced at it, 31
    validation = ROOT / "docs" / "validation"
    kept_set = validation / "llamacpp-matrix-epyc-item39.json"  # (published until item 40)
    results = json.loads(kept_set.read_text())["results"]
    kvu = results["kvu/short"]
    steps = _decode_steps(kvu)
    assert steps == [0.91, 0.93, 1.01, 0.98, 1.0]
    assert sum(_inside(kvu).values()) == 27
    at_speed = validation_module("llamacpp_at_speed")
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item36.json", results, 27,
                             {"batch": 31, "runs": 30, "gate": 28})  # fmt: skip
    batch = kept["batch"]
    ratios = [round(v["ratio"], 2) for v in batch["points"]["kvu/short"].values()]
    assert ratios == [0.96, 0.94, 1.08, 1.01, 1.0]
    assert [round(at_speed.gate_ratio(kvu, load), 2) for load in ("poisson_0.3", "poisson_0.6")
            ] == [0.98, 0.98]  # fmt: skip


def test_item_37s_np2_points_and_the_hosts_mean_step() -> None:
    # item 37: -np 2 -b 64 short and long again with --batch-before (33 and 24 of 35 from
    # probes); Table 2 of the short point fitted on a load whose two-sequence steps ran
    # 1.09 x, pricing the others 5-13 % slow; priced at each load's median real step 188
    # of 210, at its mean step 201; the full batch's step before the runs, on the four
    # points run with it, 121 of 140 (the runs' own median step too), the lone probe 118
    # (item 37's set, kept since item 39 ran -np 4 and -kvu long again)
    validation = ROOT / "docs" / "validation"
    kept_set = validation / "llamacpp-matrix-epyc-item37.json"
    results = json.loads(kept_set.read_text())["results"]
    short, long = results["np2_b64/short"], results["np2_b64/long"]
    for point in (short, long):
        runs = [m for v in point["loads"].values() for m in v["machine"]]
        assert len(runs) == 15
        assert all(m["batch_before"] > 0 for m in runs)
        assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(point))
    assert (sum(_inside(short).values()), sum(_inside(long).values())) == (33, 24)
    by_batch = short["loads"]["poisson_0.6"]["steps_vs_charge"]["decode_by_batch"]
    assert round(by_batch["2"]["median"], 2) == 1.09
    t2 = [round(short["table2_charge"][load]["decode"]["median"], 2)
          for load in ("poisson_0.3", "poisson_0.9", "closed_4", "closed_8")]  # fmt: skip
    assert t2 == [0.95, 0.91, 0.89, 0.87]
    at_speed = validation_module("llamacpp_at_speed")
    kept = json.loads((validation / "llamacpp-at-speed-item37.json").read_text())
    assert _at_speed_totals(kept, "runs", "mean", "gate", "one-run") == {
        "runs": "| all | | 177 / 210 | | 188 / 210 | |",
        "mean": "| all | | 177 / 210 | | 201 / 210 | |",
        "gate": "| all | | 177 / 210 | | 181 / 210 | |",
        # item 38: every load at Poisson 0.6's mean step (compare --steps' cost.speed on
        # the run Tables 2 and 3 fit on): as Table 1, above Tables 2 and 3 (170, 171)
        "one-run": "| all | | 177 / 210 | | 176 / 210 | |",
    }
    one_run = {p: round(next(iter(v.values()))["ratio"], 2)
               for p, v in kept["one-run"]["points"].items()}  # fmt: skip
    assert one_run == {"default/short": 1.06, "default/long": 1.04, "np2_b64/long": 1.07,
                       "kvu/long": 1.04, "kvu/short": 0.98, "np2_b64/short": 1.11}  # fmt: skip
    batch = kept["batch"]["points"]
    assert sorted(batch) == ["default/short", "kvu/short", "np2_b64/long", "np2_b64/short"]
    assert at_speed.report(batch, "batch")[-1] == "| all | | 112 / 140 | | 121 / 140 | |"
    on_four = {r: sum(v["at_speed"]["in_target"] for p in batch
                      for v in kept[r]["points"][p].values())
               for r in ("runs", "gate", "mean")}  # fmt: skip
    assert on_four == {"runs": 121, "gate": 118, "mean": 132}
    # each ratio is the stored runs' own, and the mean runs 0.6-4.9 % above the median
    for p, loads in kept["runs"]["points"].items():
        for load, got in loads.items():
            charge = results[p]["loads"][load]["steps_vs_charge"]["decode"]
            assert (got["ratio"], kept["mean"]["points"][p][load]["ratio"]) == (
                round(charge["median"], 4), round(charge["mean"], 4))  # fmt: skip
    assert min(_skew(kept)) > 1.005
    assert max(_skew(kept)) < 1.05
    missed = [m for loads in kept["mean"]["points"].values() for v in loads.values()
              for m in v["at_speed"]["missed"]]  # fmt: skip
    assert len(missed) == 9


def test_item_39s_long_points_and_the_full_batch_on_every_point() -> None:
    # item 39: -np 4 long and -kvu long again with --batch-before, the host quicker than
    # their profiles (30 and 30 of 35 from probes); every point now timed so: priced at
    # the full batch's step before each run Table 1 holds 181 of 210, at the runs' median
    # step 177, at their mean 193, the lone probe 176, one load run's mean step 156
    validation = ROOT / "docs" / "validation"
    kept_set = validation / "llamacpp-matrix-epyc-item39.json"  # (published until item 40)
    results = json.loads(kept_set.read_text())["results"]
    for p in ("default/long", "kvu/long"):
        runs = [m for v in results[p]["loads"].values() for m in v["machine"]]
        assert len(runs) == 15
        assert all(m["batch_before"] > 0 for m in runs)
        assert all(abs(x - 1) <= 0.05 for x, _ in _gate_readings(results[p]))
        assert sum(_inside(results[p]).values()) == 30
    # -kvu long: its prompt steps ran another way than its decode steps (one factor on
    # both, from the decode steps, moves its prompts the wrong way)
    charge = [v["steps_vs_charge"] for v in results["kvu/long"]["loads"].values()]
    assert [round(c["prompt"]["median"], 2) for c in charge] == [1.03, 0.99, 1.09, 1.03, 0.98]
    assert [round(c["decode"]["median"], 2) for c in charge] == [0.94, 0.95, 1.03, 1.01, 0.96]
    checks = results["default/long"]["gate"]["batch_check"]  # the first profile failed it
    assert [(c["profile_ms"], c["check_ms"]) for c in checks] == [(36.5, 43.4), (37.0, 35.9)]
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item39.json", results, 172,
                             {"runs": 177, "mean": 193, "gate": 176, "one-run": 156,
                              "batch": 181})  # fmt: skip
    batch = {p: sum(v["at_speed"]["in_target"] for v in loads.values()) - sum(
        v["table1"]["in_target"] for v in loads.values())
        for p, loads in kept["batch"]["points"].items()}  # fmt: skip
    assert batch == {"default/short": 3, "default/long": 3, "np2_b64/long": 8,
                     "kvu/long": -3, "kvu/short": 4, "np2_b64/short": -6}  # fmt: skip
    assert min(_skew(kept)) > 1.005
    assert max(_skew(kept)) < 1.05


def test_item_40s_pass_and_every_gate_reading() -> None:
    # item 40: -np 4 short and long, -kvu short and long again in one pass (24, 26, 30, 17
    # of 35 from probes); priced at the runs' median step 181 of 210, at their mean 197,
    # the full batch's step before each run 172, the gate's last probe 173, one load run's
    # mean step 162; the full-batch check's mean 111 of 140 on the four points (its median
    # 113); the median of every gate probe before a run, kept on the -kvu points, 65 of 70
    # where the last probe gives 55
    validation = ROOT / "docs" / "validation"
    kept_set = validation / "llamacpp-matrix-epyc-item40.json"  # (published until item 41)
    results = json.loads(kept_set.read_text())["results"]
    passed = ("default/short", "default/long", "kvu/short", "kvu/long")
    assert [sum(_inside(results[p]).values()) for p in passed] == [24, 26, 30, 17]
    for p in passed:
        runs = [m for v in results[p]["loads"].values() for m in v["machine"]]
        assert len(runs) == 15
        assert all(m["batch_before_mean"] > 0 for m in runs)
        assert all(("gate_readings" in m) == p.startswith("kvu") for m in runs)
    for p in ("kvu/short", "kvu/long"):  # the last reading is the one the gate let through
        for v in results[p]["loads"].values():
            assert all(m["gate_readings"][-1] == m["step_before"] for m in v["machine"])
            assert all(len(m["gate_readings"]) == m["gate_probes"] for m in v["machine"])
    checks = results["default/long"]["gate"]["batch_check"]  # the first profile failed it
    assert [(c["profile_ms"], c["check_ms"]) for c in checks] == [(38.2, 35.8), (37.1, 36.0)]
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item40.json", results, 154,
                             {"runs": 181, "mean": 197, "gate": 173, "batch": 172,
                              "one-run": 162})  # fmt: skip
    # the two readings kept since item 40, on the points that have them
    file = validation / "llamacpp-at-speed-item40.json"
    _at_speed_checked(file, results, 97, {"batch-mean": 111})  # 140 cells: the pass's 4 points
    _at_speed_checked(file, results, 47, {"gate-all": 65})  # 70: the two -kvu points
    assert sorted(kept["batch-mean"]["points"]) == sorted(passed)
    assert sorted(kept["gate-all"]["points"]) == ["kvu/long", "kvu/short"]

    def on(ratio: str, points: tuple[str, ...]) -> int:
        return sum(v["at_speed"]["in_target"] for p in points
                   for v in kept[ratio]["points"][p].values())  # fmt: skip

    assert on("batch", passed) == 113
    kvu = ("kvu/short", "kvu/long")
    assert {r: on(r, kvu) for r in ("gate", "batch", "runs", "mean")} == {
        "gate": 55, "batch": 55, "runs": 58, "mean": 67}  # fmt: skip
    # -kvu long: the gate's probes read the host, its last one the profile
    at_speed = validation_module("llamacpp_at_speed")
    long = results["kvu/long"]
    assert [round(at_speed.gate_all_ratio(long, load), 2) for load in long["loads"]] == [
        1.16, 1.16, 1.11, 1.03, 1.13]  # fmt: skip
    assert [round(at_speed.gate_ratio(long, load), 2) for load in long["loads"]] == [
        1.05, 1.29, 1.0, 1.0, 1.04]  # fmt: skip
    assert [round(v["ratio"], 2) for v in kept["mean"]["points"]["kvu/long"].values()] == [
        1.08, 1.15, 1.04, 1.05, 1.06]  # fmt: skip
    # -np 4 long's closed loop of 4 in a slow spell, the full batch before it read it
    assert kept["runs"]["points"]["default/long"]["closed_4"]["ratio"] == pytest.approx(
        1.16, abs=0.005
    )
    assert kept["batch"]["points"]["default/long"]["closed_4"]["ratio"] == pytest.approx(
        1.14, abs=0.005
    )
    assert max(_skew(kept)) < 1.06


def test_item_41s_pass_and_the_forecasts_on_every_point() -> None:
    # item 41: -np 2 -b 64 short and long, -np 4 short and long again in one pass (25, 22,
    # 25, 27 of 35 from probes), every gate reading kept; with item 40's -kvu points,
    # Table 1 146 of 210. Priced at the runs' median step 170, their mean 197; read before
    # the runs: the median of every gate probe 174, the full batch's mean step 180, its
    # median 167, the gate's last probe 150, one load run's mean step 154
    validation = ROOT / "docs" / "validation"
    kept_set = validation / "llamacpp-matrix-epyc-item41.json"  # (published until item 42)
    results = json.loads(kept_set.read_text())["results"]
    item40 = json.loads((validation / "llamacpp-matrix-epyc-item40.json").read_text())
    passed = ("np2_b64/short", "np2_b64/long", "default/short", "default/long")
    assert [sum(_inside(results[p]).values()) for p in passed] == [25, 22, 25, 27]
    for p in ("kvu/short", "kvu/long"):  # carried from item 40's pass as they were
        assert results[p] == item40["results"][p]
    for p in results:  # every point now has every gate reading before every run
        for v in results[p]["loads"].values():
            assert len(v["machine"]) == 3
            assert all(m["gate_readings"][-1] == m["step_before"] for m in v["machine"])
            assert all(len(m["gate_readings"]) == m["gate_probes"] for m in v["machine"])
    # -np 2 -b 64 short: three profiles, none within 5 % of its full-batch check
    checks = results["np2_b64/short"]["gate"]["batch_check"]
    assert [(c["profile_ms"], c["check_ms"]) for c in checks] == [
        (23.5, 24.8), (26.4, 29.6), (25.0, 26.4)]  # fmt: skip
    assert all(c["check_ms"] / c["profile_ms"] > 1.05 for c in checks)
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item41.json", results, 146,
                             {"runs": 170, "mean": 197, "gate": 150, "gate-all": 174,
                              "batch": 167, "batch-mean": 180, "one-run": 154})  # fmt: skip
    assert all(sorted(kept[r]["points"]) == sorted(results) for r in kept if r != "about")

    def on(ratio: str, points: tuple[str, ...]) -> int:
        return sum(v["at_speed"]["in_target"] for p in points
                   for v in kept[ratio]["points"][p].values())  # fmt: skip

    # gate-all on the -kvu points as in item 40 (the same runs), and on this pass's four
    assert on("gate-all", ("kvu/short", "kvu/long")) == 65
    assert on("gate-all", passed) == 109
    assert sum(sum(_inside(results[p]).values()) for p in passed) == 99
    # -np 2 -b 64 long, its loads within 4 % of the charge: the lone probes read below the
    # runs' mean steps and it loses a cell
    at_speed = validation_module("llamacpp_at_speed")
    long = results["np2_b64/long"]
    assert [round(at_speed.gate_all_ratio(long, load), 2) for load in long["loads"]] == [
        1.01, 0.97, 0.99, 1.04, 0.97]  # fmt: skip
    assert [round(v["ratio"], 2) for v in kept["mean"]["points"]["np2_b64/long"].values()] == [
        1.06, 1.02, 1.07, 1.03, 0.99]  # fmt: skip
    assert on("gate-all", ("np2_b64/long",)) == 21
    assert max(_skew(kept)) < 1.06


def test_item_42s_pass_with_lyra_simpy_speed_before_every_run() -> None:
    # item 42: -np 4 short, -kvu short, -np 2 -b 64 short, -kvu long and -np 4 long again in
    # one pass, `lyra-simpy speed` (lone, then --batch NP) run before every real run (29,
    # 32, 31, 26, 20 of 35 from probes); with item 41's -np 2 -b 64 long, Table 1 160 of
    # 210. On the five points (175 cells): at the profile's speed 138, at the full batch's
    # reading 152, at the lone reading 140, at the runs' median step 160 and mean step 167
    validation = ROOT / "docs" / "validation"
    kept42 = validation / "llamacpp-matrix-epyc-item42.json"  # (published until item 43)
    results = json.loads(kept42.read_text())["results"]
    item41 = json.loads((validation / "llamacpp-matrix-epyc-item41.json").read_text())
    passed = ("default/short", "kvu/short", "np2_b64/short", "kvu/long", "default/long")
    assert [sum(_inside(results[p]).values()) for p in passed] == [29, 32, 31, 26, 20]
    assert results["np2_b64/long"] == item41["results"]["np2_b64/long"]  # carried as it was
    runs = [m for p in passed for v in results[p]["loads"].values() for m in v["machine"]]
    assert len(runs) == 75  # every run has both readings: the cost.speed the command printed
    for name, low, high in (("speed_lone", 0.93, 1.31), ("speed_batch", 0.96, 1.24)):
        assert (round(min(m[name] for m in runs), 2), round(max(m[name] for m in runs), 2)) == (
            low, high)  # fmt: skip
    assert not any("batch_before" in m for m in runs)  # (no --batch-before this pass)
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item42.json", results, 138,
                             {"runs": 160, "mean": 167, "gate": 139, "gate-all": 145,
                              "speed": 140, "speed-batch": 152, "one-run": 147})  # fmt: skip
    ratios = ("runs", "mean", "gate", "gate-all", "speed", "speed-batch", "one-run")
    assert all(sorted(kept[r]["points"]) == sorted(passed) for r in ratios)
    # the readings against the runs' mean step: the lone one 2.6 % low on average, the full
    # batch's 0.8 % high, each straying about 3 % (log)
    # (the first of llamacpp_at_speed.py's closing lines, against_mean)
    at_speed = validation_module("llamacpp_at_speed")
    errors = [at_speed.against_mean(kept[r]["points"], results) for r in ("speed", "speed-batch")]
    assert [round(e[0], 3) for e in errors] == [-0.026, 0.008]
    assert [round(e[1], 3) for e in errors] == [0.035, 0.032]

    def on(ratio: str, point: str) -> int:
        return sum(v["at_speed"]["in_target"] for v in kept[ratio]["points"][point].values())

    # -np 4 long, its last three loads 1.05-1.06 x: the full batch's reading 20 -> 33; -kvu
    # long's Poisson 0.6 read at 1.14 x, its runs' mean step 1.08 x: 26 -> 24
    assert (on("speed-batch", "default/long"), on("speed-batch", "kvu/long")) == (33, 24)
    long = kept["speed-batch"]["points"]["kvu/long"]["poisson_0.6"]["ratio"]
    assert (round(long, 2), round(kept["mean"]["points"]["kvu/long"]["poisson_0.6"]["ratio"], 2)
            ) == (1.14, 1.08)  # fmt: skip
    # the noise model's wander at the speeds read before item 41's runs, as printed: the
    # median of 9 draws no better than one noiseless run, the band holding more
    printed = kept["noise_printed_item41"]
    cmd = "PYTHONPATH=src python validation/llamacpp_noise.py --wander"
    totals = {r: next(line for line in printed[f"{cmd} --at-speed {r}" if r else cmd]
                      if line.startswith("all "))
              for r in ("", "gate-all", "batch-mean", "mean")}  # fmt: skip
    assert "T1 146 -> 145 (band 125) of 210" in totals[""]
    assert totals["gate-all"].endswith("T1 146 -> 169 (band 160) of 210")
    assert totals["batch-mean"].endswith("T1 146 -> 175 (band 187) of 210")
    assert totals["mean"].endswith("T1 146 -> 197 (band 190) of 210")
    # each reading's JSON is what the run kept
    point = results["default/long"]
    assert at_speed.speed_batch_ratio(point, "closed_4") == pytest.approx(
        kept["speed-batch"]["points"]["default/long"]["closed_4"]["ratio"], abs=1e-4
    )


def test_item_43s_longer_readings_and_every_point_read_before_its_runs() -> None:
    # item 43: -np 2 -b 64 short, -kvu short and -np 2 -b 64 long again, both readings 6
    # probes long (--speed-probes 6; item 42 took 3 lone probes and 2 rounds): 29, 20, 31
    # of 35 from probes; published with item 42's other three, 155 / 179 / 179 of 210
    # (kept since item 45)
    validation = ROOT / "docs" / "validation"
    results = json.loads((validation / "llamacpp-matrix-epyc-item43.json").read_text())
    kept42 = json.loads((validation / "llamacpp-matrix-epyc-item42.json").read_text())["results"]
    passed = ("np2_b64/short", "kvu/short", "np2_b64/long")
    assert [sum(_inside(results["results"][p]).values()) for p in passed] == [29, 20, 31]
    for p in ("default/short", "default/long", "kvu/long"):
        assert results["results"][p] == kept42[p]  # (carried from item 42)
    for p in passed:  # each run's two readings, logged as the command was typed
        folder = p.replace("/", "_")
        got = [c for c in results["commands"]
               if c.startswith("lyra-simpy speed ") and f"/{folder}/" in c]  # fmt: skip
        assert sum("--probes 6 --pause-s 2.0" in c for c in got) == 30
    results = results["results"]
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item43.json", results, 155,
                             {"runs": 191, "mean": 203, "gate": 155, "gate-all": 166,
                              "speed": 169, "speed-batch": 183, "one-run": 170})  # fmt: skip
    assert all(len(kept[r]["points"]) == 6 for r in ("speed", "speed-batch"))
    at_speed = validation_module("llamacpp_at_speed")
    kept_at42 = json.loads((validation / "llamacpp-at-speed-item42.json").read_text())

    def against(out: dict, stored: dict, ratio: str, points: list[str]) -> list[float]:
        got = at_speed.against_mean({p: out[ratio]["points"][p] for p in points}, stored)
        return [round(e, 3) for e in got]

    # the two short points, 6 probes against item 42's 3 and 2: the lone reading strays
    # less within a load (5.2 % -> 2.9 %), the full batch's hardly (5.3 % -> 4.7 %), and
    # neither comes closer to the runs' mean step (3.7 % -> 3.9 %, 3.4 % -> 4.0 %)
    two = ["kvu/short", "np2_b64/short"]
    spread = {(n, f): round(at_speed.readings_spread(s, two, f)[0], 3)
              for n, s in (("42", kept42), ("43", results))
              for f in ("speed_lone", "speed_batch")}  # fmt: skip
    assert spread == {("42", "speed_lone"): 0.052, ("42", "speed_batch"): 0.053,
                      ("43", "speed_lone"): 0.029, ("43", "speed_batch"): 0.047}  # fmt: skip

    def on(ratio: str, points: list[str], table: str = "at_speed") -> int:
        return sum(v[table]["in_target"] for p in points
                   for v in kept[ratio]["points"][p].values())  # fmt: skip

    assert (on("mean", two, "table1"), on("speed-batch", two), on("speed", two),
            on("mean", two)) == (49, 61, 60, 69)  # fmt: skip
    assert against(kept_at42, kept42, "speed", two) == [-0.012, 0.037]
    assert against(kept, results, "speed", two) == [-0.038, 0.039]
    assert against(kept_at42, kept42, "speed-batch", two) == [0.004, 0.034]
    assert against(kept, results, "speed-batch", two) == [-0.005, 0.04]
    # all six points: the full batch's reading +0.5 % and 3.3 % from the runs' mean step,
    # the same reading taken right after each run no closer (+0.9 %, 3.4 %); each load's
    # mean step strays 3.1 % about its point's own level, known only after the runs
    six = list(results)
    assert {r: against(kept, results, r, six) for r in ("speed-batch", "speed", "gate-all",
                                                        "one-run", "runs")} == {
        "speed-batch": [0.005, 0.033], "speed": [-0.033, 0.035], "gate-all": [-0.031, 0.034],
        "one-run": [0.007, 0.04], "runs": [-0.022, 0.01]}  # fmt: skip
    read = at_speed.RATIOS["speed-batch"].read
    after = {}
    for p in six:
        moved = at_speed.read_after(results[p], "speed_batch")
        after[p] = {load: {"ratio": read(moved, load)} for load in at_speed.LOADS}
    assert [round(e, 3) for e in at_speed.against_mean(after, results)] == [0.009, 0.034]
    assert round(at_speed.point_level(results, six), 3) == 0.031
    five42 = ["default/short", "default/long", "kvu/short", "kvu/long", "np2_b64/short"]
    assert round(at_speed.point_level(kept42, five42), 3) == 0.024
    assert min(_skew(kept)) > 1.0  # the mean step over the median
    assert max(_skew(kept)) < 1.045
    # the profile's decode rows priced by their mean step instead of their median
    # (--resimulate --decode-step mean, item 6's ablation again, each on a copy of the
    # set): Table 1 155 -> 162 on this set, 146 -> 154 on item 41's, no point losing more
    # than one cell; the default (median) gives each set as published

    def table1(printed: list[str]) -> list[int]:
        return [int(line.split("|")[3].split("/")[0]) for line in printed[2:8]]

    ablation = kept["decode_step_mean_printed"]
    got = {s: {m: table1(ablation[s][m]) for m in ("mean", "median")} for s in ("item43", "item41")}
    assert {s: (sum(v["median"]), sum(v["mean"])) for s, v in got.items()} == {
        "item43": (155, 162), "item41": (146, 154)}  # fmt: skip
    assert got["item43"]["median"] == [29, 20, 20, 26, 29, 31]  # (the published matrix's)
    assert all(a >= b - 1 for v in got.values()
               for a, b in zip(v["mean"], v["median"], strict=True))  # fmt: skip
    assert got["item43"]["mean"] == [31, 25, 21, 26, 29, 30]
    # -kvu short, its steps 1.03-1.09 x the charge: 20 -> 31 at the full batch's reading
    assert on("speed-batch", ["kvu/short"]) == 31


def test_item_44s_profiles_priced_by_their_mean_step_against_new_runs() -> None:
    # item 44: -np 4 short and -kvu short again, their profiles' decode rows the lock-step
    # windows' mean step (--decode-step mean): 22 and 32 of 35 from probes, and the same
    # runs priced by the profiles' median gaps give as many (the host ran 0.89-0.99 x the
    # charge); an ablation set, kept apart, the published matrix item 43's
    validation = ROOT / "docs" / "validation"
    rows = _cells(validation / "llamacpp-matrix-epyc-item44-mean-step.json")
    by = _by_point(rows)
    assert (by[NP4, "short"][2], by[KVU, "short"][2]) == ("22 / 35", "32 / 35")
    assert by[NP4, "short"][8] == "0.89–0.98 |"
    kept = json.loads((validation / "llamacpp-at-speed-item44.json").read_text())

    def table1(printed: list[str], point: str) -> str:
        return next(line for line in printed if line.startswith(f"| `{point}` | short |"))

    for stat in ("median", "mean"):
        printed = kept["resimulate_printed"][stat]
        assert table1(printed, NP4).split(" | ")[2] == "22 / 35"
        assert table1(printed, KVU).split(" | ")[2] == "32 / 35"
    assert _at_speed_totals(kept, "runs", "mean", "speed", "speed-batch", "gate-all") == {
        r: f"| all | | 54 / 70 | | {n} / 70 | |"
        for r, n in (("runs", 60), ("mean", 63), ("speed", 55), ("speed-batch", 52),
                     ("gate-all", 58))
    }  # fmt: skip
    results = json.loads((validation / "llamacpp-matrix-epyc-item44-mean-step.json").read_text())
    at_speed = validation_module("llamacpp_at_speed")
    bias = at_speed.against_mean(kept["speed-batch"]["points"], results["results"])
    assert [round(e, 3) for e in bias] == [0.045, 0.037]


def _band_totals(printed: list[str]) -> dict[str, int]:
    """The closing ``all`` line of ``llamacpp_noise.py``: each table's real values inside
    the draws' band (``T1 158 -> 155 (band 164) of 210`` -> ``{"T1": 164}``)."""
    (line,) = [x for x in printed if x.startswith("all ")]
    parts = line.split()[1:]
    return {parts[k]: int(parts[k + 5].rstrip(")")) for k in range(0, len(parts), 8)}


def test_item_45s_session_spread_and_the_short_points_again() -> None:
    # item 45: -np 4 short and -kvu short again (readings 6 probes long): 19 and 33 of 35
    # from probes, published with item 43's other four, 158 / 177 / 176 of 210 (kept since
    # item 46); the band from probes with the profile's session spread holds 164 real
    # values, 136 without
    validation = ROOT / "docs" / "validation"
    published = json.loads((validation / "llamacpp-matrix-epyc-item45.json").read_text())
    results = published["results"]
    kept43 = json.loads((validation / "llamacpp-matrix-epyc-item43.json").read_text())["results"]
    passed = ("default/short", "kvu/short")
    assert [sum(_inside(results[p]).values()) for p in passed] == [19, 33]
    for p in ("default/long", "kvu/long", "np2_b64/short", "np2_b64/long"):
        assert results[p] == kept43[p]  # (carried from items 42-43)
    long_readings = {}
    for p in passed:  # the log keeps every pass's commands: -kvu short's item 43's too
        folder = p.replace("/", "_")
        got = [c for c in published["commands"]
               if c.startswith("lyra-simpy speed ") and f"/{folder}/" in c]  # fmt: skip
        long_readings[p] = sum("--probes 6 --pause-s 2.0" in c for c in got)
    assert long_readings == {"default/short": 30, "kvu/short": 60}
    kept = _at_speed_checked(validation / "llamacpp-at-speed-item45.json", results, 158,
                             {"runs": 178, "mean": 198, "gate": 153, "gate-all": 167,
                              "speed": 168, "speed-batch": 184, "one-run": 168})  # fmt: skip
    at_speed = validation_module("llamacpp_at_speed")
    six = list(results)

    def against(ratio: str) -> list[float]:
        got = at_speed.against_mean(kept[ratio]["points"], results)
        return [round(e, 3) for e in got]

    assert {r: against(r) for r in ("speed-batch", "speed", "gate-all", "runs")} == {
        "speed-batch": [0.014, 0.024], "speed": [-0.022, 0.031], "gate-all": [-0.027, 0.03],
        "runs": [-0.022, 0.011]}  # fmt: skip
    assert round(at_speed.point_level(results, six), 3) == 0.032
    # -np 4 short: its decode steps on the charge at four loads, its prompts not; at its
    # runs' own mean step it holds 28
    per_point = {p: sum(v["at_speed"]["in_target"] for v in loads.values())
                 for p, loads in kept["mean"]["points"].items()}  # fmt: skip
    assert per_point["default/short"] == 28
    # the bands of 9 draws (llamacpp_noise.py), as printed: Table 1 and Table 3 with the
    # wander alone, then with the profile's session spread; at the full batch's reading
    printed = kept["noise_printed"]["by_flags"]
    assert _band_totals(printed["--wander"]) == {"T1": 136, "T2": 143, "T3": 140}
    assert _band_totals(printed["--wander --session"]) == {"T1": 164, "T3": 173}
    assert _band_totals(printed["--at-speed speed-batch --wander"]) == {"T1": 171}
    assert _band_totals(printed["--at-speed speed-batch --wander --session"]) == {"T1": 180}
    assert any("T2 - (no session in its fit)" in x for x in printed["--wander --session"])


def _one_point_again(item: int, sets: tuple[str, str], point: str, table1: int,
                     totals: dict[str, int]) -> tuple[dict, dict]:  # fmt: skip
    """A set that ran one *point* again (item *item*; *sets*: the file it is stored in and
    the set before it): the matrix's results, the other points the same as before, and
    its kept at-speed output (``llamacpp-at-speed-itemNN.json``) checked against Table 1
    (*table1*) and each ratio's *totals* (:func:`_at_speed_checked`)."""
    validation = ROOT / "docs" / "validation"
    results, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    assert all(results[p] == before[p] for p in results if p != point)
    at_speed = validation / f"llamacpp-at-speed-item{item}.json"
    return results, _at_speed_checked(at_speed, results, table1, totals)


def _bands_and_reading(kept: dict, results: dict, point: str) -> tuple[list, list, str]:
    """A kept at-speed output's full-batch reading against the runs' mean step (bias,
    spread), its bands' totals (the wander alone, with the session spread, at the reading
    with both) and the line it printed for *point* with the session spread."""
    got = validation_module("llamacpp_at_speed").against_mean(
        kept["speed-batch"]["points"], results
    )
    printed = kept["noise_printed"]["by_flags"]
    flags = ("--wander", "--wander --session", "--at-speed speed-batch --wander --session")
    bands = [_band_totals(printed[f]) for f in flags]
    (line,) = [x for x in printed["--wander --session"] if x.startswith(point)]
    return [round(e, 3) for e in got], bands, line


def test_item_46s_np4_long_again_the_band_held_out() -> None:
    # item 46: -np 4 long again, run after the session spread was built (its profile's CV
    # 0.024): 28 of 35 from probes, published with item 45's other five, 166 / 169 / 168
    # (kept since item 47)
    sets = ("llamacpp-matrix-epyc-item46.json", "llamacpp-matrix-epyc-item45.json")
    totals = {"runs": 180, "mean": 196, "gate": 161, "gate-all": 176, "speed": 174,
              "speed-batch": 182, "one-run": 163}  # fmt: skip
    results, kept = _one_point_again(46, sets, "default/long", 166, totals)
    assert sum(_inside(results["default/long"]).values()) == 28
    against, bands, line = _bands_and_reading(kept, results, "default/long")
    assert against == [0.014, 0.026]
    assert bands == [{"T1": 154, "T2": 143, "T3": 145}, {"T1": 166, "T3": 164}, {"T1": 176}]
    assert "T1 28 -> 30 (band 28) of 35" in line  # the wander alone: band 28 too


def test_item_47s_kvu_long_again_the_band_held_out() -> None:
    # item 47: -kvu long again (its profile's CV 0.015): 21 of 35 from probes, its misses
    # light and middle loads' TTFT; published with item 46's other five, 161 / 167 / 166
    # (kept since item 48)
    sets = ("llamacpp-matrix-epyc-item47.json", "llamacpp-matrix-epyc-item46.json")
    totals = {"runs": 171, "mean": 188, "gate": 158, "gate-all": 166, "speed": 171,
              "speed-batch": 184, "one-run": 165}  # fmt: skip
    results, kept = _one_point_again(47, sets, "kvu/long", 161, totals)
    assert sum(_inside(results["kvu/long"]).values()) == 21
    missed = [m for (_, m), ok in _inside(results["kvu/long"]).items() if not ok]
    assert missed.count("median_ttft_ms") == 4
    against, bands, line = _bands_and_reading(kept, results, "kvu/long")
    assert against == [0.011, 0.023]
    assert bands == [{"T1": 145, "T2": 138, "T3": 137}, {"T1": 162, "T3": 156}, {"T1": 183}]
    assert "T1 21 -> 21 (band 10) of 35" in line  # the wander alone: band 5


def test_item_48s_kvu_long_with_its_cells_placed() -> None:
    # item 48: -kvu long again on a quiet host, Table 1 simulated with -kvu's KV cells
    # placed as llama.cpp places them (scheduler.kv_layout: placed): 29 of 35 from probes;
    # on the same runs with the cells packed (--resimulate --kv-layout packed, kept) 22.
    # Published with item 47's other five, 169 / 162 / 165 (kept since item 49)
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item48.json", "llamacpp-matrix-epyc-item48-packed.json",
            "llamacpp-matrix-epyc-item47.json")  # fmt: skip
    placed, packed, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    assert all(placed[p] == before[p] for p in placed if p != "kvu/long")
    assert sum(_inside(placed["kvu/long"]).values()) == 29
    assert sum(_inside(packed["kvu/long"]).values()) == 22
    # the same real runs, the same fit: only where the cells lie differs
    assert placed["kvu/long"]["fits"]["probes"] == packed["kvu/long"]["fits"]["probes"]
    for load, v in placed["kvu/long"]["loads"].items():
        assert v["table"][0]["runs"] == packed["kvu/long"]["loads"][load]["table"][0]["runs"]

    def long_prompts(res: dict) -> list[float]:
        """Each load's prompt steps of 257+ tokens over Table 1's charge (compare --steps)."""
        return [round(v["steps_vs_charge"]["prompt_by_tokens"]["257+"]["median"], 2)
                for v in res["kvu/long"]["loads"].values()]  # fmt: skip

    # Poisson 0.3, 0.6, 0.9, closed 4, closed 8: packed, the busier the load the further
    # the runs' long prompts ran over the charge; placed, within 5 % at every load
    assert long_prompts(packed) == [0.95, 1.0, 1.07, 1.09, 1.09]
    assert long_prompts(placed) == [0.95, 0.98, 1.0, 1.02, 1.03]

    def error(res: dict, metric: str) -> float:
        (row,) = [r for r in res["kvu/long"]["loads"]["poisson_0.9"]["table"]
                  if r["metric"] == metric]  # fmt: skip
        return round(100 * row["error"], 1)

    assert [error(packed, "median_ttft_ms"), error(placed, "median_ttft_ms")] == [-25.3, -6.4]
    assert [error(packed, "median_e2el_ms"), error(placed, "median_e2el_ms")] == [-8.5, -3.4]
    # Table 1's misses at the point: six p90 cells
    missed = [m for (_, m), ok in _inside(placed["kvu/long"]).items() if not ok]
    assert len(missed) == 6
    assert all(m.startswith("p90") for m in missed)


def test_item_49s_kvu_short_with_its_cells_placed() -> None:
    # item 49: -kvu short again, Table 1 with the cells placed: 31 of 35, the same cells as
    # packed (its prompts of 16-64 tokens open few tiles); Tables 2 and 3, fitted on a
    # Poisson 0.6 whose steps ran ~2 % quicker than the other loads', 23 and 20. Published
    # with item 48's other five, 167 / 153 / 153 (kept since item 50)
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item49.json", "llamacpp-matrix-epyc-item49-packed.json",
            "llamacpp-matrix-epyc-item48.json")  # fmt: skip
    placed, packed, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    assert all(placed[p] == before[p] for p in placed if p != "kvu/short")
    assert _inside(placed["kvu/short"]) == _inside(packed["kvu/short"])
    assert sum(_inside(placed["kvu/short"]).values()) == 31
    missed = [m for (_, m), ok in _inside(placed["kvu/short"]).items() if not ok]
    assert sorted(missed) == ["p90_e2el_ms", "p90_e2el_ms", "p90_tpot_ms", "p90_tpot_ms"]
    # the runs' decode steps over Table 2's charge, by load: its own load's quicker
    charge = placed["kvu/short"]["table2_charge"]
    assert [round(v["decode"]["median"], 3) for v in charge.values()] == [
        1.021, 1.0, 1.022, 1.027, 1.025
    ]  # fmt: skip


def test_item_50s_np4_short_on_the_quiet_host() -> None:
    # item 50: -np 4 short again on the host of items 48-49: 23 of 35 from probes; its
    # prompt steps ran as far over Table 1's charge as its decode steps at every load
    # (item 45's run: 0.03-0.08 further), so the prompts priced low there were its host.
    # Published with item 49's other five, 171 / 155 / 155
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item50.json", "llamacpp-matrix-epyc-item49.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    assert all(now[p] == before[p] for p in now if p != "default/short")
    assert sum(_inside(now["default/short"]).values()) == 23

    def over(res: dict) -> list[float]:
        """Each load's prompt steps' median ratio less its decode steps'."""
        return [round(v["steps_vs_charge"]["prompt"]["median"]
                      - v["steps_vs_charge"]["decode"]["median"], 3)
                for v in res["default/short"]["loads"].values()]  # fmt: skip

    assert over(now) == [-0.001, 0.007, 0.0, 0.002, -0.001]
    assert over(before) == [0.03, 0.073, 0.053, 0.083, 0.085]
    # the kept shape-by-shape output: closed 8's three decoders beside a short prompt,
    # 1.34 x the charge where the replayed slots gave one decode pass, 0.82 x where two
    shapes = (validation / "llamacpp-prompt-shapes-item50.txt").read_text().split("closed_8:")[1]
    assert "decoders 3 prompts 1 tokens   1-8 passes 2 arrival 0:  41 steps, 1.340 x" in shapes
    assert "decoders 3 prompts 1 tokens   1-8 passes 3 arrival 0:  31 steps, 0.818 x" in shapes
    # ... and every run's slots from the server's log against the replayed ones (--slots,
    # item 51): the Poisson runs' are the replay's mirror image (same passes), the closed
    # loops' a relabelling set by the order the server took the requests sent together
    slots = (validation / "llamacpp-slots-item50.txt").read_text().splitlines()
    mirrored = [int(line.rsplit(" ", 1)[1]) for line in slots[:15]]
    assert mirrored[:6] == [40] * 6
    assert mirrored[6:9] == [35, 39, 28]
    assert mirrored[9:] == [0, 40, 23, 10, 7, 12]
    assert slots[15].endswith("[0, 1, 2, 3, 3, 1, 2, 0, 1, 2, 3, 1, 0, 3, 1, 2, 0, 2, 1, 3, 2, 0, "
                              "1, 3, 3, 2, 0, 1, 3, 0, 1, 2, 2, 1, 3, 0, 1, 0, 3, 1]")  # fmt: skip


def test_server_slots_cuts_the_runs_at_the_pinned_readings(tmp_path: Path) -> None:
    # llamacpp_prompt_shapes.server_slots: a run is the LRU launches after a pinned one
    shapes = validation_module("llamacpp_prompt_shapes")

    def launch(slot: int, how: str) -> str:
        chosen = f"by id ({slot})" if how == "id" else "by LRU, t_last = 7"
        return (f"I slot get_availabl: id  {slot} | task -1 | selected slot {chosen}\n"
                f"I slot launch_slot_: id  {slot} | task 9 | processing task\n")  # fmt: skip

    log = tmp_path / "llama-server.log"
    log.write_text("".join([launch(3, "LRU"),  # a gate probe before any reading: no run
                            launch(0, "id"), launch(1, "id"),  # the readings before run 1
                            launch(1, "LRU"), launch(0, "LRU"), launch(1, "LRU"),
                            launch(0, "id"),  # before run 2
                            launch(0, "LRU"), launch(1, "LRU")]))  # fmt: skip
    assert shapes.server_slots(log) == [[1, 0, 1], [0, 1]]
    # a point with more run folders than the log has runs: one line, no traceback
    point = tmp_path / "default_short"
    for k in (1, 2, 3):
        (point / "real" / "poisson_0.3" / f"run{k}").mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"--slots: no .*llama-server.log \(the server's log"):
        shapes.slots_against_log(point)
    (point / "llama-server.log").write_text(log.read_text())
    with pytest.raises(SystemExit, match="holds 2 runs after a pinned speed reading, the point 3"):
        shapes.slots_against_log(point)


def test_item_52s_three_points_again_on_the_xeon_vm() -> None:
    # item 52: -np 2 -b 64 short, -np 4 short (six real runs a load; the tables on runs 1-3)
    # and -np 4 long again; the other three points are item 50's set's. Each point whose
    # profile was at hand names its machine (the profile's hardware)
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item52.json", "llamacpp-matrix-epyc-item50.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    again = {"np2_b64/short", "default/short", "default/long"}
    for point in now:
        hardware = now[point].pop("hardware", None)
        assert (hardware is None) == (point == "np2_b64/long")
        if point not in again:
            assert now[point] == before[point]
    assert {p: sum(_inside(now[p]).values()) for p in sorted(again)} == {
        "default/long": 19, "default/short": 31, "np2_b64/short": 22
    }  # fmt: skip
    # the tables compare with three runs; the gate readings of all six are kept
    short = now["default/short"]["loads"]
    assert {len(v["table"][0]["runs"]) for v in short.values()} == {3}
    assert {len(v["machine"]) for v in short.values()} == {6}
    # -np 4 long's prompt steps ran over Table 1's charge at every load (item 46: under)
    long_loads = now["default/long"]["loads"].values()
    prompt = [v["steps_vs_charge"]["prompt"]["median"] for v in long_loads]
    assert min(prompt) > 1.02
    assert max(prompt) < 1.06


def test_item_53s_every_point_on_one_vm() -> None:
    # item 53: -np 2 -b 64 long again, so every published point ran on the Xeon VM (each
    # names its machine); the other five are item 52's set's
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item53.json", "llamacpp-matrix-epyc-item52.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    assert {r["hardware"] for r in now.values()} == {"Intel(R) Xeon(R) Processor (2 cores)"}
    assert all(now[p] == before[p] for p in now if p != "np2_b64/long")
    assert sum(_inside(now["np2_b64/long"]).values()) == 26
    # its decode steps: quicker than the charge at the Poisson loads, slower in the closed
    # loops (Tables 2 and 3, fitted on Poisson 0.6, fell to 23)
    steps = _decode_steps(now["np2_b64/long"])
    assert steps == [0.97, 0.97, 0.96, 1.01, 1.03]


def test_item_54s_passes_priced_at_their_own_rows() -> None:
    # item 54: the same runs simulated again with each decode pass priced as a lone step
    # of its rows (cost.decode_passes: each). Only the -np 4 points have decode steps of
    # several passes with more sequences than passes; every other point is item 53's
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item54.json", "llamacpp-matrix-epyc-item53.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    moved = {p for p in now if now[p] != before[p]}
    assert moved == {"default/short", "default/long"}
    for point in moved:  # the real runs and the fits' coefficients are the same
        assert now[point]["fits"] == before[point]["fits"]
        for load, got in now[point]["loads"].items():
            real = [{k: v for k, v in row.items() if k in ("metric", "real", "runs")}
                    for row in got["table"]]  # fmt: skip
            was = [{k: v for k, v in row.items() if k in ("metric", "real", "runs")}
                   for row in before[point]["loads"][load]["table"]]  # fmt: skip
            assert real == was
    inside = {p: sum(_inside(now[p]).values()) for p in sorted(moved)}
    assert inside == {"default/long": 19, "default/short": 32}
    # the 3-in-2 decode steps, measured / charged, each | together (llamacpp_steps.py
    # --passes): over the charge together, under it each, at -np 4 short's Poisson loads
    kept = (validation / "llamacpp-passes-item54.txt").read_text().split("default_short:")[1]
    for load in ("poisson_0.3", "poisson_0.6"):
        line = next(x for x in kept.splitlines() if x.strip().startswith(load))
        cell = line.split("b3/p2 ")[1].split(";")[0]
        each, together = (float(x) for x in cell.split(") ")[1].split(" | "))
        assert 0.97 <= each < 1.0 < 1.01 < together <= 1.04


def test_item_55s_np4_points_again_with_the_split_probe() -> None:
    # item 55: -np 4 short and long run again, their profiles with three decoders in a
    # pass of two beside a pass of one (grid.split_decode_batch); the other four points
    # are item 54's set's
    validation = ROOT / "docs" / "validation"
    now = _run_again("llamacpp-matrix-epyc-item55.json", "llamacpp-matrix-epyc-item54.json",
                     {"default/short": ("2026-12-05 20:16 UTC", 31),
                      "default/long": ("2026-12-05 20:48 UTC", 33)})  # fmt: skip
    # -np 4 long's prompt steps at the Poisson loads ran at Table 1's charge (item 52: over)
    loads = now["default/long"]["loads"]
    prompt = [round(loads[k]["steps_vs_charge"]["prompt"]["median"], 2)
              for k in ("poisson_0.3", "poisson_0.6", "poisson_0.9")]  # fmt: skip
    assert prompt == [0.98, 0.99, 0.99]
    # the split probe: 1.02 x each's charge at both points (llamacpp_steps.py --passes)
    kept = (validation / "llamacpp-passes-item55.txt").read_text().splitlines()
    probes = [line for line in kept if line.strip().startswith("profile")]
    assert len(probes) == 2
    for line in probes:
        each, together = line.split("b3/p2 ")[1].split(";")[0].split(") ")[1].split(" | ")
        assert float(each) == 1.02
        assert 0.97 < float(together) < 1.02


def test_item_56s_gap_from_every_split_shape() -> None:
    # item 56: item 55's runs again, the gap between passes taken from every decode row
    # and step of several passes (the split probe's 2 + 1 rows too); only the -np 4
    # points have such steps
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item56.json", "llamacpp-matrix-epyc-item55.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    assert {p for p in now if now[p] != before[p]} == {"default/short", "default/long"}
    assert {p: sum(_inside(now[p]).values()) for p in ("default/short", "default/long")} == {
        "default/short": 31, "default/long": 33
    }  # fmt: skip
    kept = (validation / "llamacpp-passes-item56.txt").read_text().splitlines()

    def ratios(shape: str, loads: tuple[str, ...]) -> list[float]:
        """measured / each's charge of *shape* on the lines of *loads* (or the probes)."""
        lines = [x for x in kept if x.strip().startswith(loads) and f"{shape} " in x]
        cells = [x.split(f"{shape} ")[1].split(";")[0] for x in lines]
        return [float(c.split(") ")[1].split(" | ")[0]) for c in cells]

    assert ratios("b3/p2", ("profile",)) == [1.01, 1.01]
    assert ratios("b2/p2", ("profile",)) == [0.98, 0.99]
    poisson = ("poisson_0.3", "poisson_0.6", "poisson_0.9")
    assert 0.99 <= min(ratios("b2/p2", poisson)) <= max(ratios("b2/p2", poisson)) <= 1.01
    assert 0.98 <= min(ratios("b3/p2", poisson)) <= max(ratios("b3/p2", poisson)) <= 1.02


def test_item_56s_set_at_the_speeds_read_and_its_bands() -> None:
    # the published set (item 56, every point on the Xeon VM) priced at each speed
    # llamacpp_at_speed.py reads, and its bands of 9 draws (llamacpp_noise.py), kept in
    # llamacpp-at-speed-item56.json: on this quieter host each load's mean step lies 1.3 %
    # from its point's level (item 47's set: 3.1 %), the lone reading strays 1.1 % from
    # it, and the lone reading now does better than the full batch's
    totals = {"runs": 186, "mean": 188, "gate": 179, "gate-all": 179, "speed": 182,
              "speed-batch": 177, "one-run": 169}  # fmt: skip
    kept = _set_at_speed(
        "item56", "llamacpp-matrix-epyc-item56.json", (172, totals),  # (published until 58)
        {"speed": [-0.009, 0.011], "speed-batch": [0.006, 0.013], "level": [0.013]},
        {"": {"T1": 152, "T2": 115, "T3": 108}, " --session": {"T1": 168, "T3": 142},
         "speed-batch": {"T1": 180}, "speed": {"T1": 171}},
    )  # fmt: skip
    printed = kept["noise_printed"]["by_flags"]
    # the draws vary about as much as the real repeats (run to run, Table 1)
    assert "T1 1.6% / 1.8%" in printed["--wander"][-1]
    assert "T1 1.6% / 2.5%" in printed["--wander --session"][-1]


def test_item_58s_slots_replayed_in_the_servers_launch_order() -> None:
    # item 58: the replay gives a released slot to the waiting request whose first token
    # came first, and --slots compares in that order (llamacpp_prompt_shapes.py --slots on
    # every point, kept): at Poisson 0.9, 570 of the 576 requests sit in the server's slot
    # seen in the mirror (item 57's replay: 483)
    kept = (ROOT / "docs" / "validation" / "llamacpp-slots-item58.txt").read_text()
    got: dict[str, list[int]] = {}
    for line in kept.splitlines():
        if ", mirrored " in line:
            load = line.split()[0]
            n, mirrored = int(line.split()[2]), int(line.rsplit(" ", 1)[1])
            got.setdefault(load, [0, 0])
            got[load] = [got[load][0] + mirrored, got[load][1] + n]
    assert got == {"poisson_0.3": [536, 576], "poisson_0.6": [570, 576],
                   "poisson_0.9": [570, 576], "closed_4": [386, 576],
                   "closed_8": [268, 576]}  # fmt: skip


def test_item_58s_replay_moves_only_the_step_checks() -> None:
    # item 58: the same runs with the slots replayed in launch order: every table's cells
    # and every fit as item 56's; only compare --steps' figures move, at the closed loops
    # and Poisson 0.9, by at most 0.2 %
    validation = ROOT / "docs" / "validation"
    sets = ("llamacpp-matrix-epyc-item58.json", "llamacpp-matrix-epyc-item56.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    for p in now:
        for key in ("fits", "table2", "table3"):
            assert now[p][key] == before[p][key]
        assert _inside(now[p]) == _inside(before[p])
        for load, got in now[p]["loads"].items():
            a = got["steps_vs_charge"]["decode"]["median"]
            b = before[p]["loads"][load]["steps_vs_charge"]["decode"]["median"]
            assert abs(a - b) <= 0.002


def test_item_59s_requests_sent_together_in_launch_order() -> None:
    # item 59: requests sent within StepRebuild.sent_together_ms of one another, before
    # any first token, replayed in the order their first tokens show: the closed loops'
    # slots match the server's log (2 759 of 2 880 requests, item 58: 2 330), and their
    # rebuilt steps no longer hold two decoders in one slot (no 4-in-2 at -np 4, no
    # 2-in-2 at -np 2)
    validation = ROOT / "docs" / "validation"
    got: dict[str, int] = {}
    for line in (validation / "llamacpp-slots-item59.txt").read_text().splitlines():
        if ", mirrored " in line:
            load = line.split()[0]
            got[load] = got.get(load, 0) + int(line.rsplit(" ", 1)[1])
    assert got == {"poisson_0.3": 536, "poisson_0.6": 570, "poisson_0.9": 570,
                   "closed_4": 525, "closed_8": 558}  # fmt: skip
    shapes: dict[str, set[str]] = {}  # point -> the runs' (sequences/passes) cells
    for line in (validation / "llamacpp-passes-item59.txt").read_text().splitlines():
        if not line.startswith(" "):
            point = line.split(":")[0]
        elif not line.strip().startswith("profile"):
            shapes.setdefault(point, set()).update(x.split()[0] for x in line.split("; ")[1:])
            shapes[point].add(line.split()[1])
    assert shapes["np2_b64_short"] == shapes["np2_b64_long"] == {"b1/p1", "b2/p1"}
    assert not {"b4/p2", "b4/p3"} & (shapes["default_short"] | shapes["default_long"])
    # the tables and fits are item 58's
    sets = ("llamacpp-matrix-epyc-item59.json", "llamacpp-matrix-epyc-item58.json")
    now, before = (json.loads((validation / f).read_text())["results"] for f in sets)
    for p in now:
        assert now[p]["fits"] == before[p]["fits"]
        assert _inside(now[p]) == _inside(before[p])


def test_item_60s_np2_points_again_on_a_slower_host() -> None:
    # item 60: -np 2 -b 64 short and long run again with the same command; the host ran
    # slower than at their profiles (host_noise.py's work 44 and 48 ms before them, 41 on a
    # quiet host), their decode steps 1.03-1.17 and 0.99-1.08 x Table 1's charge; the
    # other four points are item 59's set's
    validation = ROOT / "docs" / "validation"
    again = {"np2_b64/short": ("2026-12-05 22:47 UTC", 23),
             "np2_b64/long": ("2026-12-05 23:38 UTC", 21)}  # fmt: skip
    now = _run_again("llamacpp-matrix-epyc-item60.json", "llamacpp-matrix-epyc-item59.json", again)
    steps = {p: _decode_steps(now[p]) for p in sorted(again)}
    assert steps == {"np2_b64/long": [0.99, 1.01, 1.07, 1.03, 1.08],
                     "np2_b64/short": [1.03, 1.05, 1.06, 1.17, 1.09]}  # fmt: skip
    # the speed gate gave up (its 7 probes) before 4 and 6 runs, the host 1.06-1.17 x slow
    gave_up = {p: sorted(round(x, 2) for x, n in _gate_readings(now[p]) if n == 7)
               for p in sorted(again)}  # fmt: skip
    assert gave_up == {"np2_b64/long": [1.06, 1.09, 1.11, 1.11, 1.12, 1.14],
                       "np2_b64/short": [1.11, 1.11, 1.13, 1.17]}  # fmt: skip
    noise = [line.split() for line in (validation / "llamacpp-host-noise.txt").read_text()
             .splitlines() if not line.startswith("#")]  # fmt: skip
    assert [(x[3], x[4], x[5], x[9]) for x in noise if x[5] == "60"] == [
        ("np2_b64/short", "item", "60", "44"), ("np2_b64/long", "item", "60", "48")
    ]  # fmt: skip
    assert min(int(x[9]) for x in noise) == 41
    # short's closed 4 (steps 1.17 x): its p50s 14-15 % short, its throughput 17 % high
    table = {
        r["metric"]: round(r["error"], 2)
        for r in now["np2_b64/short"]["loads"]["closed_4"]["table"]
    }
    assert [table[m] for m in ("median_ttft_ms", "median_tpot_ms", "median_e2el_ms",
                               "output_throughput")] == [-0.14, -0.15, -0.14, 0.17]  # fmt: skip
    kept = _cells(validation / "llamacpp-matrix-epyc-item60.json")
    assert _by_point(kept)[NP2, "short"][3] == "10 %"


def test_item_60s_set_at_the_speeds_read_and_its_bands() -> None:
    # item 60's set (published until item 61) at each speed llamacpp_at_speed.py reads, its
    # bands of 9 draws (llamacpp_noise.py), kept in llamacpp-at-speed-item60.json: priced
    # at each load's own median step, both -np 2 -b 64 points' misses go (short 35 of 35,
    # long 31); the band from the profile's minutes no longer covers a host that slowed
    # after them (T1 142, item 56: 168), the full batch's reading before each run does
    totals = {"runs": 195, "mean": 197, "gate": 180, "gate-all": 183, "speed": 184,
              "speed-batch": 189, "one-run": 167}  # fmt: skip
    kept = _set_at_speed(
        "item60", "llamacpp-matrix-epyc-item60.json", (168, totals),
        {"speed": [-0.013, 0.019], "speed-batch": [0.0, 0.011], "level": [0.023]},
        {"": {"T1": 119, "T2": 146, "T3": 139}, " --session": {"T1": 142, "T3": 152},
         "speed-batch": {"T1": 188}, "speed": {"T1": 163}},
    )  # fmt: skip
    assert _points_at_speed(kept, "runs", ("np2_b64/short", "np2_b64/long")) == {
        "np2_b64/short": 35, "np2_b64/long": 31}  # fmt: skip
    assert _points_at_speed(kept, "mean", ("np2_b64/short",)) == {"np2_b64/short": 35}


def test_item_61s_kvu_points_again_with_the_host_read() -> None:
    # item 61: -kvu short and long run again with --host-noise 20; short's first profile
    # ran in a slow spell, the full-batch check took it again, and the second read the host
    # 3 % quicker than its runs found it (steps 1.01-1.04 x the charge, which the gate's 5 %
    # let through): 21 of 35 from probes (item 49: 31); long on a quiet host 28 (item 48: 29)
    validation = ROOT / "docs" / "validation"
    again = {"kvu/short": ("2026-12-06 01:10 UTC", 21), "kvu/long": ("2026-12-06 01:44 UTC", 28)}
    now = _run_again("llamacpp-matrix-epyc-item61.json", "llamacpp-matrix-epyc-item60.json", again)
    steps = {p: _decode_steps(now[p]) for p in sorted(again)}
    assert steps == {"kvu/long": [1.01, 1.02, 1.01, 1.0, 1.0],
                     "kvu/short": [1.01, 1.01, 1.02, 1.03, 1.04]}  # fmt: skip
    # the matrix kept host_noise.py's figures with each point; the log file has them too
    noise = {x.split()[3]: x.split() for x in (validation / "llamacpp-host-noise.txt")
             .read_text().splitlines() if " item 61 " in x}  # fmt: skip
    for p in again:
        kept, line = now[p]["host_noise"], noise[p]
        assert (kept["seconds"], round(kept["median_ms"]), round(kept["p90_over_p10"], 2)) == (
            20.0,
            int(line[9]),
            float(line[-1]),
        )
        assert f"{round(kept['min_ms'])}-{round(kept['max_ms'])}" == line[12]
    assert round(now["kvu/short"]["host_noise"]["max_ms"]) == 118  # half speed, its last 8 s
    # short: the slow profile set aside by the full-batch check, the second one quicker
    gate = now["kvu/short"]["gate"]
    assert [s["profile_step_ms"] for s in gate["superseded"]] == [23.6]
    assert gate["batch_check"] == [{"profile_ms": 37.3, "check_ms": 34.7},
                                   {"profile_ms": 34.2, "check_ms": 34.2}]  # fmt: skip
    lone = [m["speed_lone"] for v in now["kvu/short"]["loads"].values() for m in v["machine"]]
    assert (min(lone), max(lone)) == (1.015, 1.047)
    assert [n for _, n in _gate_readings(now["kvu/short"])] == [1] * 14 + [3]
    # short's misses: 12 p90s and Poisson 0.9's median TTFT and E2E; long's 7, all p90s
    missed = {p: [(load, m) for (load, m), ok in _inside(now[p]).items() if not ok]
              for p in again}  # fmt: skip
    assert len(missed["kvu/short"]) == 14
    assert [x for x in missed["kvu/short"] if not x[1].startswith("p90")] == [
        ("poisson_0.9", "median_ttft_ms"),
        ("poisson_0.9", "median_e2el_ms"),
    ]
    assert len(missed["kvu/long"]) == 7
    assert all(m.startswith("p90") for _, m in missed["kvu/long"])
    # the cells packed on long's runs (--resimulate --kv-layout packed, kept): 23, not 28
    packed = json.loads((validation / "llamacpp-matrix-epyc-item61-packed.json").read_text())
    packed = packed["results"]
    assert all(packed[p] == now[p] for p in now if p != "kvu/long")
    assert sum(_inside(packed["kvu/long"]).values()) == 23
    assert packed["kvu/long"]["fits"]["probes"] == now["kvu/long"]["fits"]["probes"]

    def long_prompts(res: dict) -> list[float]:
        """Each load's prompt steps of 257+ tokens over Table 1's charge."""
        return [round(v["steps_vs_charge"]["prompt_by_tokens"]["257+"]["median"], 2)
                for v in res["kvu/long"]["loads"].values()]  # fmt: skip

    assert long_prompts(packed) == [1.02, 1.08, 1.11, 1.09, 1.1]
    assert long_prompts(now) == [1.02, 1.06, 1.04, 1.04, 1.04]


def test_host_noise_reading_is_kept_with_a_point(tmp_path: Path) -> None:
    # item 60: validate_cpu.py --matrix --host-noise SECONDS runs validation/host_noise.py
    # before each point's server and keeps its figures (the times in host_noise.json)
    matrix = validation_module("llamacpp_matrix")
    log: list[str] = []
    got = matrix.host_noise(tmp_path, 0.5, log)
    assert set(got) == {"seconds", "median_ms", "min_ms", "max_ms", "p90_over_p10"}
    assert got["seconds"] == 0.5
    assert 0 < got["min_ms"] <= got["median_ms"] <= got["max_ms"]
    assert got["p90_over_p10"] >= 1.0
    kept = json.loads((tmp_path / "host_noise.json").read_text())
    assert {k: kept[k] for k in got} == got
    assert len(kept["times_ms"]) >= 1
    assert log == [f"python validation/host_noise.py 0.5 --json {tmp_path}/host_noise.json"]
    with pytest.raises(SystemExit, match=r"^--host-noise: got -1, must be 0 \(off\) or more$"):
        matrix.main(["--host-noise", "-1"])
    # --save-price is an ablation of stored points: only with --resimulate, never below 0
    for argv in (["--save-price", "0.01"], ["--resimulate", "--save-price", "-1"]):
        with pytest.raises(SystemExit, match=r"^--save-price: got -?0?\.?\d+, must be 0 or "
                                             r"more, and only with --resimulate$"):  # fmt: skip
            matrix.main(argv)


def test_item_63_charges_the_prompt_cache_save_from_each_points_probe() -> None:
    # item 63: each point's prompt-cache probe, taken alone against its server after its
    # runs (llamacpp_save_probe.py, kept), fitted by Theil-Sen; Table 1 charges it on the
    # same stored runs (--resimulate): 157 -> 160; Tables 2 and 3 do not (their runs'
    # steps hold the saves) and stay as they were
    import yaml

    from lyra_simpy.calibration.fitfile import format_report
    from lyra_simpy.calibration.fitmodel import ProfileFit
    from lyra_simpy.calibration.savefit import fitted_save

    validation = ROOT / "docs" / "validation"
    probes = json.loads((validation / "llamacpp-save-probe-item63.json").read_text())
    now = json.loads((validation / "llamacpp-matrix-epyc-item63.json").read_text())["results"]
    was = json.loads((validation / "llamacpp-matrix-epyc-item61.json").read_text())["results"]
    slopes = {}
    for name, probe in probes.items():
        rows = np.array(probe["rows"], dtype=float)
        fit = fitted_save(rows[:, 0], rows[:, 1])
        assert fit is not None
        # (the record's fit was taken on the waits before the CSV's 4 decimals)
        kept = probe["fit"]
        assert fit.ms_per_token == pytest.approx(kept["ms_per_token"], abs=1e-5)
        assert fit.median_wait_ms == {
            int(k): pytest.approx(v, abs=2e-3) for k, v in kept["median_wait_ms"].items()
        }
        assert probe["sizes"] == [32, 256, 512, 768]
        assert probe["started"].startswith("2026-12-06T03:1")
        point = name.replace("_s", "/s").replace("_l", "/l")
        charged = now[point]["prompt_save"]["ms_per_token"]
        assert charged == pytest.approx(fit.ms_per_token, abs=1e-5)
        slopes[point] = fit.ms_per_token
        # every point's wait flattens past 512 tokens
        med = fit.median_wait_ms
        assert med[768] - med[512] < med[512] - med[256]
    assert min(slopes.values()) == pytest.approx(0.0146, abs=1e-4)
    assert max(slopes.values()) == pytest.approx(0.0227, abs=1e-4)
    table1 = {p: sum(_inside(now[p]).values()) for p in now}
    assert table1 == {"default/short": 30, "default/long": 34, "kvu/short": 22,
                      "kvu/long": 30, "np2_b64/short": 23, "np2_b64/long": 21}  # fmt: skip
    for p in now:
        assert {k for k in now[p] if now[p][k] != was[p].get(k)} == {"loads", "prompt_save"}
        decode = [[round(v["steps_vs_charge"]["decode"]["median"], 3)
                   for v in r[p]["loads"].values()] for r in (now, was)]  # fmt: skip
        assert decode[0] == decode[1]  # decode-only steps carry no save
    moved = {(p, c, ok) for p in now for c, ok in _inside(now[p]).items()
             if ok != _inside(was[p])[c]}  # fmt: skip
    assert moved == {
        ("default/short", ("poisson_0.3", "p90_ttft_ms"), False),
        ("default/short", ("poisson_0.9", "p90_ttft_ms"), False),
        ("default/short", ("poisson_0.9", "p90_e2el_ms"), True),
        ("default/long", ("poisson_0.6", "p90_e2el_ms"), True),
        ("kvu/long", ("poisson_0.9", "p90_ttft_ms"), True),
        ("kvu/long", ("poisson_0.9", "p90_tpot_ms"), True),
        ("kvu/short", ("poisson_0.6", "p90_tpot_ms"), True),
    }
    # docs/calibration.md prints -np 4 long's fit as calibrate reports it
    fit = fitted_save(*np.array(probes["default_long"]["rows"], dtype=float).T)
    synthetic = yaml.safe_load((ROOT / "tests" / "data" / "synthetic_fit.yaml").read_text())
    line = format_report(ProfileFit.model_validate({**synthetic, "prompt_save": fit.model_dump()}))
    said = [x for x in line.splitlines() if x.startswith("llama.cpp's prompt cache save")]
    assert said[0] in (ROOT / "docs" / "calibration.md").read_text()


def test_item_64s_long_points_again_with_the_probe_in_their_profiles() -> None:
    # item 64: -np 4 long and -kvu long run again on a slower host (host_noise.py 59 and
    # 60 ms, 41 when quiet), each profile ending with the prompt-cache probe (item 63).
    # The probe's figure swings with the cache's state: -np 4 long's first two profiles
    # (set aside by the full-batch check) read ~0.10 ms a token, its third, after the
    # cache began evicting, 0.012; -kvu long's, before any eviction, 0.10
    from lyra_simpy.calibration.savefit import fitted_save

    validation = ROOT / "docs" / "validation"
    again = {"default/long": ("2026-12-06 04:37 UTC", 30), "kvu/long": ("2026-12-06 05:18 UTC", 32)}
    now = _run_again("llamacpp-matrix-epyc-item64.json", "llamacpp-matrix-epyc-item63.json",
                     again)  # fmt: skip
    kept = json.loads((validation / "llamacpp-save-in-profile-item64.json").read_text())
    slopes = {}
    for point, got in kept.items():
        for name, probe in got["profiles"].items():
            rows = np.array(probe["rows"], dtype=float)
            fit = fitted_save(rows[:, 0], rows[:, 1])
            assert fit is not None
            assert fit.ms_per_token == probe["fit"]["ms_per_token"]
            slopes[point, name] = round(fit.ms_per_token, 3)
            assert len(probe["log_times"]) == 5
    assert slopes == {
        ("default_long", "profile-superseded-1.save.csv"): 0.106,
        ("default_long", "profile-superseded-2.save.csv"): 0.103,
        ("default_long", "profile.save.csv"): 0.012,
        ("kvu_long", "profile.save.csv"): 0.104,
    }
    # the kept profiles' probes are what Table 1 charges (the fit reads the CSV's rows)
    for p in again:
        probe = kept[p.replace("/", "_")]["profiles"]["profile.save.csv"]["fit"]
        assert now[p]["prompt_save"]["ms_per_token"] == pytest.approx(probe["ms_per_token"])

    def minutes(stamp: str) -> float:
        """A llama-server log time (minutes.seconds.ms.us since it started) in minutes."""
        m, sec, _ = stamp.split(".", 2)
        return int(m) + int(sec) / 60

    # -np 4 long's cache began evicting between its second and third probes; -kvu long's
    # after its probe, during its runs
    long4, kvu = kept["default_long"], kept["kvu_long"]
    starts = [minutes(v["log_times"][0]) for v in long4["profiles"].values()]
    assert starts[1] < minutes(long4["first_eviction"]) < starts[2]
    probe = kvu["profiles"]["profile.save.csv"]["log_times"]
    assert minutes(probe[-1]) < minutes(kvu["first_eviction"])
    # the lone requests at Poisson 0.3 waited ~97 ms beyond prompt_ms at both (item 55's
    # and item 61's runs: 26 and 21 ms)
    lone = json.loads((validation / "llamacpp-launch-save-item64.json").read_text())
    pts = ("default_long", "kvu_long")
    assert [lone[p]["lone"]["gap_median_ms"] for p in pts] == [97.4, 96.7]
    assert [lone[p]["lone"]["over_table1_median_ms"] for p in pts] == [107.2, 43.2]
    _noise_as_kept(now, again, 64)


def test_item_65s_np2_points_again_and_where_the_lone_wait_goes() -> None:
    # item 65: -np 2 -b 64 short and long run again with the prompt-cache probe in their
    # profiles (host_noise.py 49 and 46 ms); their probes read the cheap price (no
    # eviction in either log: the caches did not fill)
    again = {"np2_b64/short": ("2026-12-06 06:24 UTC", 21),
             "np2_b64/long": ("2026-12-06 06:57 UTC", 23)}  # fmt: skip
    now = _run_again("llamacpp-matrix-epyc-item65.json", "llamacpp-matrix-epyc-item64.json",
                     again)  # fmt: skip
    assert _save_probes(now, again) == [0.0186, 0.0166]
    _noise_as_kept(now, again, 65)
    # where the lone requests' wait went and what a page costs: test_llamacpp_lone_wait.py,
    # test_llamacpp_launch_save.py and test_host_memory.py read item 65's kept outputs


def test_item_66s_short_points_again_with_the_probe_in_their_profiles() -> None:
    # item 66: -np 4 short and -kvu short run again with the prompt-cache probe in their
    # profiles (host_noise.py 53 and 49 ms): every point's Table 1 now charges its own
    # profile's probe; -kvu short's steps ran within 2 % of the charge (1.01-1.04 before)
    again = {"default/short": ("2026-12-06 07:27 UTC", 33),
             "kvu/short": ("2026-12-06 07:45 UTC", 31)}  # fmt: skip
    now = _run_again("llamacpp-matrix-epyc-item66.json", "llamacpp-matrix-epyc-item65.json",
                     again)  # fmt: skip
    assert _save_probes(now, again) == [0.0144, 0.0141]
    assert all(v["prompt_save"]["prompts"] == 20 for v in now.values())
    _noise_as_kept(now, again, 66)


def test_item_67s_points_again_with_the_slots_emptied_before_each_run() -> None:
    # item 67: -kvu long, -np 2 -b 64 long, -kvu short and -np 4 short run again with
    # --settle (every slot answered before each run, highest id first), and every point
    # re-simulated with slots released in one step given out lowest id first
    validation = ROOT / "docs" / "validation"
    now, was = (json.loads((validation / f"llamacpp-matrix-epyc-{f}.json").read_text())["results"]
                for f in ("item67", "item66"))  # fmt: skip
    again = {"default/short": ("2026-12-06 10:25 UTC", 26),
             "kvu/short": ("2026-12-06 10:01 UTC", 23),
             "kvu/long": ("2026-12-06 09:06 UTC", 32),
             "np2_b64/long": ("2026-12-06 09:43 UTC", 33)}  # fmt: skip
    assert {p: (now[p]["finished"], sum(_inside(now[p]).values())) for p in again} == again
    _all_settled(now, again)
    # the others: the same runs; re-simulated, the same cells
    for p in set(now) - set(again):
        assert now[p]["finished"] == was[p]["finished"]
        assert _inside(now[p]) == _inside(was[p])
    # the long points' probes read the dear page (item 65), the short ones the cheap
    probes = _save_probes(now, again)
    assert probes == [0.0145, 0.0134, 0.0907, 0.1058]
    _noise_as_kept(now, again, 67)


def test_item_68s_points_again_on_a_host_whose_speed_swung() -> None:
    # item 68: -np 2 -b 64 short and -np 4 long run again with --settle on a fresh AMD
    # EPYC VM; each profile was taken three times (its full-batch row off the check by
    # 8-23 %), and the runs' decode steps then ran 0.98-1.21 x and 0.86-0.98 x the charge
    validation = ROOT / "docs" / "validation"
    again = {"np2_b64/short": ("2026-12-06 11:49 UTC", 25),
             "default/long": ("2026-12-06 12:47 UTC", 22)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix-epyc-item68.json",
                             "llamacpp-matrix-epyc-item67.json", again, 68)  # fmt: skip
    steps = {p: _decode_steps(now[p]) for p in again}
    assert steps == {"np2_b64/short": [0.98, 1.06, 1.15, 1.18, 1.21],
                     "default/long": [0.98, 0.87, 0.86, 0.89, 0.9]}  # fmt: skip
    # the save probe: the dear page at -np 2 -b 64 short, the cheap one at -np 4 long
    assert _save_probes(now, again) == [0.1151, 0.0157]
    # their raw runs were kept in the repository; -np 4 long's archive is item 81's since,
    # -np 2 -b 64 short's item 79's (item 68's stay in git history, as of commit 19163a7)
    index = json.loads((validation / "points" / "index.json").read_text())
    assert index["np2_b64/short"]["finished"] == "2026-12-07 05:08 UTC"
    assert index["default/long"]["finished"] == "2026-12-07 08:06 UTC"


def test_item_69s_points_again_so_that_five_of_six_are_kept() -> None:
    # item 69: -np 4 short, -kvu short and -np 2 -b 64 long run again with --settle on the
    # same AMD EPYC VM, so that their raw runs live in the repository; only -kvu long's are
    # still the Xeon's (item 67), not kept
    validation = ROOT / "docs" / "validation"
    again = {"default/short": ("2026-12-06 14:23 UTC", 30),
             "kvu/short": ("2026-12-06 14:48 UTC", 31),
             "np2_b64/long": ("2026-12-06 15:33 UTC", 24)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix-epyc-item69.json",
                             "llamacpp-matrix-epyc-item68.json", again, 69)  # fmt: skip
    steps = {p: _decode_steps(now[p]) for p in again}
    assert steps == {"default/short": [1.09, 1.04, 1.03, 1.01, 0.97],
                     "kvu/short": [0.98, 0.98, 0.98, 0.99, 1.01],
                     "np2_b64/long": [1.04, 1.03, 1.0, 0.95, 1.04]}  # fmt: skip
    # the gate took more than one probe before 5, 5 and 10 runs, read up to 1.37-1.48 x,
    # and gave up (its last probe still outside 5 %) before 2, 0 and 2 runs
    gate = {p: _gate_readings(now[p]) for p in again}
    assert [sum(n > 1 for _, n in g) for g in gate.values()] == [5, 5, 10]
    top = [max(x for lo in now[p]["loads"].values() for m in lo["machine"]
               for x in m["gate_readings"] if x) / now[p]["gate"]["run_ref_ms"]
           for p in again]  # fmt: skip
    assert [round(t, 2) for t in top] == [1.37, 1.44, 1.48]
    gave_up = {p: [round(x, 2) for x, _ in g if abs(x - 1) > 0.05] for p, g in gate.items()}
    assert gave_up == {"default/short": [1.37, 0.95], "kvu/short": [], "np2_b64/long": [1.37, 1.1]}
    # the save probe: the dear page at -np 4 short, between the two at the others
    probes = _save_probes(now, again)
    assert probes == [0.0867, 0.0217, 0.0285]
    # -np 2 -b 64 long's Poisson 0.9 read run by run: the gate's lone step before and after
    # each run (run 2 at the reference; the document compares each run with Table 1 alone)
    np2 = now["np2_b64/long"]
    ref = np2["gate"]["run_ref_ms"]
    read = [(round(m["step_before"] / ref, 2), round(m["step_after"] / ref, 2))
            for m in np2["loads"]["poisson_0.9"]["machine"]]  # fmt: skip
    assert read == [(1.02, 1.11), (0.98, 1.0), (1.1, 1.1)]
    index = json.loads((validation / "points" / "index.json").read_text())
    assert set(index) == set(now)  # (-kvu long since item 70)
    # item 72 replaced -np 4 short's and -np 2 -b 64 long's archives (these are in git
    # history, d6d6d50), item 76 -kvu short's (19163a7) and item 79 item 76's (adad753)
    assert index["kvu/short"]["finished"] == "2026-12-07 05:34 UTC"
    assert now["kvu/long"]["hardware"].startswith("Intel(R) Xeon(R)")


def test_item_70s_kvu_long_again_so_that_all_six_are_kept() -> None:
    # item 70: -kvu long run again with --settle on the same AMD EPYC VM, so that every
    # point's raw runs live in the repository and the whole matrix can be simulated again
    # from a clone
    validation = ROOT / "docs" / "validation"
    again = {"kvu/long": ("2026-12-06 17:11 UTC", 29)}
    now = _epyc_points_again("llamacpp-matrix-epyc-item70.json",
                             "llamacpp-matrix-epyc-item69.json", again, 70)  # fmt: skip
    assert _decode_steps(now["kvu/long"]) == [1.05, 1.09, 0.98, 1.01, 1.03]
    assert _prompt_steps(now["kvu/long"]) == [1.02, 1.03, 0.95, 0.99, 1.0]
    assert {r["hardware"] for r in now.values()} == {"AMD EPYC (2 cores)"}  # (all six)
    # the gate took more than one probe before 5 runs, read up to 1.07 x and let every run
    # through within 5 %
    (gate,) = (_gate_readings(now[p]) for p in again)
    assert sum(n > 1 for _, n in gate) == 5
    assert all(abs(x - 1) <= 0.05 for x, _ in gate)
    ref = now["kvu/long"]["gate"]["run_ref_ms"]
    top = max(x for lo in now["kvu/long"]["loads"].values() for m in lo["machine"]
              for x in m["gate_readings"] if x) / ref  # fmt: skip
    assert round(top, 2) == 1.07
    assert _save_probes(now, again) == [0.0858]  # (the dear page, as -np 4 short's)
    index = json.loads((validation / "points" / "index.json").read_text())
    assert set(index) == set(now)
    # (-kvu long's archive held these runs until item 76 ran the point again: commit
    # 19163a7 has them; item 81's runs since, commit 4a8cc90 has item 76's)
    assert index["kvu/long"]["finished"] == "2026-12-07 08:43 UTC"
    # cost.prompt_speed's docstring: four of -np 4 long's five loads took their decode
    # steps at 0.86-0.90 x the charge and their prompt steps at 1.00-1.02 x
    long = now["default/long"]["loads"]
    by_phase = [(round(v["steps_vs_charge"]["decode"]["median"], 2),
                 round(v["steps_vs_charge"]["prompt"]["median"], 2))
                for load, v in long.items() if load != "poisson_0.3"]  # fmt: skip
    assert by_phase == [(0.87, 1.0), (0.86, 1.01), (0.89, 1.02), (0.9, 1.02)]
    doc = " ".join((ROOT / "src" / "lyra_simpy" / "cost" / "profiled.py").read_text().split())
    assert (
        "took their decode steps at 0.86-0.90 × what the profile charged and their "
        "prompt steps at 1.00-1.02 ×" in doc
    )


def test_item_70s_speed_per_phase_attributes_most_of_what_is_left() -> None:
    # each load priced with its decode-only steps at their own median ratio and its steps
    # with a prompt at theirs (--ratio phase, cost.prompt_speed) holds 196 of 210, against
    # 174 at the decode steps' ratio alone: -np 4 long 23 -> 33, and -np 2 -b 64 long's
    # Poisson 0.9 (decode 1.00 x, prompts 1.04 x) 2 -> 7; from one load run's two means
    # (one-run-phase, a prediction) 161, against 152 at its decode mean alone
    kept = json.loads((ROOT / "docs" / "validation" / "llamacpp-at-speed-item70.json").read_text())
    assert _points_at_speed(kept, "runs", ("default/long",)) == {"default/long": 23}
    assert _points_at_speed(kept, "phase", tuple(kept["phase"]["points"])) == {
        "default/short": 33, "default/long": 33, "np2_b64/long": 33, "kvu/long": 33,
        "kvu/short": 32, "np2_b64/short": 32}  # fmt: skip
    np2 = {r: kept[r]["points"]["np2_b64/long"]["poisson_0.9"] for r in ("runs", "phase")}
    assert [v["at_speed"]["in_target"] for v in np2.values()] == [2, 7]
    assert (np2["phase"]["ratio"], np2["phase"]["prompt_ratio"]) == (1.0017, 1.0374)
    long = kept["phase"]["points"]["default/long"]
    kvu = kept["phase"]["points"]["kvu/long"]
    apart = {p: [round(v["prompt_ratio"] / v["ratio"], 2) for v in loads.values()]
             for p, loads in (("default/long", long), ("kvu/long", kvu))}  # fmt: skip
    assert apart == {"default/long": [1.1, 1.14, 1.17, 1.14, 1.14],
                     "kvu/long": [0.97, 0.94, 0.97, 0.98, 0.98]}  # fmt: skip
    # the 14 cells left: 11 p90s, two light loads' median TTFT and one throughput
    left = sorted((p, load, m) for p, loads in kept["phase"]["points"].items()
                  for load, v in loads.items() for m in v["at_speed"]["missed"])  # fmt: skip
    assert len(left) == 14
    assert [x for x in left if not x[2].startswith("p90")] == [
        ("default/short", "poisson_0.3", "median_ttft_ms"),
        ("kvu/short", "poisson_0.3", "median_ttft_ms"),
        ("np2_b64/short", "closed_8", "output_throughput"),
    ]
    # -kvu long's own misses, in the document: Poisson 0.6 its three p90s (all 7 at its
    # runs' speed), Poisson 0.9 its median TTFT and two p90s
    point = json.loads(
        (ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item70.json").read_text()
    )
    rows = {load: {r["metric"]: (round(100 * r["error"], 1), round(100 * r["spread"], 1))
                   for r in v["table"]}
            for load, v in point["results"]["kvu/long"]["loads"].items()}  # fmt: skip
    assert rows["poisson_0.6"]["p90_ttft_ms"] == (-29.2, 17.8)
    assert rows["poisson_0.9"]["median_ttft_ms"] == (28.3, 9.0)
    assert kept["runs"]["points"]["kvu/long"]["poisson_0.6"]["at_speed"]["in_target"] == 7
    assert {load: v["table1"]["missed"] for load, v in kvu.items() if v["table1"]["missed"]} == {
        "poisson_0.6": ["p90_ttft_ms", "p90_tpot_ms", "p90_e2el_ms"],
        "poisson_0.9": ["median_ttft_ms", "p90_ttft_ms", "p90_e2el_ms"]}  # fmt: skip


def test_item_71s_prompt_reading_before_each_run_of_np4_long() -> None:
    # item 71: -np 4 long again, lyra-simpy speed --prompt 200 before each run beside the
    # lone and full-batch decode readings; both phases read before the runs hold 33 of 35
    validation = ROOT / "docs" / "validation"
    again = {"default/long": ("2026-12-06 18:21 UTC", 24)}
    now = _epyc_points_again("llamacpp-matrix-epyc-item71.json",
                             "llamacpp-matrix-epyc-item70.json", again, 71)  # fmt: skip
    point = now["default/long"]
    assert _decode_steps(point) == [1.05, 1.0, 0.94, 0.91, 0.92]
    assert _prompt_steps(point) == [0.96, 0.96, 0.97, 0.94, 0.96]
    gate = _gate_readings(point)
    assert sum(n > 1 for _, n in gate) == 9
    assert all(abs(x - 1) <= 0.05 for x, _ in gate)
    top = max(x for lo in point["loads"].values() for m in lo["machine"]
              for x in m["gate_readings"] if x) / point["gate"]["run_ref_ms"]  # fmt: skip
    assert round(top, 2) == 1.33
    assert _save_probes(now, again) == [0.0083]
    # the prompt reading before each run: 0.81-1.11 within Poisson 0.3, the loads' means
    # 0.84-0.95, below the runs' prompt steps (0.94-0.97)
    read = {load: [m["speed_prompt"] for m in v["machine"]] for load, v in point["loads"].items()}
    assert read["poisson_0.3"] == [0.884, 1.113, 0.81]
    means = [round(sum(r) / len(r), 2) for r in read.values()]
    assert (min(means), max(means)) == (0.84, 0.95)
    kept = json.loads((validation / "llamacpp-at-speed-phase-item71.json").read_text())
    assert kept["ratio"] == "speed-phase"
    loads = kept["points"]["default/long"]
    assert sum(v["at_speed"]["in_target"] for v in loads.values()) == 33
    assert sum(v["table1"]["in_target"] for v in loads.values()) == 24
    assert [v["prompt_ratio"] for v in loads.values()] == [
        round(sum(r) / len(r), 4) for r in read.values()]  # fmt: skip
    sets = json.loads((validation / "llamacpp-at-speed-item71.json").read_text())
    assert _points_at_speed(sets, "speed-batch", ("default/long",)) == {"default/long": 32}
    assert _points_at_speed(sets, "speed", ("default/long",)) == {"default/long": 19}
    assert _points_at_speed(sets, "phase", ("default/long",)) == {"default/long": 31}
    assert _points_at_speed(sets, "runs", ("default/long",)) == {"default/long": 32}
    # its profile taken three times: the full-batch check set two aside (its archive held
    # them until item 77 ran the point again; commit e545662 has it)
    assert len(point["gate"]["superseded"]) == 2
    # docs/calibration.md's example: the first prompt reading, its JSON kept apart since
    first = json.loads((validation / "llamacpp-speed-prompt-item71.json").read_text())
    assert first["speed"] == read["poisson_0.3"][0]
    assert (first["median_ms"], first["profile_ms"], first["speed"]) == (308.317, 348.888, 0.884)
    assert (min(first["steps_ms"]), max(first["steps_ms"])) == (294.97, 362.197)
    calibration = (ROOT / "docs" / "calibration.md").read_text()
    assert "host now: 308.32 ms, the median of 6 lone prompts of 200 tokens (294.97-362.20); " \
           "the profile's 348.89 ms" in calibration  # fmt: skip


def test_item_72s_prompt_reading_on_two_more_points() -> None:
    # item 72: -np 4 short and -np 2 -b 64 long again with the prompt reading before each
    # run, on a host slower than at their profiles; both phases read before the runs hold
    # 85 of 105 on the three points with the reading, the full batch's reading alone 89
    validation = ROOT / "docs" / "validation"
    again = {"default/short": ("2026-12-06 19:34 UTC", 24),
             "np2_b64/long": ("2026-12-06 20:22 UTC", 16)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix-epyc-item72.json",
                             "llamacpp-matrix-epyc-item71.json", again, 72)  # fmt: skip
    was = json.loads((validation / "llamacpp-matrix-epyc-item71.json").read_text())["results"]
    assert [sum(_inside(was[p]).values()) for p in again] == [30, 24]  # item 69's runs
    short, long = now["default/short"], now["np2_b64/long"]
    assert _decode_steps(short) == [1.06, 1.03, 1.08, 1.03, 1.04]
    assert _decode_steps(long) == [1.08, 1.09, 1.07, 1.05, 1.01]
    assert {p: _prompt_steps(now[p]) for p in again} == {
        "default/short": [1.05, 1.11, 1.11, 1.07, 1.04],
        "np2_b64/long": [1.09, 1.11, 1.12, 1.08, 1.03]}  # fmt: skip
    assert _save_probes(now, again) == [0.0185, 0.0243]
    # the gate: every -np 4 short run through within 5 %; before 5 of -np 2 -b 64 long's it
    # gave up (1.07-1.18 x)
    gate = {p: _gate_readings(now[p]) for p in again}
    assert [sum(n > 1 for _, n in g) for g in gate.values()] == [9, 12]
    assert all(abs(x - 1) <= 0.05 for x, _ in gate["default/short"])
    out = sorted(round(x, 2) for x, _ in gate["np2_b64/long"] if abs(x - 1) > 0.05)
    assert out == [1.07, 1.1, 1.12, 1.15, 1.18]
    tops = [round(max(x for lo in now[p]["loads"].values() for m in lo["machine"]
                      for x in m["gate_readings"] if x) / now[p]["gate"]["run_ref_ms"], 2)
            for p in again]  # fmt: skip
    assert tops == [1.32, 1.56]
    assert [len(now[p]["gate"]["superseded"]) for p in again] == [1, 0]
    # the prompt reading before each run, and its loads' means
    read = {p: {load: [m["speed_prompt"] for m in v["machine"]]
                for load, v in now[p]["loads"].items()} for p in again}  # fmt: skip
    spans = {p: (min(min(r) for r in loads.values()), max(max(r) for r in loads.values()))
             for p, loads in read.items()}  # fmt: skip
    assert {p: (round(a, 2), round(b, 2)) for p, (a, b) in spans.items()} == {
        "default/short": (0.96, 1.3), "np2_b64/long": (1.0, 1.42)}  # fmt: skip
    means = {p: [round(sum(r) / len(r), 2) for r in loads.values()] for p, loads in read.items()}
    assert {p: (min(m), max(m)) for p, m in means.items()} == {
        "default/short": (1.04, 1.22), "np2_b64/long": (1.05, 1.33)}  # fmt: skip
    # both phases read before the runs, per point (item 71's -np 4 long among them)
    both = json.loads((validation / "llamacpp-at-speed-phase-item72.json").read_text())
    assert both["ratio"] == "speed-phase"
    held = {p: sum(v["at_speed"]["in_target"] for v in loads.values())
            for p, loads in both["points"].items()}  # fmt: skip
    assert held == {"default/short": 25, "default/long": 33, "np2_b64/long": 27}
    for p in again:
        assert [v["prompt_ratio"] for v in both["points"][p].values()] == [
            round(sum(r) / len(r), 4) for r in read[p].values()]  # fmt: skip
    sets = json.loads((validation / "llamacpp-at-speed-item72.json").read_text())
    # the loads' reading means against their runs' prompt steps (--ratio phase): above at 8
    # of item 72's 10 loads, below at all five of item 71's -np 4 long
    runs = sets["phase"]["points"]
    above = {p: sum(v["prompt_ratio"] > runs[p][load]["prompt_ratio"] for load, v in loads.items())
             for p, loads in both["points"].items()}  # fmt: skip
    assert above == {"default/short": 3, "default/long": 0, "np2_b64/long": 5}
    assert _points_at_speed(sets, "speed-batch", tuple(held)) == {
        "default/short": 28, "default/long": 32, "np2_b64/long": 29}  # fmt: skip
    assert _points_at_speed(sets, "speed", tuple(held)) == {
        "default/short": 31, "default/long": 19, "np2_b64/long": 32}  # fmt: skip
    assert _points_at_speed(sets, "phase", tuple(again)) == {
        "default/short": 33, "np2_b64/long": 34}  # fmt: skip
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 6.5% /" in printed
    # (both points' archives held these runs until item 75 ran the points again: commit
    # e12afbf has them)
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "stray as far as the host moves, so on three points they do not forecast" in doc
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "both readings taken before each run held 85 of 105 cells, at the full batch's " \
           "reading alone 89" in calibration  # fmt: skip
    assert "(0.96–1.42 × the profile's at the two points of item 72)" in calibration
    speed = " ".join((ROOT / "src" / "lyra_simpy" / "live" / "speed.py").read_text().split())
    assert "Table 1 at both readings held 85 of 105 cells, at the full batch's reading alone " \
           "89 (item 72)" in speed  # fmt: skip


def test_item_75s_prompt_reading_beside_the_full_batchs_other_decoders() -> None:
    # item 75: -np 2 -b 64 long and -np 4 short again with the prompt also timed beside
    # NP-1 decoders before each run (speed --prompt N --beside NP-1); it scatters less about
    # the runs' prompt steps than the lone prompt and gains cells, but keeps a bias a point
    validation = ROOT / "docs" / "validation"
    again = {"np2_b64/long": ("2026-12-06 22:18 UTC", 16),
             "default/short": ("2026-12-06 22:48 UTC", 30)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix-epyc-item75.json",
                             "llamacpp-matrix-epyc-item72.json", again, 75)  # fmt: skip
    long, short = now["np2_b64/long"], now["default/short"]
    assert _decode_steps(long) == [1.01, 1.13, 1.2, 1.04, 1.09]
    assert _decode_steps(short) == [1.04, 1.02, 1.03, 0.99, 0.97]
    assert {p: _prompt_steps(now[p]) for p in again} == {
        "np2_b64/long": [0.99, 1.1, 1.21, 1.01, 1.08],
        "default/short": [1.02, 1.05, 1.08, 1.03, 1.01]}  # fmt: skip
    assert _save_probes(now, again) == [0.0256, 0.073]
    # the gate: it waited before 9 of -np 2 -b 64 long's runs and gave up before 6; every
    # -np 4 short run went through within 5 %, after the check set two profiles aside
    gate = {p: _gate_readings(now[p]) for p in again}
    assert [sum(n > 1 for _, n in g) for g in gate.values()] == [9, 4]
    assert sorted(round(x, 2) for x, _ in gate["np2_b64/long"] if abs(x - 1) > 0.05) == [
        1.15, 1.16, 1.29, 1.29, 1.34, 1.43]  # fmt: skip
    assert all(abs(x - 1) <= 0.05 for x, _ in gate["default/short"])
    top = max(x for lo in long["loads"].values() for m in lo["machine"]
              for x in m["gate_readings"] if x) / long["gate"]["run_ref_ms"]  # fmt: skip
    assert round(top, 2) == 1.56
    assert [len(now[p]["gate"]["superseded"]) for p in again] == [0, 2]
    # Tables 2 and 3 (item 72's runs: 34 / 34 and 34 / 31)
    rows = _by_point(_cells(validation / "llamacpp-matrix-epyc-item75.json"))
    assert [rows[NP2, "long"][c] for c in (4, 6)] == ["32 / 35", "31 / 35"]
    assert [rows[NP4, "short"][c] for c in (4, 6)] == ["28 / 35", "29 / 35"]
    # both prompt readings before each run: their spans, and their loads' means against the
    # runs' prompt steps (llamacpp_at_speed.py's line after its table)
    at_speed = validation_module("llamacpp_at_speed")
    spans = {}
    for field in ("speed_beside", "speed_prompt"):
        got = [m[field] for p in again for v in now[p]["loads"].values() for m in v["machine"]]
        assert None not in got
        spans[field] = [(min(r), max(r)) for r in (got[:15], got[15:])]
    assert spans == {"speed_beside": [(0.921, 1.338), (0.887, 0.994)],
                     "speed_prompt": [(0.922, 1.533), (0.781, 1.229)]}  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 75)
    assert held == {"beside": {"np2_b64/long": 23, "default/short": 30},
                    "phase": {"np2_b64/long": 18, "default/short": 25}}  # fmt: skip
    assert strays == {
        "beside": {"np2_b64/long": (0.045, 0.058), "default/short": (-0.088, 0.021)},
        "phase": {"np2_b64/long": (0.116, 0.082), "default/short": (-0.097, 0.097)},
    }
    # (item 72's lone prompts on its three points, against its own set's runs)
    item72 = json.loads((validation / "llamacpp-at-speed-phase-item72.json").read_text())
    was = json.loads((validation / "llamacpp-matrix-epyc-item72.json").read_text())["results"]
    assert {p: (round(b, 3), round(s, 3))
            for p, (b, s) in at_speed.prompt_against_runs(item72["points"], was).items()} == {
        "default/short": (0.049, 0.064), "default/long": (-0.055, 0.035),
        "np2_b64/long": (0.101, 0.052)}  # fmt: skip
    sets = json.loads((validation / "llamacpp-at-speed-item75.json").read_text())
    alone = {r: _points_at_speed(sets, r, tuple(again)) for r in ("speed-batch", "speed")}
    assert alone == {"speed-batch": {"np2_b64/long": 20, "default/short": 30},
                     "speed": {"np2_b64/long": 29, "default/short": 30}}  # fmt: skip
    assert sum(sum(_inside(now[p]).values()) for p in again) == 46
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 4.7% /" in printed
    # both points' archives held these runs, -np 4 short's with the two profiles set aside
    # (items 78 and 80 ran them again: commits a63014a and a2771fc have them), and
    # docs/calibration.md's example is -np 2 -b 64 long's first beside reading, kept apart
    index = json.loads((validation / "points" / "index.json").read_text())
    assert index["np2_b64/long"]["finished"] == "2026-12-07 06:35 UTC"
    assert index["default/short"]["finished"] == "2026-12-07 03:51 UTC"
    assert len(now["default/short"]["gate"]["superseded"]) == 2
    kept_first = validation / "llamacpp-np2-b64-long-item75-run1-beside.json"
    first = json.loads(kept_first.read_text())
    assert first["request"] == {"batch": 1, "contexts": [400], "outputs": 1, "beside": 1}
    # (the profile's rows summed, 867.525 less a float's last bits: printed 867.52)
    assert (first["median_ms"], first["profile_ms"], first["speed"]) == (
        856.196, pytest.approx(867.525), 0.987)  # fmt: skip
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "host now: 856.20 ms, the median of 6 prompts of 400 tokens beside 1 decoding " \
           "(796.02-864.10); the profile's 867.52 ms" in calibration  # fmt: skip
    assert "(2 and 6 % against 10 and 8 %) and Table 1 held 53 of 70 cells at it against 43" \
        in calibration  # fmt: skip
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "both phases give 53 of 70 against 43 with the lone prompt and 50 at the full " \
           "batch's reading alone; but the bias stays (−9 % and +5 %)" in doc  # fmt: skip
    assert "on item 72's three points, `-np 4` short, `-np 4` long and `-np 2 -b 64` long, the " \
           "lone prompts' +4.9 % (6.4 %), −5.5 % (3.5 %) and +10.1 % (5.2 %)" in doc  # fmt: skip
    assert "−8.8 % (the mean of the log over the loads; spread 2.1 %) and +4.5 % (5.8 %), the " \
           "lone prompts' by −9.7 % (9.7 %) and +11.6 % (8.2 %;" in doc  # fmt: skip
    assert "**53 of 70** with the beside reading (30 and 23), 43 with the lone prompt (25 and " \
           "18); 50 at the full batch's reading alone (30 and 20), 59 at the lone decode " \
           "reading alone (30 and 29), 46 at the profile's speed" in doc  # fmt: skip
    # (docs/VALIDATION-llamacpp.md gives the five points of items 75-76: item 76's test)


def test_item_76s_beside_reading_at_three_more_points() -> None:
    # item 76: -np 2 -b 64 short, -kvu long and -kvu short again with the prompt also timed
    # beside NP-1 decoders before each run; at all three the host slowed at some loads, and
    # over the five points read so the beside reading holds as many cells as the lone
    # decode reading alone
    validation = ROOT / "docs" / "validation"
    again = {"np2_b64/short": ("2026-12-07 00:11 UTC", 28),
             "kvu/long": ("2026-12-07 00:53 UTC", 21),
             "kvu/short": ("2026-12-07 01:31 UTC", 16)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix-epyc-item76.json",
                             "llamacpp-matrix-epyc-item75.json", again, 76)  # fmt: skip
    assert {p: _decode_steps(now[p]) for p in again} == {
        "np2_b64/short": [0.99, 0.99, 0.95, 1.12, 1.15],
        "kvu/long": [1.06, 1.03, 1.13, 1.15, 1.16],
        "kvu/short": [1.14, 1.03, 0.98, 0.99, 1.16]}  # fmt: skip
    assert _save_probes(now, again) == [0.0233, 0.0927, 0.0186]
    # the gate waited before 7, 7 and 8 runs, read up to 1.48, 1.46 and 1.41 x, and gave up
    # before 2, 2 and 6; the check set one of -kvu short's profiles aside
    gate = {p: _gate_readings(now[p]) for p in again}
    assert [sum(n > 1 for _, n in g) for g in gate.values()] == [7, 7, 8]
    gave_up = {p: sorted(round(x, 2) for x, _ in g if abs(x - 1) > 0.05) for p, g in gate.items()}
    assert gave_up == {"np2_b64/short": [1.1, 1.31], "kvu/long": [1.15, 1.26],
                       "kvu/short": [0.93, 1.12, 1.13, 1.18, 1.28, 1.4]}  # fmt: skip
    top = [max(x for lo in now[p]["loads"].values() for m in lo["machine"]
               for x in m["gate_readings"] if x) / now[p]["gate"]["run_ref_ms"]
           for p in again]  # fmt: skip
    assert [round(x, 2) for x in top] == [1.48, 1.46, 1.41]
    assert [len(now[p]["gate"]["superseded"]) for p in again] == [0, 0, 1]
    rows = _by_point(_cells(validation / "llamacpp-matrix-epyc-item76.json"))
    assert [tuple(rows[k][c] for c in (2, 4, 6)) for k in
            ((NP2, "short"), (KVU, "long"), (KVU, "short"))] == [
        ("28 / 35", "26 / 35", "26 / 35"), ("21 / 35", "26 / 35", "25 / 35"),
        ("16 / 35", "26 / 35", "21 / 35")]  # fmt: skip
    # both prompt readings before each run, and their loads' means against the runs'
    # prompt steps
    spans = {}
    for field in ("speed_beside", "speed_prompt"):
        got = [[m[field] for v in now[p]["loads"].values() for m in v["machine"]] for p in again]
        spans[field] = [(min(r), max(r)) for r in got]
    assert spans == {"speed_beside": [(0.887, 1.401), (0.94, 1.364), (0.957, 1.377)],
                     "speed_prompt": [(0.919, 1.437), (0.974, 1.455), (0.774, 1.392)]}  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 76)
    assert held == {"beside": {"np2_b64/short": 35, "kvu/long": 26, "kvu/short": 32},
                    "phase": {"np2_b64/short": 21, "kvu/long": 26, "kvu/short": 31}}  # fmt: skip
    assert strays == {
        "beside": {"np2_b64/short": (0.016, 0.055), "kvu/long": (0.037, 0.072),
                   "kvu/short": (0.011, 0.029)},
        "phase": {"np2_b64/short": (0.158, 0.055), "kvu/long": (0.027, 0.088),
                  "kvu/short": (0.035, 0.049)},
    }  # fmt: skip
    sets = json.loads((validation / "llamacpp-at-speed-item76.json").read_text())
    alone = {r: _points_at_speed(sets, r, tuple(again)) for r in ("speed-batch", "speed")}
    assert alone == {"speed-batch": {"np2_b64/short": 32, "kvu/long": 27, "kvu/short": 28},
                     "speed": {"np2_b64/short": 30, "kvu/long": 28, "kvu/short": 30}}  # fmt: skip
    assert sum(sum(_inside(now[p]).values()) for p in again) == 65
    # over the five points read so: item 75's two, read from its own kept outputs, with
    # these three
    before = {"np2_b64/long": ("2026-12-06 22:18 UTC", 16),
              "default/short": ("2026-12-06 22:48 UTC", 30)}  # fmt: skip
    was = _run_again("llamacpp-matrix-epyc-item75.json", "llamacpp-matrix-epyc-item72.json",
                     before)  # fmt: skip
    held75, _ = _prompt_readings_kept(was, before, 75)
    sets75 = json.loads((validation / "llamacpp-at-speed-item75.json").read_text())
    five = {name: sum(held75[name].values()) + sum(held[name].values()) for name in held}
    for r in ("speed-batch", "speed"):
        five[r] = sum(_points_at_speed(sets75, r, tuple(before)).values()) + sum(
            alone[r].values())  # fmt: skip
    five["profile"] = sum(sum(_inside(x[p]).values()) for x, points in
                          ((was, before), (now, again)) for p in points)  # fmt: skip
    assert five == {"beside": 146, "phase": 121, "speed-batch": 137, "speed": 147, "profile": 111}
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 7.7% /" in printed
    # item 81 ran -kvu long again and item 79 the other two (commits 4a8cc90 and adad753
    # have item 76's archives)
    index = json.loads((validation / "points" / "index.json").read_text())
    assert index["kvu/long"]["finished"] == "2026-12-07 08:43 UTC" != now["kvu/long"]["finished"]
    assert {p: index[p]["finished"] for p in ("np2_b64/short", "kvu/short")} == {
        "np2_b64/short": "2026-12-07 05:08 UTC", "kvu/short": "2026-12-07 05:34 UTC"}  # fmt: skip
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "Table 1 with both phases read before the runs: **93 of 105** with the beside " \
           "reading (35, 26 and 32), 78 with the lone prompt (21, 26 and 31); 87 at the full " \
           "batch's reading alone (32, 27 and 28), 88 at the lone decode reading alone (30, 28 " \
           "and 30), 65 at the profile's speed" in doc  # fmt: skip
    assert "read before the runs holds **146 of 175** at it, 121 with the lone prompt, 137 at " \
           "the full batch's reading alone, 147 at the lone decode reading alone, 111 at the " \
           "profile's speed" in doc  # fmt: skip
    assert "prompt steps by +1.6 % (spread 5.5 %), +3.7 % (7.2 %) and +1.1 % (2.9 %), the lone " \
           "prompts' by +15.8 % (5.5 %), +2.7 % (8.8 %) and +3.5 % (4.9 %)" in doc  # fmt: skip
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "over the five, Table 1 held 146 of 175 cells at it against 121 with the lone " \
           "prompt, and 147 with one lone decode reading" in calibration  # fmt: skip


def test_item_77s_beside_reading_at_np4_long_and_over_all_six_points() -> None:
    # item 77: -np 4 long again with the prompt also timed beside NP-1 decoders before each
    # run, so that all six points have had it; over the six, the beside reading with the
    # full batch's decode reading is the best forecast read before the runs
    validation = ROOT / "docs" / "validation"
    again = {"default/long": ("2026-12-07 03:02 UTC", 23)}
    now = _epyc_points_again("llamacpp-matrix-epyc-item77.json", "llamacpp-matrix-epyc-item76.json",
                             again, 77)  # fmt: skip
    point = now["default/long"]
    assert _decode_steps(point) == [1.03, 1.05, 1.08, 1.06, 1.04]
    assert _save_probes(now, again) == [0.0083]
    # the gate waited before 3 runs and gave up before none; the full-batch check set two
    # profiles aside
    gate = _gate_readings(point)
    assert sum(n > 1 for _, n in gate) == 3
    assert all(abs(x - 1) <= 0.05 for x, _ in gate)
    assert [(c["profile_ms"], c["check_ms"]) for c in point["gate"]["batch_check"]] == [
        (40.3, 37.8), (41.8, 36.4), (37.7, 36.9)]  # fmt: skip
    assert len(point["gate"]["superseded"]) == 2
    rows = _by_point(_cells(validation / "llamacpp-matrix-epyc-item77.json"))
    assert tuple(rows[NP4, "long"][c] for c in (2, 4, 6)) == ("23 / 35", "32 / 35", "31 / 35")
    # the four readings before each run: their spans
    spans = _reading_spans(point)
    assert spans == {"speed_batch": (1.003, 1.159), "speed_lone": (0.942, 1.103),
                     "speed_beside": (0.93, 1.152), "speed_prompt": (0.884, 1.295)}  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 77)
    assert {k: v["default/long"] for k, v in held.items()} == {"beside": 34, "phase": 32}
    assert {k: v["default/long"] for k, v in strays.items()} == {
        "beside": (0.016, 0.035), "phase": (0.072, 0.047)}  # fmt: skip
    # -np 4 short's beside bias is still the one apart; -np 4 long, per-slot KV as well,
    # is not
    assert strays["beside"]["default/short"] == (-0.088, 0.021)
    assert all(0.01 < b < 0.05 for p, (b, _) in strays["beside"].items() if p != "default/short")
    sets = json.loads((validation / "llamacpp-at-speed-item77.json").read_text())
    alone = {r: _points_at_speed(sets, r, ("default/long",)) for r in ("speed-batch", "speed")}
    assert alone == {"speed-batch": {"default/long": 33}, "speed": {"default/long": 21}}
    at_speed = validation_module("llamacpp_at_speed")
    bias = {}
    for r in ("speed", "speed-batch"):
        mine = {"default/long": sets[r]["points"]["default/long"]}
        bias[r] = round(at_speed.against_mean(mine, now)[0], 3)
    assert bias == {"speed": -0.082, "speed-batch": -0.005}
    # over all six points: each reading's kept output takes every point; its other five
    # points are items 75-76's (the same runs and model)
    six = {}
    for name in ("beside", "phase", "lone-beside"):
        kept = json.loads((validation / f"llamacpp-at-speed-{name}-item77.json").read_text())
        assert set(kept["points"]) == set(now)
        for item, points in (
            (75, ("np2_b64/long", "default/short")),
            (76, ("np2_b64/short", "kvu/long", "kvu/short")),
        ):
            if name == "lone-beside":
                continue
            earlier = json.loads((validation / f"llamacpp-at-speed-{name}-item{item}.json")
                                 .read_text())["points"]  # fmt: skip
            assert {p: kept["points"][p] for p in points} == {p: earlier[p] for p in points}
        per = {p: sum(v["at_speed"]["in_target"] for v in loads.values())
               for p, loads in kept["points"].items()}  # fmt: skip
        six[name] = (sum(per.values()), min(per.values()), max(per.values()))
    lone_beside = json.loads((validation / "llamacpp-at-speed-lone-beside-item77.json").read_text())
    assert lone_beside["ratio"] == "speed-lone-beside"
    assert six == {"beside": (180, 23, 35), "phase": (153, 18, 32), "lone-beside": (179, 27, 34)}
    # the beside reading against the fit's price of its rows (an ablation): each point's
    # prompt speed the beside reading's times its rows over the fit
    against_fit = json.loads((validation / "llamacpp-at-speed-beside-fit-item77.json").read_text())
    assert against_fit["ratio"] == "speed-beside-fit"
    beside = json.loads((validation / "llamacpp-at-speed-beside-item77.json").read_text())
    factors = {p: {round(v["prompt_ratio"] / beside["points"][p][load]["prompt_ratio"], 2)
                   for load, v in loads.items()}
               for p, loads in against_fit["points"].items()}  # fmt: skip
    assert factors == {"default/short": {1.07}, "default/long": {1.06}, "np2_b64/long": {1.02},
                       "kvu/long": {1.01}, "kvu/short": {1.0}, "np2_b64/short": {0.99}}  # fmt: skip
    assert sum(v["at_speed"]["in_target"] for loads in against_fit["points"].values()
               for v in loads.values()) == 183  # fmt: skip
    moved = {p: round(b, 3) for p, (b, _) in
             at_speed.prompt_against_runs(against_fit["points"], now).items()}  # fmt: skip
    assert moved == {"default/short": -0.02, "default/long": 0.071, "np2_b64/long": 0.064,
                     "kvu/long": 0.05, "kvu/short": 0.009, "np2_b64/short": 0.006}  # fmt: skip
    for r, n in (("speed-batch", 170), ("speed", 168), ("phase", 196)):
        assert sum(_points_at_speed(sets, r, tuple(now)).values()) == n
    assert sum(sum(_inside(now[p]).values()) for p in now) == 134
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 4.7% /" in printed
    # (the point's archive held these runs, with both profiles set aside, until item 81 ran
    # it again: commit 4a8cc90 has them)
    index = json.loads((validation / "points" / "index.json").read_text())
    assert index["default/long"]["finished"] == "2026-12-07 08:06 UTC" != point["finished"]
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "Table 1 with both phases read before the runs holds **180 of 210** with the beside " \
           "reading and the full batch's (23–35 a point), 179 with the beside reading and the " \
           "lone decode reading, 153 with the lone prompt; 170 at the full batch's reading " \
           "alone, 168 at the lone decode reading alone, 134 at the profile's speed. With each " \
           "phase at the runs' own median ratio (known after the runs) 196." in doc  # fmt: skip
    assert "**34 of 35** with the beside reading, 32 with the lone prompt; 33 at the full " \
           "batch's reading alone, 21 at the lone decode reading alone, 23 at the profile's " \
           "speed" in doc  # fmt: skip
    assert "The beside reading lay +1.6 % from the runs' prompt steps (spread 3.5 %), the lone " \
           "prompt +7.2 % (4.7 %); the lone decode reading −8.2 % from the runs' mean decode " \
           "step, the full batch's −0.5 %." in doc  # fmt: skip
    assert "the full batch's read 1.00–1.16 ×, the lone decode reading 0.94–1.10 ×, the beside " \
           "reading 0.93–1.15 ×, the lone prompt 0.88–1.30 ×" in doc  # fmt: skip
    # -np 4 short's reference rows (llamacpp_steps.py --mixed, tests/unit/
    # test_llamacpp_steps.py), and the lone decode reading's references at -np 4 long
    assert "took 112.7 ms at context 17 and 136.6 at 65 (21 % apart; its 4-token step " \
           "52.4 and 59.6), so the reference, 180.6 ms, sits 9 % above the quicker " \
           "pair" in doc  # fmt: skip
    assert point["gate"]["speed_reference"]["references"] == 102
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "180 of 210 cells over all six points, against 170 at the full batch's reading " \
           "alone, 168 at the lone one alone, 153 with the lone prompt and 134 at the " \
           "profile's speed" in calibration  # fmt: skip


def test_item_78s_np4_short_with_the_beside_readings_own_reference() -> None:
    # item 78: -np 4 short again, its profile timing the beside reading's own probe through
    # the grid (grid.speed_reference_beside, item 77) and the reading taken against that;
    # in this profile the reference and the pair's two rows agree, and the reading lies
    # 1.5 % from the runs' prompt steps (item 75's run, against its rows: 8.8 %)
    validation = ROOT / "docs" / "validation"
    again = {"default/short": ("2026-12-07 03:51 UTC", 32)}
    now = _epyc_points_again("llamacpp-matrix-epyc-item78.json", "llamacpp-matrix-epyc-item77.json",
                             again, 78)  # fmt: skip
    point = now["default/short"]
    assert _decode_steps(point) == [0.96, 0.97, 1.02, 0.95, 0.97]
    assert _prompt_steps(point) == [0.99, 0.96, 1.02, 0.95, 0.98]
    assert _save_probes(now, again) == [0.0177]
    gate = _gate_readings(point)
    assert sum(n > 1 for _, n in gate) == 10
    assert all(abs(x - 1) <= 0.05 for x, _ in gate)
    assert point["gate"]["superseded"] == []
    # the profile's beside reference: 26 probes, every 4th measurement
    ref = point["gate"]["speed_reference"]["beside"]
    assert (ref["decoders"], ref["tokens"], ref["references"], ref["every"]) == (3, 64, 26, 4)
    assert (ref["median_ms"], ref["min_ms"], ref["max_ms"]) == (188.582, 158.427, 249.898)
    assert ref["by_context"] == {"16": 183.174, "64": 195.819}  # (JSON keys)
    # every beside reading before a run went against it, not the rows (188.2 ms here)
    _, sums = _kept_against_reference(now, "default/short", 3, 64)
    assert {c: round(ms, 1) for c, ms in sums.items()} == {"17": 178.6, "65": 197.8}
    assert round(sum(sums.values()) / 2, 1) == 188.2
    spans = _reading_spans(point)
    assert spans == {"speed_batch": (0.956, 1.096), "speed_lone": (0.9, 1.108),
                     "speed_beside": (0.856, 1.096), "speed_prompt": (0.695, 1.028)}  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 78)
    assert {k: v["default/short"] for k, v in held.items()} == {"beside": 31, "phase": 26}
    assert {k: v["default/short"] for k, v in strays.items()} == {
        "beside": (-0.015, 0.035), "phase": (-0.079, 0.039)}  # fmt: skip
    sets = json.loads((validation / "llamacpp-at-speed-item78.json").read_text())
    alone = {r: _points_at_speed(sets, r, ("default/short",)) for r in ("speed-batch", "speed")}
    assert alone == {"speed-batch": {"default/short": 27}, "speed": {"default/short": 26}}
    rows_ = _by_point(_cells(validation / "llamacpp-matrix-epyc-item78.json"))
    assert tuple(rows_[NP4, "short"][c] for c in (2, 4, 6)) == ("32 / 35", "23 / 35", "23 / 35")
    # over all six points: the other five are item 77's outputs
    six = {name: sum(v.values()) for name, v in _readings_over_six(now, again, 78, 77).items()}
    assert six == {"beside": 181, "phase": 154, "lone-beside": 181}
    assert _six_at_speed(sets, now) == {"speed-batch": 167, "speed": 164, "phase": 197,
                                         "profile": 136}  # fmt: skip
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 5.3% /" in printed
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "beside reading lay **−1.5 %** from the runs' prompt steps (spread 3.5 %; item " \
           "75's run of the point against its rows: −8.8 %), the lone prompt −7.9 % " \
           "(3.9 %)" in doc  # fmt: skip
    assert "Table 1 with both phases read before the runs: 31 of 35 with the beside reading, " \
           "26 with the lone prompt; 27 at the full batch's reading alone, 26 at the lone " \
           "decode reading alone, 32 at the profile's speed" in doc  # fmt: skip
    assert "Table 1 with the beside reading and the full batch's **181 of 210** (23–35 a " \
           "point), with the beside reading and the lone decode reading 181, with the lone " \
           "prompt 154; 167 at the full batch's reading alone, 164 at the lone decode reading " \
           "alone, 136 at the profile's speed; each phase at the runs' own median ratio 197" \
        in doc  # fmt: skip
    readme = " ".join(
        (ROOT / "docs" / "llamacpp-fidelity.md").read_text().split()
    )  # (the README's account)
    assert "item 78's set: 181, 154, 167, 164 and 136)" in readme
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "at `-np 4` short (item 78) 26 references read 188.6 ms, the pair's rows 188.2, and " \
           "the reading lay 1.5 % below the runs' prompt steps" in calibration  # fmt: skip


def test_item_79s_short_points_with_the_beside_readings_own_reference() -> None:
    # item 79: -np 2 -b 64 short and -kvu short again, each profile timing the beside
    # reading's own probe through its grid; as at -np 4 short (item 78) each profile's
    # pair of rows agrees with its reference within 1 %, and the reading lies 1.0-2.2 %
    # from the runs' prompt steps; over all six points 176 of 210 with it
    validation = ROOT / "docs" / "validation"
    again = {"np2_b64/short": ("2026-12-07 05:08 UTC", 29),
             "kvu/short": ("2026-12-07 05:34 UTC", 18)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix-epyc-item79.json", "llamacpp-matrix-epyc-item78.json",
                             again, 79)  # fmt: skip
    assert {p: (_decode_steps(now[p]), _prompt_steps(now[p])) for p in again} == {
        "np2_b64/short": ([1.0, 0.99, 0.99, 0.94, 0.99], [1.0, 0.99, 0.99, 0.91, 1.0]),
        "kvu/short": ([1.0, 1.01, 1.12, 1.15, 1.16], [1.02, 1.03, 1.1, 1.13, 1.17])}  # fmt: skip
    assert _save_probes(now, again) == [0.023, 0.0159]
    gate = {p: _gate_readings(now[p]) for p in again}
    assert [sum(n > 1 for _, n in g) for g in gate.values()] == [4, 6]
    # it gave up before two of -kvu short's runs, having read up to 1.49 x there
    gave_up = {p: sorted(round(x, 2) for x, _ in g if abs(x - 1) > 0.05) for p, g in gate.items()}
    assert gave_up == {"np2_b64/short": [], "kvu/short": [1.14, 1.24]}
    top = [max(x for lo in now[p]["loads"].values() for m in lo["machine"]
               for x in m["gate_readings"] if x) / now[p]["gate"]["run_ref_ms"]
           for p in again]  # fmt: skip
    assert [round(x, 2) for x in top] == [1.02, 1.49]
    # the full-batch check set one profile aside at each
    assert [[(s["profile_step_ms"], round(s["probe_after_profile_ms"], 1))
             for s in now[p]["gate"]["superseded"]] for p in again] == [
        [(18.1, 17.1)], [(15.1, 17.2)]]  # fmt: skip
    # each profile's beside reference, and the pair's two rows a step in its profile
    refs, pairs = {}, {}
    for p, decoders in (("np2_b64/short", 1), ("kvu/short", 3)):
        ref = now[p]["gate"]["speed_reference"]["beside"]
        refs[p] = (ref["decoders"], ref["tokens"], ref["references"], ref["median_ms"],
                   ref["min_ms"], ref["max_ms"], ref["by_context"])  # fmt: skip
        _, sums = _kept_against_reference(now, p, decoders, 64)
        pairs[p] = {c: round(ms, 1) for c, ms in sums.items()}
        assert abs(sum(sums.values()) / len(sums) / ref["median_ms"] - 1) < 0.01
    assert refs == {
        "np2_b64/short": (1, 64, 14, 143.594, 139.227, 150.399, {"16": 143.181, "64": 144.008}),
        "kvu/short": (3, 64, 23, 153.724, 138.83, 162.346, {"16": 153.602, "64": 155.574}),
    }  # fmt: skip
    assert pairs == {"np2_b64/short": {"18": 142.7, "66": 142.2},
                     "kvu/short": {"17": 154.4, "65": 155.2}}  # fmt: skip
    spans = {f: [_reading_spans(now[p])[f] for p in again] for f in READINGS}
    assert spans == {"speed_batch": [(0.944, 1.084), (1.011, 1.246)],
                     "speed_lone": [(0.925, 1.054), (0.97, 1.222)],
                     "speed_beside": [(0.876, 1.048), (0.977, 1.41)],
                     "speed_prompt": [(0.888, 1.486), (0.926, 1.458)]}  # fmt: skip
    rows_ = _by_point(_cells(validation / "llamacpp-matrix-epyc-item79.json"))
    assert [tuple(rows_[k][c] for c in (2, 4, 6)) for k in ((NP2, "short"), (KVU, "short"))] == [
        ("29 / 35", "30 / 35", "29 / 35"), ("18 / 35", "22 / 35", "18 / 35")]  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 79)
    assert held == {"beside": {"np2_b64/short": 29, "kvu/short": 33},
                    "phase": {"np2_b64/short": 14, "kvu/short": 22}}  # fmt: skip
    assert {k: {p: v[p] for p in again} for k, v in strays.items()} == {
        "beside": {"np2_b64/short": (-0.022, 0.032), "kvu/short": (-0.01, 0.015)},
        "phase": {"np2_b64/short": (0.109, 0.087), "kvu/short": (0.114, 0.074)}}  # fmt: skip
    # item 76's runs of the two points, read against their rows
    was = json.loads((validation / "llamacpp-matrix-epyc-item78.json").read_text())["results"]
    _, strays76 = _prompt_readings_kept(was, again, 76)
    assert {p: strays76["beside"][p] for p in again} == {
        "np2_b64/short": (0.016, 0.055), "kvu/short": (0.011, 0.029)}  # fmt: skip
    sets = json.loads((validation / "llamacpp-at-speed-item79.json").read_text())
    alone = {r: _points_at_speed(sets, r, tuple(again)) for r in ("speed-batch", "speed")}
    assert alone == {"speed-batch": {"np2_b64/short": 23, "kvu/short": 33},
                     "speed": {"np2_b64/short": 28, "kvu/short": 25}}  # fmt: skip
    # over all six points: the other four are item 78's outputs
    per_point = _readings_over_six(now, again, 79, 78)
    six = {name: sum(v.values()) for name, v in per_point.items()}
    assert six == {"beside": 176, "phase": 138, "lone-beside": 175}
    assert {p: per_point["lone-beside"][p] for p in again} == {"np2_b64/short": 27,
                                                                 "kvu/short": 33}  # fmt: skip
    assert (min(per_point["beside"].values()), max(per_point["beside"].values())) == (23, 34)
    assert _six_at_speed(sets, now) == {"speed-batch": 163, "speed": 157, "phase": 198,
                                         "profile": 139}  # fmt: skip
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 4.1% /" in printed
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "The beside reading lay **−2.2 %** and **−1.0 %** from the runs' prompt steps " \
           "(spread 3.2 and 1.5 %; item 76's runs of the points, against their rows: +1.6 % " \
           "and +1.1 %, spread 5.5 and 2.9 %), the lone prompt +10.9 % and +11.4 % (8.7 and " \
           "7.4 %)" in doc  # fmt: skip
    assert "at `-np 2 -b 64` short 29 of 35 with the beside reading and the full batch's " \
           "(item 76: 35), 27 with the lone decode reading, 14 with the lone prompt; 23 at the " \
           "full batch's reading alone, 28 at the lone decode reading alone, 29 at the " \
           "profile's speed" in doc  # fmt: skip
    assert "At `-kvu` short 33 with the beside reading (item 76: 32), 33 with the lone decode " \
           "reading, 22 with the lone prompt; 33 at the full batch's reading alone, 25 at the " \
           "lone decode reading alone, 18 at the profile's speed" in doc  # fmt: skip
    assert "Table 1 with the beside reading and the full batch's **176 of 210** (23–34 a " \
           "point), with the beside reading and the lone decode reading 175, with the lone " \
           "prompt 138; 163 at the full batch's reading alone, 157 at the lone decode reading " \
           "alone, 139 at the profile's speed; each phase at the runs' own median ratio 198" \
        in doc  # fmt: skip
    account = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert "item 79's set: 176, 138, 163, 157 and 139;" in account
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "with the other two short points run again so (item 79), 176, the reference and " \
           "the profile's rows agreeing within 1 % at all three" in calibration  # fmt: skip


def test_item_80s_np2_b64_long_whose_rows_and_reference_disagree() -> None:
    # item 80: -np 2 -b 64 long again with the beside reading's own reference in its
    # profile; its rows of the reading's pair lie 4.0 % above the reference, the host ran
    # 5-14 % faster through the runs than through the profile (Table 1: 4 of 35), and the
    # readings before the runs followed it; against its rows the beside reading would have
    # lain nearer the runs than against the reference
    validation = ROOT / "docs" / "validation"
    again = {"np2_b64/long": ("2026-12-07 06:35 UTC", 4)}
    now = _epyc_points_again("llamacpp-matrix-epyc-item80.json", "llamacpp-matrix-epyc-item79.json",
                             again, 80)  # fmt: skip
    point = now["np2_b64/long"]
    assert _decode_steps(point) == [0.95, 0.92, 0.91, 0.86, 0.88]
    assert _prompt_steps(point) == [0.9, 0.9, 0.9, 0.85, 0.91]
    assert _save_probes(now, again) == [0.1113]
    gate = _gate_readings(point)
    assert sum(n > 1 for _, n in gate) == 11
    assert sorted(round(x, 2) for x, _ in gate if abs(x - 1) > 0.05) == [
        0.85, 0.88, 0.89, 0.91, 0.93, 0.93, 0.93]  # fmt: skip
    low = min(x for lo in point["loads"].values() for m in lo["machine"]
              for x in m["gate_readings"] if x) / point["gate"]["run_ref_ms"]  # fmt: skip
    assert round(low, 2) == 0.83
    assert len(point["gate"]["superseded"]) == 1
    ref = point["gate"]["speed_reference"]["beside"]
    assert (ref["decoders"], ref["tokens"], ref["references"], ref["every"]) == (1, 400, 14, 4)
    assert (ref["median_ms"], ref["min_ms"], ref["max_ms"]) == (928.549, 813.645, 1188.537)
    assert ref["by_context"] == {"200": 914.49, "400": 931.891}  # (JSON keys)
    _, sums = _kept_against_reference(now, "np2_b64/long", 1, 400)
    assert {c: round(ms, 1) for c, ms in sums.items()} == {"202": 965.3, "402": 966.9}
    pair = sum(sums.values()) / 2
    assert round(pair / ref["median_ms"] - 1, 3) == 0.040
    spans = _reading_spans(point)
    assert spans == {"speed_batch": (0.874, 0.985), "speed_lone": (0.873, 1.086),
                     "speed_beside": (0.856, 1.051), "speed_prompt": (0.846, 1.229)}  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 80)
    assert {k: v["np2_b64/long"] for k, v in held.items()} == {"beside": 27, "phase": 19}
    assert {k: v["np2_b64/long"] for k, v in strays.items()} == {
        "beside": (0.027, 0.027), "phase": (0.073, 0.072)}  # fmt: skip
    # the same readings against the pair's rows instead: about -1.2 % (item 75's run of
    # the point, against its rows: +4.5 %)
    beside = json.loads((validation / "llamacpp-at-speed-beside-item80.json").read_text())
    at_speed = validation_module("llamacpp_at_speed")
    bias, _ = at_speed.prompt_against_runs(beside["points"], now)["np2_b64/long"]
    assert round(bias + math.log(ref["median_ms"] / pair), 3) == -0.012
    was = json.loads((validation / "llamacpp-matrix-epyc-item79.json").read_text())["results"]
    _, strays75 = _prompt_readings_kept(was, again, 75)
    assert strays75["beside"]["np2_b64/long"] == (0.045, 0.058)
    sets = json.loads((validation / "llamacpp-at-speed-item80.json").read_text())
    alone = {r: _points_at_speed(sets, r, tuple(again)) for r in ("speed-batch", "speed", "phase")}
    assert alone == {"speed-batch": {"np2_b64/long": 26}, "speed": {"np2_b64/long": 17},
                     "phase": {"np2_b64/long": 31}}  # fmt: skip
    rows_ = _by_point(_cells(validation / "llamacpp-matrix-epyc-item80.json"))
    assert tuple(rows_[NP2, "long"][c] for c in (2, 4, 6)) == ("4 / 35", "30 / 35", "31 / 35")
    # over all six points: the other five are item 79's outputs
    per_point = _readings_over_six(now, again, 80, 79)
    six = {name: sum(v.values()) for name, v in per_point.items()}
    assert six == {"beside": 180, "phase": 139, "lone-beside": 162}
    assert per_point["lone-beside"]["np2_b64/long"] == 16
    assert (min(per_point["beside"].values()), max(per_point["beside"].values())) == (26, 34)
    assert _six_at_speed(sets, now) == {"speed-batch": 169, "speed": 145, "phase": 196,
                                         "profile": 127}  # fmt: skip
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 3.3% /" in printed
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "The beside reading lay **+2.7 %** from the runs' prompt steps (spread 2.7 %; item " \
           "75's run of the point, against its rows: +4.5 %, spread 5.8 %), the lone prompt " \
           "+7.3 % (7.2 %). Against this profile's rows, 4.0 % dearer than the reference, the " \
           "same readings would have lain about −1.2 %" in doc  # fmt: skip
    assert "27 of 35 with the beside reading and the full batch's (item 75: 23), 16 with the " \
           "lone decode reading, 19 with the lone prompt; 26 at the full batch's reading " \
           "alone, 17 at the lone decode reading alone, **4** at the profile's speed, 31 with " \
           "each phase at the runs' own median ratio" in doc  # fmt: skip
    assert "Table 1 with the beside reading and the full batch's **180 of 210** (26–34 a " \
           "point), with the beside reading and the lone decode reading 162, with the lone " \
           "prompt 139; 169 at the full batch's reading alone, 145 at the lone decode reading " \
           "alone, 127 at the profile's speed; each phase at the runs' own median ratio 196" \
        in doc  # fmt: skip
    account = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert "(item 80's set: 180, 139, 169, 145 and 127;" in account
    calibration = " ".join((ROOT / "docs" / "calibration.md").read_text().split())
    assert "At `-np 2 -b 64` long (item 80) the rows lay 4 % above the reference, and read " \
           "against the reference the beside reading lay 2.7 % above the runs' prompt steps, " \
           "where against the rows it would have lain about 1.2 % below" in calibration  # fmt: skip


def test_item_81s_long_points_and_which_yardstick_the_beside_reading_takes() -> None:
    # item 81: -np 4 long and -kvu long again with the beside reading's own reference in
    # their profiles, so every point has one; the hosts held their profiles' speed. Against
    # the reference, the profile's rows of the pair or the fit's price of those rows, the
    # beside reading gives 179, 179 and 173 of 210: the reference stays
    validation = ROOT / "docs" / "validation"
    again = {"default/long": ("2026-12-07 08:06 UTC", 32),
             "kvu/long": ("2026-12-07 08:43 UTC", 24)}  # fmt: skip
    now = _epyc_points_again("llamacpp-matrix.json", "llamacpp-matrix-epyc-item80.json", again, 81)
    assert {p: _decode_steps(now[p]) for p in again} == {
        "default/long": [1.05, 1.04, 1.03, 1.06, 1.04],
        "kvu/long": [1.02, 1.0, 1.0, 0.95, 0.98]}  # fmt: skip
    assert {p: _prompt_steps(now[p]) for p in again} == {
        "default/long": [0.99, 1.02, 1.02, 1.02, 1.03],
        "kvu/long": [0.99, 1.0, 0.99, 0.96, 0.99]}  # fmt: skip
    assert _save_probes(now, again) == [0.0879, 0.093]
    gate = {p: _gate_readings(now[p]) for p in again}
    assert {p: sum(n > 1 for _, n in g) for p, g in gate.items()} == {
        "default/long": 4,
        "kvu/long": 5,
    }
    assert {p: (round(min(x for x, _ in g), 2), round(max(x for x, _ in g), 2))
            for p, g in gate.items()} == {
        "default/long": (0.95, 1.04), "kvu/long": (0.96, 1.02)}  # fmt: skip
    assert [len(now[p]["gate"]["superseded"]) for p in again] == [0, 0]
    refs = {p: now[p]["gate"]["speed_reference"]["beside"] for p in again}
    assert {p: (r["decoders"], r["tokens"], r["references"], r["median_ms"], r["min_ms"],
                r["max_ms"]) for p, r in refs.items()} == {
        "default/long": (3, 400, 26, 683.074, 618.535, 697.537),
        "kvu/long": (3, 400, 23, 709.597, 632.016, 761.756)}  # fmt: skip
    assert {p: r["by_context"] for p, r in refs.items()} == {
        "default/long": {"200": 682.037, "400": 686.211},
        "kvu/long": {"200": 703.991, "400": 743.609}}  # fmt: skip
    rows = {}
    for p in again:
        kept, sums = _kept_against_reference(now, p, 3, 400)
        rows[p] = sum(sums.values()) / 2
        if p == "default/long":  # the reading's two bands, each reading's probes mostly in its own
            low = [r for r in kept if r["speed"] < 0.95]
            assert sorted({round(r["speed"], 2) for r in low}) == [0.92, 0.93]
            assert sorted({round(r["speed"], 2) for r in kept if r not in low}) == [
                1.0, 1.01, 1.02]  # fmt: skip
            assert len(low) == 6
            assert sum((x < 660) == (r in low) for r in kept for x in r["steps_ms"]) == 84
    assert {p: round(rows[p], 1) for p in again} == {"default/long": 691.7, "kvu/long": 717.5}
    assert {p: round(rows[p] / refs[p]["median_ms"] - 1, 3) for p in again} == {
        "default/long": 0.013, "kvu/long": 0.011}  # fmt: skip
    spans = {p: _reading_spans(now[p], ("speed_beside", "speed_prompt")) for p in again}
    assert spans == {
        "default/long": {"speed_beside": (0.922, 1.019), "speed_prompt": (0.901, 1.046)},
        "kvu/long": {"speed_beside": (0.912, 1.03), "speed_prompt": (0.881, 1.026)}}  # fmt: skip
    held, strays = _prompt_readings_kept(now, again, 81)
    assert held == {"beside": {"default/long": 34, "kvu/long": 25},
                    "phase": {"default/long": 31, "kvu/long": 26}}  # fmt: skip
    assert strays["beside"]["default/long"] == (-0.038, 0.004)
    assert strays["beside"]["kvu/long"] == (0.018, 0.012)
    was = json.loads((validation / "llamacpp-matrix-epyc-item80.json").read_text())["results"]
    assert _prompt_readings_kept(was, {"default/long": None}, 77)[1]["beside"][
        "default/long"] == (0.016, 0.035)  # fmt: skip
    assert _prompt_readings_kept(was, {"kvu/long": None}, 76)[1]["beside"]["kvu/long"] == (
        0.037, 0.072)  # fmt: skip
    assert {p: sum(_inside(was[p]).values()) for p in again} == {"default/long": 23, "kvu/long": 21}
    sets = json.loads((validation / "llamacpp-at-speed-item81.json").read_text())
    alone = {r: _points_at_speed(sets, r, tuple(again)) for r in ("speed-batch", "speed", "phase")}
    assert alone == {"speed-batch": {"default/long": 27, "kvu/long": 28},
                     "speed": {"default/long": 29, "kvu/long": 25},
                     "phase": {"default/long": 29, "kvu/long": 28}}  # fmt: skip
    # over all six points: the other four are item 80's outputs
    per_point = _readings_over_six(now, again, 81, 80)
    assert {name: sum(v.values()) for name, v in per_point.items()} == {
        "beside": 179, "phase": 138, "lone-beside": 163}  # fmt: skip
    assert (min(per_point["beside"].values()), max(per_point["beside"].values())) == (25, 34)
    assert _six_at_speed(sets, now) == {"speed-batch": 164, "speed": 150, "phase": 187,
                                         "profile": 139}  # fmt: skip
    printed = "\n".join(sets["noise_printed"]["new_points_printed"]["--wander"])
    assert "(real repeats / draws): T1 2.6% /" in printed
    # which yardstick: the same readings against the profile's rows of the pair and against
    # the fit's price of them (--ratio speed-beside-rows, speed-beside-fit): every load's
    # prompt speed is the beside reading's times the point's factor
    at_speed = validation_module("llamacpp_at_speed")
    beside = json.loads((validation / "llamacpp-at-speed-beside-item81.json").read_text())
    held_by, biases, priced = {}, {}, {}
    for name in ("beside", "beside-rows", "beside-fit"):
        kept = json.loads((validation / f"llamacpp-at-speed-{name}-item81.json").read_text())
        assert kept["ratio"] == f"speed-{name}"
        priced[name] = kept["points"]
        held_by[name] = sum(v["at_speed"]["in_target"] for loads in kept["points"].values()
                            for v in loads.values())  # fmt: skip
        biases[name] = [b for b, _ in at_speed.prompt_against_runs(kept["points"], now).values()]
        factors = {p: {round(v["prompt_ratio"] / beside["points"][p][load]["prompt_ratio"], 2)
                       for load, v in loads.items()}
                   for p, loads in kept["points"].items()}  # fmt: skip
        if name == "beside-rows":  # the reference over the rows: 1 but at -np 2 -b 64 long
            assert factors == {"default/short": {1.0}, "default/long": {0.99},
                               "np2_b64/long": {0.96}, "kvu/long": {0.99}, "kvu/short": {0.99},
                               "np2_b64/short": {1.01}}  # fmt: skip
        if name == "beside-fit":
            assert factors == {"default/short": {1.01}, "default/long": {1.04},
                               "np2_b64/long": {0.99}, "kvu/long": {1.01}, "kvu/short": {1.01},
                               "np2_b64/short": {1.0}}  # fmt: skip
    assert held_by == {"beside": 179, "beside-rows": 179, "beside-fit": 173}
    # the rows over the reference (within 1.3 % but at -np 2 -b 64 long) and over the fit
    # (-np 4 long's rows took 5.7 % more than the fit charges)
    over = {p: [max(priced[a][p][load]["prompt_ratio"] / priced[b][p][load]["prompt_ratio"]
                    for load in loads) for a, b in (("beside", "beside-rows"),
                                                    ("beside-rows", "beside-fit"))]
            for p, loads in priced["beside"].items()}  # fmt: skip
    assert {p: round(x[0], 3) for p, x in over.items() if abs(x[0] - 1) > 0.013} == {
        "np2_b64/long": 1.041}  # fmt: skip
    assert round(1 / over["default/long"][1], 3) == 1.057
    assert {k: (round(100 * min(b), 1), round(100 * max(b), 1),
                round(100 * float(np.mean(np.abs(b))), 1)) for k, b in biases.items()} == {
        "beside": (-3.8, 2.7, 2.2), "beside-rows": (-5.0, 0.7, 1.9),
        "beside-fit": (-2.1, 2.5, 1.5)}  # fmt: skip
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "beside reading fell in two bands, 0.92–0.93 × (6 readings) and 1.00–1.02 × (9), " \
           "84 of the 90 probes in their reading's band" in doc  # fmt: skip
    assert "Table 1 holds **179, 179 and 173 of 210**. The prompt bias point by point: −3.8 to " \
           "+2.7 % against the reference (mean |bias| 2.2 %), −5.0 to +0.7 % against the rows " \
           "(1.9 %), −2.1 to +2.5 % against the fit (1.5 %)" in doc  # fmt: skip
    assert "Table 1 with the beside reading and the full batch's **179 of 210** (25–34 a " \
           "point), with the beside reading and the lone decode reading 163, with the lone " \
           "prompt 138; 164 at the full batch's reading alone, 150 at the lone decode reading " \
           "alone, 139 at the profile's speed; each phase at the runs' own median ratio 187" \
        in doc  # fmt: skip
    assert "**32 / 33 / 32** at `-np 4` long (item 77's run: 23 / 32 / 31) and **24 / 28 / 28** " \
           "at `-kvu` long (item 76's: 21 / 26 / 25)" in doc  # fmt: skip
    account = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert (
        "**179 of 210**, against 138 with the lone prompt, 164 at the full batch's reading "
        "alone, 150 at the lone decode reading alone and 139 at the profile's speed" in account
    )
    assert "read against the profile's rows of the pair instead of its reference, 179 too, " \
           "against the fit's price of those rows 173" in account  # fmt: skip


def test_item_74s_saves_at_the_runs_price_lose_cells() -> None:
    # item 74 (--resimulate --save-price, an ablation): the long points' saves at the
    # evicting cache's 0.0095 ms a token, the short points' at 0.023: 143 of 210 against
    # 149 at the probes' prices, and at each load's own speed per phase 192 against 195
    validation = ROOT / "docs" / "validation"
    ablation = validation / "llamacpp-matrix-epyc-item74-save-runs.json"
    rows = _cells(ablation)
    published = _by_point(_cells(validation / "llamacpp-matrix-epyc-item72.json"))  # (its base)
    assert _totals(rows) == [143, 187, 189]  # (Tables 2 and 3 charge no save)
    changed = {k: (published[k][2], v[2]) for k, v in _by_point(rows).items()
               if v[2] != published[k][2]}  # fmt: skip
    assert changed == {
        (NP4, "short"): ("24 / 35", "25 / 35"), (KVU, "long"): ("29 / 35", "28 / 35"),
        (NP2, "short"): ("25 / 35", "20 / 35"), (NP2, "long"): ("16 / 35", "15 / 35")}  # fmt: skip
    results = json.loads(ablation.read_text())["results"]
    assert {p: r["prompt_save"]["ms_per_token"] for p, r in results.items()} == {
        p: 0.0095 if p.endswith("long") else 0.023 for p in results}  # fmt: skip
    phase = json.loads((validation / "llamacpp-at-speed-phase-save-item74.json").read_text())
    assert phase["ratio"] == "phase"
    at_price = _points_at_speed({"phase": phase}, "phase", tuple(phase["points"]))
    sets = json.loads((validation / "llamacpp-at-speed-item72.json").read_text())
    at_probe = _points_at_speed(sets, "phase", tuple(phase["points"]))
    assert (sum(at_price.values()), sum(at_probe.values())) == (192, 195)
    assert {p: (at_probe[p], n) for p, n in at_price.items() if n != at_probe[p]} == {
        "kvu/long": (33, 31), "np2_b64/short": (32, 31)}  # fmt: skip
    # what the runs paid (item 73's kept output): one price a point does not describe it
    paid = json.loads((validation / "llamacpp-save-price-item73.json").read_text())["points"]
    assert (paid["kvu/long"]["growing"]["ms_per_token"], paid["kvu/long"]["growing"]["mean"]) == (
        0.0478, 0.056)  # fmt: skip
    growing = [(paid[p]["growing"]["ms_per_token"], paid[p]["growing"]["mean"])
               for p in ("np2_b64/long", "np2_b64/short")]  # fmt: skip
    assert growing == [(0.0129, 0.0418), (0.0261, 0.0355)]
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "Table 1 holds **143 of 210** against 149 at the probes' prices" in doc
    readme = " ".join(
        (ROOT / "docs" / "llamacpp-fidelity.md").read_text().split()
    )  # (the README's account)
    assert "one price a point at the runs' own loses cells (143 of 210, item 74)" in readme


SETS_AT_SPEED = [
    # item 81's set (published): -np 4 long and -kvu long run again with the beside
    # reading's own reference in their profiles; the other points' outputs are item 80's
    ("item81", "llamacpp-matrix.json", 139,
     {"runs": 181, "mean": 176, "gate": 159, "gate-all": 148, "speed": 150,
      "speed-batch": 164, "one-run": 140, "phase": 187, "one-run-phase": 142},
     {"speed": [-0.017, 0.043], "speed-batch": [0.002, 0.031], "level": [0.036]},
     {"": {"T1": 118, "T2": 151, "T3": 152}, " --session": {"T1": 150, "T3": 181},
      "speed-batch": {"T1": 194}, "speed": {"T1": 174}},
     {"default/long": 26, "kvu/long": 27}),
    # item 80's set (published until item 81): -np 2 -b 64 long run again with the beside
    # reading's own reference in its profile; the other points' outputs are item 79's
    ("item80", "llamacpp-matrix-epyc-item80.json", 127,
     {"runs": 193, "mean": 190, "gate": 147, "gate-all": 148, "speed": 145,
      "speed-batch": 169, "one-run": 147, "phase": 196, "one-run-phase": 148},
     {"speed": [-0.03, 0.054], "speed-batch": [0.003, 0.038], "level": [0.04]},
     {"": {"T1": 94, "T2": 139, "T3": 141}, " --session": {"T1": 112, "T3": 158},
      "speed-batch": {"T1": 178}, "speed": {"T1": 154}},
     {"np2_b64/long": 31}),
    # item 79's set (published until item 80): -np 2 -b 64 short and -kvu short run again
    # with the beside reading's own reference in their profiles; the other points' outputs
    # are item 78's
    ("item79", "llamacpp-matrix-epyc-item79.json", 139,
     {"runs": 195, "mean": 198, "gate": 161, "gate-all": 162, "speed": 157,
      "speed-batch": 163, "one-run": 162, "phase": 198, "one-run-phase": 163},
     {"speed": [-0.029, 0.058], "speed-batch": [0.016, 0.049], "level": [0.043]},
     {"": {"T1": 96, "T2": 136, "T3": 138}, " --session": {"T1": 106, "T3": 148},
      "speed-batch": {"T1": 161}, "speed": {"T1": 141}},
     {"np2_b64/short": 34, "kvu/short": 32}),
    # item 78's set (published until item 79): -np 4 short run again with the beside
    # reading's own reference in its profile; the other points' outputs are item 77's
    ("item78", "llamacpp-matrix-epyc-item78.json", 136,
     {"runs": 194, "mean": 198, "gate": 160, "gate-all": 165, "speed": 164,
      "speed-batch": 167, "one-run": 162, "phase": 197, "one-run-phase": 172},
     {"speed": [-0.02, 0.055], "speed-batch": [0.019, 0.054], "level": [0.048]},
     {"": {"T1": 94, "T2": 132, "T3": 137}, " --session": {"T1": 104, "T3": 149},
      "speed-batch": {"T1": 156}, "speed": {"T1": 153}},
     {"default/short": 31, "default/long": 32}),
    # item 77's set (published until item 78): -np 4 long run again with the prompt read
    # beside the decoders too; the other points' outputs are item 76's
    ("item77", "llamacpp-matrix-epyc-item77.json", 134,
     {"runs": 193, "mean": 199, "gate": 166, "gate-all": 172, "speed": 168,
      "speed-batch": 170, "one-run": 159, "phase": 196, "one-run-phase": 168},
     {"speed": [-0.018, 0.056], "speed-batch": [0.016, 0.053], "level": [0.048]},
     {"": {"T1": 94, "T2": 129, "T3": 131}, " --session": {"T1": 103, "T3": 145},
      "speed-batch": {"T1": 156}, "speed": {"T1": 152}},
     {"default/long": 32, "np2_b64/long": 33}),
    # item 76's set (published until item 77): -np 2 -b 64 short, -kvu long and -kvu short
    # run again with the prompt read beside the decoders too; the other points' outputs
    # are item 75's (the same runs and model)
    ("item76", "llamacpp-matrix-epyc-item76.json", 135,
     {"runs": 193, "mean": 197, "gate": 173, "gate-all": 181, "speed": 166,
      "speed-batch": 169, "one-run": 149, "phase": 194, "one-run-phase": 160},
     {"speed": [0.001, 0.053], "speed-batch": [0.011, 0.059], "level": [0.053]},
     {"": {"T1": 89, "T2": 127, "T3": 129}, " --session": {"T1": 116, "T3": 145},
      "speed-batch": {"T1": 162}, "speed": {"T1": 159}},
     {"np2_b64/short": 34, "kvu/long": 33, "kvu/short": 31}),
    # item 75's set (published until item 76): -np 2 -b 64 long and -np 4 short run again
    # with the prompt read beside the decoders too; the other points' outputs are item 72's
    # (the same runs and model)
    ("item75", "llamacpp-matrix-epyc-item75.json", 155,
     {"runs": 188, "mean": 193, "gate": 171, "gate-all": 185, "speed": 168,
      "speed-batch": 166, "one-run": 152, "phase": 192, "one-run-phase": 161},
     {"speed": [0.006, 0.053], "speed-batch": [0.015, 0.052], "level": [0.046]},
     {"": {"T1": 109, "T2": 160, "T3": 165}, " --session": {"T1": 139, "T3": 180},
      "speed-batch": {"T1": 167}, "speed": {"T1": 161}},
     {"default/short": 30, "np2_b64/long": 33, "kvu/long": 32}),
    # item 72's set (published until item 75): -np 4 short and -np 2 -b 64 long run again
    # with the prompt reading; the other points' outputs are item 71's (the same runs and model)
    ("item72", "llamacpp-matrix-epyc-item72.json", 149,
     {"runs": 189, "mean": 189, "gate": 162, "gate-all": 179, "speed": 172,
      "speed-batch": 173, "one-run": 157, "phase": 195, "one-run-phase": 167},
     {"speed": [-0.004, 0.05], "speed-batch": [0.004, 0.049], "level": [0.041]},
     {"": {"T1": 88, "T2": 171, "T3": 174}, " --session": {"T1": 126, "T3": 182},
      "speed-batch": {"T1": 175}, "speed": {"T1": 169}},
     {"default/short": 32, "np2_b64/long": 32, "kvu/long": 32}),
    # item 71's set (published until item 72): -np 4 long run again with the prompt
    # reading; the other points' outputs are item 70's (the same runs and model)
    ("item71", "llamacpp-matrix-epyc-item71.json", 163,
     {"runs": 183, "mean": 189, "gate": 155, "gate-all": 170, "speed": 159,
      "speed-batch": 173, "one-run": 146, "phase": 194, "one-run-phase": 154},
     {"speed": [0.011, 0.056], "speed-batch": [-0.006, 0.046], "level": [0.045]},
     {"": {"T1": 116, "T2": 168, "T3": 171}, " --session": {"T1": 153, "T3": 179},
      "speed-batch": {"T1": 173}, "speed": {"T1": 159}},
     {"default/long": 32, "kvu/long": 32, "np2_b64/long": 24}),
    # item 70's set (published until item 71): all six points' runs here (item 70 ran -kvu
    # long again), every ratio run afresh, with the speed per phase: at each load's own
    # median step for its decode and its prompt steps 196, against 174 at the decode
    # steps' alone
    ("item70", "llamacpp-matrix-epyc-item70.json", 161,
     {"runs": 174, "mean": 188, "gate": 148, "gate-all": 159, "speed": 158,
      "speed-batch": 163, "one-run": 152, "phase": 196, "one-run-phase": 161},
     {"speed": [0.026, 0.07], "speed-batch": [-0.005, 0.045], "level": [0.042]},
     {"": {"T1": 142, "T2": 158, "T3": 160}, " --session": {"T1": 159, "T3": 176},
      "speed-batch": {"T1": 168}, "speed": {"T1": 169}},
     {"default/long": 23, "kvu/long": 32, "np2_b64/long": 24}),
    # item 69's set (published until item 70): -np 4 short, -kvu short and -np 2 -b 64 long again on
    # item 68's host; the others' outputs are item 68's (the same runs and model). At their
    # runs' own median step -np 2 -b 64 long holds the same 24: its misses are not the
    # host's speed as a load's median step reads it (a run's own speed moves its queue's
    # TTFT more, item 69); the lone reading (162) holds fewer than the profile's speed (164)
    ("item69", "llamacpp-matrix-epyc-item69.json", 164,
     {"runs": 175, "mean": 188, "gate": 156, "gate-all": 166, "speed": 162,
      "speed-batch": 158, "one-run": 167},
     {"speed": [0.028, 0.068], "speed-batch": [0.001, 0.044], "level": [0.039]},
     {"": {"T1": 150, "T2": 156, "T3": 156}, " --session": {"T1": 163, "T3": 167},
      "speed-batch": {"T1": 149}, "speed": {"T1": 166}},
     {"default/short": 34, "kvu/short": 29, "np2_b64/long": 24}),
    # item 68's set: -np 2 -b 64 short and -np 4 long run again on a host whose speed
    # swung; the four other points' outputs are item 67's (the same runs and model)
    ("item68", "llamacpp-matrix-epyc-item68.json", 161,
     {"runs": 180, "mean": 183, "gate": 164, "gate-all": 172, "speed": 169,
      "speed-batch": 164, "one-run": 165},
     {"speed": [0.006, 0.066], "speed-batch": [0.004, 0.034], "level": [0.034]},
     {"": {"T1": 142, "T2": 141, "T3": 130}, " --session": {"T1": 169, "T3": 157},
      "speed-batch": {"T1": 155}, "speed": {"T1": 176}},
     {"default/long": 23, "np2_b64/short": 32, "kvu/long": 33}),
    # item 67's set (published): -kvu long, -np 2 -b 64 long, -kvu short and -np 4 short
    # run again with the slots emptied before each run, every point simulated with slots
    # released together given out lowest id first; -np 4 short and -kvu short ran 1.01-1.04
    # x the charge, and at each load's own median step hold 32 and 30
    ("item67", "llamacpp-matrix-epyc-item67.json", 165,
     {"runs": 189, "mean": 185, "gate": 179, "gate-all": 180, "speed": 183,
      "speed-batch": 177, "one-run": 169},
     {"speed": [-0.016, 0.011], "speed-batch": [0.008, 0.013], "level": [0.014]},
     {"": {"T1": 141, "T2": 144, "T3": 132}, " --session": {"T1": 166, "T3": 154},
      "speed-batch": {"T1": 161}, "speed": {"T1": 183}},
     {"default/short": 32, "kvu/short": 30, "kvu/long": 33, "np2_b64/long": 30}),
    # item 66's set: every point's profile with the prompt-cache probe, -np 4 short and
    # -kvu short run again
    ("item66", "llamacpp-matrix-epyc-item66.json", 170,
     {"runs": 186, "mean": 189, "gate": 177, "gate-all": 181, "speed": 182,
      "speed-batch": 175, "one-run": 164},
     {"speed": [-0.011, 0.017], "speed-batch": [0.008, 0.013], "level": [0.017]},
     {"": {"T1": 152, "T2": 131, "T3": 124}, " --session": {"T1": 158, "T3": 147},
      "speed-batch": {"T1": 169}, "speed": {"T1": 179}},
     {"default/short": 32, "kvu/short": 33}),
    # item 65's set: -np 2 -b 64 short and long again with the prompt-cache probe in their
    # profiles; at the runs' own speed -np 2 -b 64 long holds 24, its misses not the
    # host's speed (Poisson 0.6's median TTFT, p90s)
    ("item65", "llamacpp-matrix-epyc-item65.json", 158,
     {"runs": 187, "mean": 187, "gate": 172, "gate-all": 177, "speed": 181,
      "speed-batch": 175, "one-run": 161},
     {"speed": [-0.009, 0.014], "speed-batch": [0.006, 0.01], "level": [0.016]},
     {"": {"T1": 155, "T2": 137, "T3": 124}, " --session": {"T1": 161, "T3": 155},
      "speed-batch": {"T1": 172}, "speed": {"T1": 182}},
     {"np2_b64/short": 33, "np2_b64/long": 24}),
    # item 64's set: -np 4 long and -kvu long again with the prompt-cache probe in their
    # profiles
    ("item64", "llamacpp-matrix-epyc-item64.json", 158,
     {"runs": 196, "mean": 196, "gate": 185, "gate-all": 191, "speed": 183,
      "speed-batch": 186, "one-run": 165},
     {"speed": [-0.012, 0.021], "speed-batch": [0.004, 0.012], "level": [0.025]},
     {"": {"T1": 136, "T2": 158, "T3": 146}, " --session": {"T1": 143, "T3": 163},
      "speed-batch": {"T1": 180}, "speed": {"T1": 172}},
     {"default/long": 31, "kvu/long": 33}),
    # item 63's set: item 61's runs, Table 1 charging the prompt cache's save; the readings
    # and the runs' decode steps are item 61's (the save is charged at launches, not to
    # decode steps), the cells a few more
    ("item63", "llamacpp-matrix-epyc-item63.json", 160,
     {"runs": 197, "mean": 197, "gate": 181, "gate-all": 184, "speed": 187,
      "speed-batch": 189, "one-run": 170},
     {"speed": [-0.01, 0.019], "speed-batch": [0.001, 0.01], "level": [0.023]},
     {"": {"T1": 134, "T2": 160, "T3": 153}, " --session": {"T1": 141, "T3": 165},
      "speed-batch": {"T1": 183}, "speed": {"T1": 166}},
     {"kvu/short": 32, "kvu/long": 30, "np2_b64/short": 35}),
    # item 61's set: at each load's own median step -kvu short's misses mostly go (31 of
    # 35), long's p90s stay (30); the full batch's reading before each run does better
    # than the lone one, as on item 60's set
    ("item61", "llamacpp-matrix-epyc-item61.json", 157,
     {"runs": 195, "mean": 199, "gate": 178, "gate-all": 181, "speed": 181,
      "speed-batch": 188, "one-run": 172},
     {"speed": [-0.01, 0.019], "speed-batch": [0.001, 0.01], "level": [0.023]},
     {"": {"T1": 127, "T2": 160, "T3": 153}, " --session": {"T1": 137, "T3": 165},
      "speed-batch": {"T1": 185}, "speed": {"T1": 158}},
     {"kvu/short": 31, "kvu/long": 30, "np2_b64/short": 35}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("item", "matrix", "table1", "totals", "strays", "bands", "points"), SETS_AT_SPEED,
    ids=[k[0] for k in SETS_AT_SPEED],
)  # fmt: skip
def test_a_set_at_the_speeds_read_and_its_bands(
    item: str, matrix: str, table1: int, totals: dict[str, int], strays: dict[str, list[float]],
    bands: dict[str, dict[str, int]], points: dict[str, int],
) -> None:  # fmt: skip
    # a kept set priced at each speed llamacpp_at_speed.py reads, and its bands
    # (llamacpp_noise.py), kept in llamacpp-at-speed-ITEM.json (_set_at_speed); a few
    # points' cells at each load's own median step
    kept = _set_at_speed(item, matrix, (table1, totals), strays, bands)
    assert _points_at_speed(kept, "runs", tuple(points)) == points


def test_the_fidelity_account_quotes_item_81s_set_at_the_speeds_read() -> None:
    readme = " ".join(
        (ROOT / "docs" / "llamacpp-fidelity.md").read_text().split()
    )  # (the README's account)
    assert (
        "the lone reading holds **150 of 210** cells against 139 at the profile's speed, "
        "at `--batch NP`'s reading 164; at each load's own mean decode step"
    ) in readme
    assert "runs (an attribution, not a prediction), 176, and with its steps" in readme
    assert "(`cost.prompt_speed`, `--ratio phase`, item 70) **187**" in readme
    assert (
        "load's mean step lies 3.6 % from its point's own level, the lone reading strays 4.3 % "
        "from it (bias −1.7 %), the full batch's 3.1 % (+0.2 %). On item 80's set the lone "
        "reading held 145 against 169, on item 79's 157 against 163, on item 78's 164 against "
        "167, on item 77's 168 against 170, on item 76's 166 against 169, on item 75's 168 "
        "against 166, on item 72's 172 against 173, on item 71's 159 against 163, on item "
        "70's 158 against 161, on item 69's 162 against 164"
    ) in readme
    assert "holds 150 of the 210 real values on the published set, 118 without it" in readme
    assert "(item 80's set 112 and 94, item 79's 106 and 96, item 78's 104 and 94, item 77's " \
           "103 and 94, item 76's 116 and 89, item 75's 139 and 109, item 72's 126 and 88, " \
           "item 71's 153 and 116, item 70's 159 and 142, item 69's 163 and 150, item 68's 169 " \
           "and 142," \
        in readme  # fmt: skip
    assert "before each run holds 194, at the lone reading 174" in readme
    assert "a load's real runs scatter by a median 5.9 % of their mean on the EPYC (item " \
           "70's set), 2.1 % on the Xeon" in readme  # fmt: skip
    # llamacpp_noise.py's run-to-run line: item 70's six (all on the EPYC), item 69's three
    # points run again, item 68's two, item 67's six (on the Xeon)
    validation = ROOT / "docs" / "validation"
    run_to_run = "run to run, standard deviation over the mean, median over the cells "
    for item, key, figure in (("70", "by_flags", "5.9% / 5.7%"),
                              ("69", "new_points_printed", "5.7% / 6.7%"),
                              ("68", "new_points_printed", "7.4% / 6.2%"),
                              ("67", "by_flags", "2.1% / 2.1%")):  # fmt: skip
        kept = json.loads((validation / f"llamacpp-at-speed-item{item}.json").read_text())
        printed = "\n".join(kept["noise_printed"][key]["--wander"])
        assert f"{run_to_run}(real repeats / draws): T1 {figure}" in printed


def test_the_readmes_short_account_of_the_llamacpp_matrix() -> None:
    # the README's bullets under the fidelity table, each from a kept output: the published
    # matrix and its cells by the host's speed, the cells at each load's own speed per
    # phase and at the readings before each run (item 81), the p90 floor (item 54)
    validation = ROOT / "docs" / "validation"
    results = json.loads((validation / "llamacpp-matrix.json").read_text())["results"]
    t1 = sum(sum(_inside(r).values()) for r in results.values())
    bands = validation_module("llamacpp_report").cells_by_steps(results)
    (near, cells_near, n_near), (far, cells_far, n_far) = (bands["within 3 %"],
                                                           bands["beyond 6 %"])  # fmt: skip
    off = [v["steps_vs_charge"]["decode"]["median"] for r in results.values()
           for v in r["loads"].values()
           if abs(v["steps_vs_charge"]["decode"]["median"] - 1) > 0.06]  # fmt: skip
    slower = sum(x > 1 for x in off)
    sets = json.loads((validation / "llamacpp-at-speed-item81.json").read_text())
    phase = sum(_points_at_speed(sets, "phase", tuple(results)).values())
    beside = json.loads((validation / "llamacpp-at-speed-beside-item81.json").read_text())
    ahead = sum(v["at_speed"]["in_target"] for loads in beside["points"].values()
                for v in loads.values())  # fmt: skip
    floor = json.loads((validation / "llamacpp-floor-item54.json").read_text())
    p90 = round(100 * floor["inside"]["one run"]["p90"])
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        f"**The target is not met** on this host: {t1} of 210 cells from probes. What moves "
        f"the cells is the host's speed: at the {n_near} loads whose real decode steps ran "
        f"within 3 % of the charge {round(100 * near / cells_near)} % of the cells are in "
        f"target, at the {n_far} that ran more than 6 % off ({slower} slower, {n_far - slower} "
        f"faster) {round(100 * far / cells_far)} %."
    ) in readme
    assert f"Table 1 holds **{phase} of 210**: what is left of the model's own error" in readme
    assert f"the host's speed gives **{ahead} of 210**, against {t1} at the profile's speed" \
        in readme  # fmt: skip
    assert f"requests holds the p90 rule only {p90} % of the time" in readme
    assert (t1, phase, ahead, p90, slower) == (139, 187, 179, 63, 3)


def test_item_83s_point_on_another_vm_and_the_readings_running_median() -> None:
    # item 83: -np 4 short on another (slower, noisier) VM, kept apart from the published
    # set; each run priced at the running median of the point's readings
    # (--ratio speed-beside-median) against each run's own readings, here and on the
    # published set
    validation = ROOT / "docs" / "validation"
    kept = validation / "llamacpp-matrix-epyc-item83.json"
    rows = _by_point(_cells(kept))
    assert {k: (r[2], r[3], r[4], r[6]) for k, r in rows.items()} == {
        (NP4, "short"): ("31 / 35", "5 %", "34 / 35", "33 / 35"),
        (KVU, "short"): ("13 / 35", "11 %", "13 / 35", "16 / 35")}  # fmt: skip
    kvu = json.loads(kept.read_text())["results"]["kvu/short"]
    assert _decode_steps(kvu) == [1.09, 1.02, 0.84, 0.82, 0.84]
    assert (kvu["host_noise"]["median_ms"], round(kvu["host_noise"]["p90_over_p10"], 2)) == (
        121.15, 1.17)  # fmt: skip
    ref = kvu["gate"]["speed_reference"]
    assert (round(ref["median_ms"], 1), ref["references"], round(ref["min_ms"], 1),
            round(ref["max_ms"], 1)) == (24.7, 90, 19.4, 30.4)  # fmt: skip
    point = json.loads(kept.read_text())["results"]["default/short"]
    steps = _decode_steps(point)
    assert (min(steps), max(steps)) == (0.91, 1.04)
    assert point["host_noise"]["median_ms"] == 117.25
    assert round(point["host_noise"]["p90_over_p10"], 2) == 1.12
    ref = point["gate"]["speed_reference"]
    assert (round(ref["median_ms"], 1), ref["references"], round(ref["min_ms"], 1),
            round(ref["max_ms"], 1)) == (22.7, 102, 17.2, 27.1)  # fmt: skip

    def spread(p: dict) -> float:  # the median cell's real spread
        return float(np.median([abs(r["spread"]) for v in p["loads"].values()
                                for r in v["table"] if "spread" in r]))  # fmt: skip

    published = json.loads((validation / "llamacpp-matrix.json").read_text())["results"]
    assert (round(100 * spread(point), 1), round(100 * spread(published["default/short"]), 1)
            ) == (14.5, 7.3)  # fmt: skip
    assert (round(100 * spread(kvu), 1), round(100 * spread(published["kvu/short"]), 1)) == (
        9.7, 8.5)  # fmt: skip
    levels = validation_module("llamacpp_at_speed").point_level
    assert round(100 * levels({"p": kvu}, ["p"]), 1) == 11.4
    assert round(100 * levels(published, list(published)), 1) == 3.6
    at_speed = validation_module("llamacpp_at_speed")
    sets = json.loads((validation / "llamacpp-at-speed-item83.json").read_text())
    held = {r: _points_at_speed(sets, r, ("default/short", "kvu/short"))
            for r in sets if r != "about"}  # fmt: skip
    assert held == {
        "speed-beside": {"default/short": 34, "kvu/short": 30},
        "speed-beside-median": {"default/short": 32, "kvu/short": 17},
        "speed-batch": {"default/short": 32, "kvu/short": 26},
        "speed": {"default/short": 26, "kvu/short": 17},
        "phase": {"default/short": 32, "kvu/short": 33}}  # fmt: skip
    assert all(sets[r]["ratio"] == r for r in held)
    biases = {(r, p): [round(100 * x, 1) for x in at_speed.against_mean(
                  {p: sets[r]["points"][p]}, {p: one})]
              for r in ("speed", "speed-batch", "speed-beside", "speed-beside-median")
              for p, one in (("default/short", point), ("kvu/short", kvu))}  # fmt: skip
    assert {k: v for k, v in biases.items() if k[1] == "default/short"} == {
        ("speed", "default/short"): [8.2, 2.8], ("speed-batch", "default/short"): [-1.9, 4.7],
        ("speed-beside", "default/short"): [-1.9, 4.7],
        ("speed-beside-median", "default/short"): [-2.4, 3.8]}  # fmt: skip
    assert (biases[("speed-beside", "kvu/short")][1],
            biases[("speed-beside-median", "kvu/short")][1]) == (6.4, 9.9)  # fmt: skip
    # the published set: the running median against each run's own readings
    by_point = {}
    for name in ("beside", "beside-median"):
        out = json.loads((validation / f"llamacpp-at-speed-{name}-item81.json").read_text())
        assert out["ratio"] == f"speed-{name}"
        by_point[name] = {p: sum(v["at_speed"]["in_target"] for v in loads.values())
                          for p, loads in out["points"].items()}  # fmt: skip
    assert {k: sum(v.values()) for k, v in by_point.items()} == {
        "beside": 179, "beside-median": 155}  # fmt: skip
    assert {p: (n, by_point["beside-median"][p]) for p, n in by_point["beside"].items()} == {
        "default/short": (31, 33), "default/long": (34, 32), "kvu/short": (33, 20),
        "kvu/long": (25, 22), "np2_b64/short": (29, 24), "np2_b64/long": (27, 24)}  # fmt: skip
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "`host_noise.py` 117 ms with p90/p10 1.12 at the point's start" in doc
    assert "a median 22.7 ms over the profile's 102 references, 17.2–27.1" in doc
    assert "`-np 4` short: Table 1 holds **31 of 35** (median p50 error 5 %), Table 2 34, " \
           "Table 3 33; the real decode steps ran 0.91–1.04 × Table 1's charge" in doc  # fmt: skip
    assert "`-kvu` short (`host_noise.py` 121 ms, p90/p10 1.17; the reference step a median " \
           "24.7 ms over 90 references, 19.4–30.4): Table 1 holds **13 of 35** (median p50 " \
           "error 11 %), Table 2 13, Table 3 16. The host moved under it: the real decode " \
           "steps ran 1.09 × Table 1's charge at Poisson 0.3 and 0.82–0.84 × at the three " \
           "busiest loads, and each load's mean step lay 11.4 % from the point's own level " \
           "(3.6 % on the published set). The median cell's real spread is 9.7 % (published " \
           "8.5 %)" in doc  # fmt: skip
    assert "**30 of 35** with the beside prompt and the full batch (against Table 1's 13), 26 " \
           "with the full batch alone, 17 with the lone reading, each phase at the runs' own " \
           "33" in doc  # fmt: skip
    assert "**17 of 35** at `-kvu` short against 30 (it lagged the host's move: 9.9 % from " \
           "the loads' mean steps against 6.4 %)" in doc  # fmt: skip
    assert "the median cell's real spread is **14.5 %** against 7.3 % at the published" in doc
    assert "prompt beside it **34 of 35**, the full batch's alone 32, the lone reading 26 (it " \
           "read 8.2 % above the runs' mean step, where the full batch's read 1.9 % below), " \
           "each phase at the runs' own median step 32" in doc  # fmt: skip
    assert "**32 of 35** at `-np 4` short against 34 with each run's own readings (its " \
           "decode speed lay 3.8 % from the loads' mean steps, the last reading's 4.7 %, but " \
           "with a bias of −2.4 %), **17 of 35** at `-kvu` short against 30" in doc  # fmt: skip
    assert "and **155 of 210** on the published set against 179" in doc
    assert "`-np 4` short 31 and 33, `-np 4` long 34 and 32, `-kvu` short 33 and 20, `-kvu` " \
           "long 25 and 22, `-np 2 -b 64` short 29 and 24, `-np 2 -b 64` long 27 and 24" \
        in doc  # fmt: skip
    account = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert "On item 81's set it held 155 of 210 against 179 (`--ratio speed-beside-median`" \
        in account  # fmt: skip
    assert "`-np 4` short's Table 1 held 31 of 35 with real spreads twice the published " \
           "set's, the last readings 34 and their running median 32; at `-kvu` short, whose " \
           "host ran 16–18 % faster than its profile in the busy loads, Table 1 held 13, the " \
           "last readings 30 and their running median 17" in account  # fmt: skip


def test_item_85s_point_kept_apart_summarises_to_its_row() -> None:
    # item 85 (tests/unit/test_llamacpp_prompt_reuse.py checks its save prices)
    assert _summary(ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item85.json") == [
        "| `-np 4 -c 4096 -t 2` | long | 4 / 35 | 23 % | 13 / 35 | 8 % | 12 / 35 | 10 % "
        "| 1.17–1.53 |"
    ]
