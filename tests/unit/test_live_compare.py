"""compare: relative errors against the median of real runs, their spread, CDFs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lyra_simpy import Scenario, simulate
from lyra_simpy.cli import main
from lyra_simpy.live.compare import METRICS, compare, format_comparison
from lyra_simpy.output.writer import write_variant


def _runs(tmp_path: Path, tiny_scenario: Scenario) -> tuple[Path, list[Path]]:
    sim = tmp_path / "sim"
    write_variant(simulate(tiny_scenario), sim, None)
    reals = []
    for k, scale in enumerate((1.10, 1.00, 1.25)):
        real = tmp_path / f"real{k}"
        shutil.copytree(sim, real)
        summary = json.loads((real / "summary.json").read_text())
        for name in METRICS:
            summary[name] *= scale
        (real / "summary.json").write_text(json.dumps(summary))
        reals.append(real)
    return sim, reals


def test_error_is_against_the_median_real_run(tmp_path: Path, tiny_scenario: Scenario) -> None:
    sim, reals = _runs(tmp_path, tiny_scenario)
    table = compare(sim, reals, tmp_path / "cdf.png", tmp_path / "t.json")
    assert [r["metric"] for r in table] == list(METRICS)
    for row in table:
        if row["sim"]:
            assert row["real"] == pytest.approx(row["sim"] * 1.10)
            assert row["error"] == pytest.approx(1 / 1.10 - 1)
            assert row["spread"] == pytest.approx(1.25 / 1.10 - 1)
    assert (tmp_path / "cdf.png").stat().st_size > 0
    assert json.loads((tmp_path / "t.json").read_text())[0]["metric"] == "median_ttft_ms"
    text = format_comparison(table)
    assert text.splitlines()[1].startswith("median_ttft_ms")
    assert "-9.1%" in text


def test_cli_compare_missing_folder_is_one_line(
    tmp_path: Path, tiny_scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, _ = _runs(tmp_path, tiny_scenario)
    code = main(["compare", str(sim), str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "nope/summary.json: cannot read" in err


def test_cli_compare_prints_the_table(
    tmp_path: Path, tiny_scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, reals = _runs(tmp_path, tiny_scenario)
    assert main(["compare", str(sim), *map(str, reals)]) == 0
    assert "output_throughput" in capsys.readouterr().out
