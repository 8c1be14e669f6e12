"""Paper figures (``lyra-simpy figures``): every registered figure draws from quick
results in PDF and PNG, through the same function ``lyra-simpy run`` uses, with
identical bytes on rerun; the sim-vs-real overlay on synthetic JSONL folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lyra_simpy import load_scenario
from lyra_simpy.cli import main
from lyra_simpy.errors import LyraError
from lyra_simpy.output import plots
from lyra_simpy.output.figures import pareto_front
from lyra_simpy.paper import (
    PAPER_FIGURES,
    FigureInputs,
    MissingInputError,
    draw_declared,
    sim_vs_real,
)
from lyra_simpy.paper.build import build, readme, stale_reason
from lyra_simpy.paper.validation import find_validation_runs, sim_vs_real_figure

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


@pytest.fixture
def built(quick_run_all):
    """Every paper figure from the session's quick results, as ``lyra-simpy figures
    --quick`` drew them right after the run (``quick_run_all``: in its own process,
    through the same :func:`build`): the folder, the files written and the lines printed."""
    out = quick_run_all.paper
    written = sorted(path for path in out.iterdir() if path.name != "README.md")
    return out, written, quick_run_all.paper_stdout.splitlines()


def test_every_registered_figure_is_written_as_pdf_and_png(built):
    out, written, lines = built
    assert not [line for line in lines if line.startswith("running")]  # results reused
    # the validation job's runs are committed in docs/validation: the overlay draws too
    # (without them it is skipped in one line: test_sim_vs_real_* below)
    assert find_validation_runs(REPO / "docs" / "validation")
    assert not [line for line in lines if line.startswith("skipped")]
    drawn = list(PAPER_FIGURES)
    assert sorted(written) == sorted(out / f"{n}{s}" for n in drawn for s in (".pdf", ".png"))
    for name in drawn:
        assert (out / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "README.md").read_text() == readme()


def test_run_and_figures_draw_a_declared_figure_identically(built, quick_run_all):
    out, _, _ = built
    declared = sorted(p.name for p in quick_run_all.figures.glob("*.png"))
    assert declared  # `run` drew the scenarios' figures: the same files, byte for byte
    for name in declared:
        assert (out / name).read_bytes() == (quick_run_all.figures / name).read_bytes(), name


def test_rerun_gives_identical_bytes(built, quick_run_all, tmp_path):
    out, _, _ = built
    names = ["lab02_static_vs_continuous_timeline_static", "calibration_residuals"]
    build(names, SCENARIOS, quick_run_all.results, tmp_path, quick=True, echo=lambda _s: None)
    for name in names:
        for suffix in (".pdf", ".png"):
            again = (tmp_path / f"{name}{suffix}").read_bytes()
            assert again == (out / f"{name}{suffix}").read_bytes(), f"{name}{suffix}"


def test_save_is_deterministic_in_every_format(tmp_path):
    values = np.linspace(1.0, 100.0, 50)
    for run in ("a", "b"):
        fig = plots.cdf({"x": values}, "ttft_ms")
        plots.save(fig, *(tmp_path / f"{run}{s}" for s in (".pdf", ".png", ".svg")))
    for suffix in (".pdf", ".png", ".svg"):
        a, b = ((tmp_path / f"{r}{suffix}").read_bytes() for r in "ab")
        assert a == b, suffix
    pdf = (tmp_path / "a.pdf").read_bytes()
    assert b"CreationDate" not in pdf
    assert b"Matplotlib" not in pdf  # no software version either


def test_stale_results_are_rerun(quick_run_all, tmp_path):
    sc = load_scenario(SCENARIOS / "lab02_static_vs_continuous.yaml", quick=True)
    results = tmp_path / "results"
    shutil.copytree(quick_run_all.results / sc.name, results / sc.name)
    assert stale_reason(sc, results / sc.name) is None
    manifest = results / sc.name / "static" / "manifest.json"
    info = json.loads(manifest.read_text())
    info["scenario"]["seed"] += 1
    manifest.write_text(json.dumps(info))
    assert stale_reason(sc, results / sc.name) == "scenario changed"
    info["scenario"]["seed"] -= 1
    info["git_revision"] = "0" * 40
    manifest.write_text(json.dumps(info))
    assert stale_reason(sc, results / sc.name) == "code changed"
    manifest.unlink()
    assert stale_reason(sc, results / sc.name) == "no results"
    lines: list[str] = []
    name = "lab02_static_vs_continuous_ttft_cdf"
    build([name], SCENARIOS, results, tmp_path / "figs", quick=True, echo=lines.append)
    assert lines[0] == "running lab02_static_vs_continuous (no results)"
    assert stale_reason(sc, results / sc.name) is None


def test_unknown_figure_name_exits_2_with_the_allowed_names(capsys):
    assert main(["figures", "--only", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("lyra-simpy: --only: got 'nope', must be one of: ")
    assert "sim_vs_real" in err[0]
    assert "calibration_residuals" in err[0]


def test_registry_and_scenario_figures_agree():
    declared = {}
    for path in sorted(SCENARIOS.glob("*.yaml")):
        sc = load_scenario(path, quick=True)
        declared |= {spec.file_stem(sc.name): sc.name for spec in sc.figures}
    # every figure a scenario declares is a paper figure, drawn from that scenario
    for stem, scenario in declared.items():
        assert PAPER_FIGURES[stem].scenarios == (scenario,), stem
    required = {"calibration_residuals", "sim_vs_real", "engine_presets_pareto_p99_tpot"}
    assert set(PAPER_FIGURES) == set(declared) | required


def test_committed_figures_are_what_the_registry_makes():
    """figures/ holds the registry's files and its README, nothing stale."""
    files = {p.name for p in (REPO / "figures").iterdir()}
    made = {f"{n}{s}" for n in PAPER_FIGURES for s in (".pdf", ".png")} | {"README.md"}
    assert files <= made
    assert made - files <= {"sim_vs_real.pdf", "sim_vs_real.png"}  # needs real runs
    assert (REPO / "figures" / "README.md").read_text() == readme()


def test_pareto_front():
    xs = [1.0, 2.0, 2.0, 3.0, 0.5, float("nan")]
    ys = [1.0, 3.0, 2.0, 5.0, 1.0, 0.1]
    # (2, 3) is dominated by (2, 2), (0.5, 1) by (1, 1); NaN left out
    assert pareto_front(xs, ys) == [0, 2, 3]
    assert pareto_front([1.0, 1.0], [2.0, 2.0]) == [0, 1]  # ties dominate neither


def _requests(folder: Path, ttft_ms: list[float]) -> Path:
    folder.mkdir(parents=True)
    rows = [
        {"request_id": i, "status": "ok", "ttft_ms": t, "tpot_ms": t / 10}
        for i, t in enumerate(ttft_ms)
    ] + [{"request_id": 99, "status": "rejected", "ttft_ms": None, "tpot_ms": None}]
    (folder / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_sim_vs_real_overlay_from_jsonl_folders(tmp_path):
    val = tmp_path / "docs" / "validation"
    _requests(val / "sim" / "chat", [10.0, 20.0, 30.0])
    _requests(val / "real" / "chat" / "run1", [12.0, 22.0])
    _requests(val / "real" / "chat" / "run2", [11.0, 25.0, 40.0])
    _requests(val / "sim" / "no_real", [1.0])  # no real runs: left out
    found = find_validation_runs(val)
    assert list(found) == ["chat"]
    _sim, real = found["chat"]
    assert [p.name for p in real] == ["run1", "run2"]
    fig = sim_vs_real_figure(found)
    ttft_ax, tpot_ax = fig.axes
    assert ttft_ax.get_xlabel() == "TTFT (ms)"
    assert tpot_ax.get_xlabel() == "TPOT (ms)"
    lines = ttft_ax.get_lines()
    assert len(lines) == 3  # two real runs, one simulated
    assert list(lines[-1].get_xdata()) == [10.0, 20.0, 30.0]  # rejected request left out
    assert list(lines[0].get_ydata()) == [0.5, 1.0]
    assert [t.get_text() for t in ttft_ax.get_legend().get_texts()] == [
        "real (2 runs)", "simulated"
    ]  # fmt: skip
    inputs = FigureInputs("sim_vs_real", tmp_path, {}, tmp_path)
    assert len(sim_vs_real(inputs).axes) == 2  # the registry entry finds them
    plots.save(fig, tmp_path / "x.png")


def test_sim_vs_real_without_real_runs_is_skipped(tmp_path):
    with pytest.raises(MissingInputError, match=r"no real results in docs/validation"):
        sim_vs_real(FigureInputs("sim_vs_real", tmp_path, {}, tmp_path))
    with pytest.raises(ValueError, match="at least one workload"):
        sim_vs_real_figure({})


def test_a_declared_entry_needs_its_figure_in_the_scenario(tmp_path):
    sc = load_scenario(SCENARIOS / "lab02_goodput_vs_batch.yaml", quick=True)
    inputs = FigureInputs("not_declared", tmp_path, {sc.name: sc}, REPO)
    with pytest.raises(LyraError, match="scenario lab02_goodput_vs_batch declares no figure"):
        draw_declared(inputs, sc.name)
