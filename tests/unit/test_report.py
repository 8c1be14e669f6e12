"""Report tables, provenance, figures and the odd corners of the front end."""

from __future__ import annotations

import math
import runpy
import subprocess
import typing
from importlib import metadata

import numpy as np
import pytest

from lyra_simpy import simulate
from lyra_simpy.dotted import get_path
from lyra_simpy.engine.request import Request
from lyra_simpy.output import provenance
from lyra_simpy.output.figures import FIGURES
from lyra_simpy.output.writer import best_variant, format_table, run_scenario, table_rows
from lyra_simpy.report import FIGURE_FIELDS, FigureSpec


def test_lookup():
    data = {"a": {"b": {"c": 3}}, "x": 1}
    assert get_path(data, "a.b.c") == 3
    assert get_path(data, "a.b") == {"c": 3}
    assert get_path(data, "a.z") is None
    assert get_path(data, "x.y") is None


def test_table_rows_and_best(make_scenario):
    sc = make_scenario(
        {
            "variants": [{"label": "d1", "set": {"scheduler.max_num_seqs": 1}}, {"label": "d4"}],
            "report": {
                "columns": {
                    "v": "label",
                    "depth": "scheduler.max_num_seqs",
                    "thru": "output_throughput",
                    "nothing": "no.such.path",
                },
                "best": "output_throughput",
            },
        }
    )
    results = [simulate(v) for v in sc.expand()]
    headers, rows = table_rows(sc, results)
    assert headers == ["v", "depth", "thru", "nothing"]
    assert [r[:2] for r in rows] == [["d1", 1], ["d4", 4]]
    assert rows[1][2] == results[1].summary["output_throughput"]
    assert rows[0][3] is None
    best = best_variant(sc, results)
    assert best is max(results, key=lambda r: r.summary["output_throughput"])
    assert best_variant(make_scenario(), results) is None  # no `best` in the report


def test_format_table():
    text = format_table(["name", "x", "y"], [["a", 1234.567, 0.012345], ["bb", math.nan, 7]])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "x", "y"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].split() == ["a", "1234.6", "0.0123"]
    assert lines[3].split() == ["bb", "—", "7"]
    assert len({len(line) for line in lines}) == 1  # aligned columns


def test_run_scenario_echo_and_no_files(make_scenario, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines: list[str] = []
    sc = make_scenario({"description": "a tiny question", "report.best": "request_goodput"})
    results = run_scenario(sc, out_root=None, figures_dir=None, echo=lines.append)
    assert len(results) == 1
    assert lines[0] == "== tiny: a tiny question"
    assert lines[-1].startswith("best request_goodput: base (")
    assert list(tmp_path.iterdir()) == []  # out_root=None writes nothing
    assert results[0].engine["wall_s"] >= 0


def test_figures_registry_and_spec_names():
    # the spec's names are the registry's keys
    assert set(FIGURES) == set(typing.get_args(FigureSpec.model_fields["name"].annotation))
    assert FigureSpec(name="iteration_times").file_stem("s") == "s_iterations"
    assert FigureSpec(name="cdf", metric="tpot_ms").file_stem("s") == "s_tpot_cdf"
    by_b = FigureSpec(name="metrics_vs_param", param="a.b", metrics=["request_goodput"])
    assert by_b.file_stem("s") == "s_vs_b"
    # every kind names the fields it reads, and only real fields
    assert set(FIGURE_FIELDS) == set(FIGURES)
    assert set().union(*FIGURE_FIELDS.values()) < set(FigureSpec.model_fields)
    assert FigureSpec(name="timeline").file_stem("s") == "s_timeline_first"
    pareto = FigureSpec(name="pareto", metrics=["output_throughput", "p99_tpot_ms"])
    assert pareto.file_stem("s") == "s_pareto_p99_tpot"


def test_provenance_fallbacks(monkeypatch):
    def not_installed(_name):
        raise metadata.PackageNotFoundError

    monkeypatch.setattr(metadata, "version", not_installed)
    assert provenance.package_version() == "unknown"

    def no_git(*_a, **_k):
        raise OSError("no git")

    monkeypatch.setattr(subprocess, "run", no_git)
    provenance.git_revision.cache_clear()  # it asks git once per process
    assert provenance.git_revision() == "unknown"

    def not_a_repo(*_a, **_k):
        return subprocess.CompletedProcess([], 128, "", "fatal: not a git repository")

    monkeypatch.setattr(subprocess, "run", not_a_repo)
    provenance.git_revision.cache_clear()
    assert provenance.git_revision() == "unknown"
    provenance.git_revision.cache_clear()  # later tests see the real revision


def test_manifest(tiny_scenario):
    res = simulate(tiny_scenario)
    info = provenance.manifest(tiny_scenario, res.engine, "x.yaml")
    assert info["scenario"] == tiny_scenario.resolved()
    assert info["scenario_file"] == "x.yaml"
    assert info["seed"] == 7
    assert info["cost_model"]["parameters"]["base_ms"] == 10.0
    assert info["engine"] is res.engine


def test_python_m_lyra_simpy(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["lyra-simpy", "schema"])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("lyra_simpy", run_name="__main__")
    assert info.value.code == 0
    assert '"title": "Scenario"' in capsys.readouterr().out


def test_request_token_accounting():
    r = Request(0, 0, 0.0, input_tokens=10, output_tokens=5)
    assert r.pending_tokens == 10
    assert not r.decoding
    r.computed_tokens, r.generated_tokens = 10, 1  # after the prefill
    assert r.pending_tokens == 1
    assert r.decoding
    r.computed_tokens = 0  # preempted (recompute): prompt + generated token again
    assert r.pending_tokens == 11
    assert not r.decoding


def test_run_without_time_series(make_scenario):
    res = simulate(make_scenario({"simulation.timeseries": False}))
    assert res.timeseries == {}
    assert res.engine["iterations"] > 0
    assert np.isfinite(res.summary["mean_ttft_ms"])
