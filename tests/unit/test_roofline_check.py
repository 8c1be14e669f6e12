"""The roofline against published measurements (the slices that ship in the package)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from lyra_simpy.calibration import roofline_check
from lyra_simpy.calibration.roofline_check import DEFAULT_PROFILES, MISSING, read_rows

DOC = Path(__file__).resolve().parents[2] / "docs" / "calibration-roofline.md"


def test_missing_profiles_is_one_clear_message(tmp_path):
    with pytest.raises(SystemExit) as info:
        read_rows(tmp_path / "nowhere")
    text = str(info.value)
    assert text == MISSING.format(path=tmp_path / "nowhere")
    assert "data/profiles" in text
    assert "ai-dynamo/aiconfigurator" in text
    assert "\n" not in text


@pytest.fixture(scope="module")
def rows():
    return read_rows(DEFAULT_PROFILES)


def test_every_source_gives_rows(rows):
    sources = {r.source for r in rows}
    assert sources == {"aiconfigurator", "vidur", "llm-inference-bench", "splitwise"}
    assert all(r.measured_ms > 0 for r in rows)


def test_roofline_matches_per_op_tables_within_10_percent_median(rows):
    errors = [roofline_check.rel_error(r) for r in rows if r.source == "aiconfigurator"]
    assert statistics.median(abs(e) for e in errors) < 0.10
    # and it is a floor on the accelerators whose 2024 software ran far below peak
    slow = [r for r in rows if r.hardware in ("mi300x", "max1550")]
    assert slow
    assert all(roofline_check.rel_error(r) < 0 for r in slow)


def test_committed_report_is_current(rows):
    assert DOC.read_text() == roofline_check.render(rows), (
        "run `python -m lyra_simpy.calibration.roofline_check > docs/calibration-roofline.md`"
    )


def test_fit_reproduces_the_defaults(rows, capsys):
    assert roofline_check.main(["--fit"]) == 0
    out = capsys.readouterr().out
    assert "bandwidth_efficiency 0.7 " in out
    assert "compute_efficiency 0.75 " in out
    assert "overhead_ms 1.5 " in out
