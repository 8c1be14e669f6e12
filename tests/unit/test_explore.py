"""The explorer (lyra_simpy.explore): its data layer on real result folders, the page
through Streamlit's AppTest, and the launcher's address and missing-extra message."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lyra_simpy import scenario_from_dict
from lyra_simpy.cli import main
from lyra_simpy.explore import data, launch
from lyra_simpy.output.writer import run_scenario
from lyra_simpy.simulation import simulate

APP = Path(data.__file__).resolve().parent / "app.py"

SCENARIO: dict[str, Any] = {
    "name": "depths",
    "description": "two batch depths",
    "seed": 3,
    "workload": {
        "num_requests": 60,
        "arrival": {"name": "poisson", "rate_per_s": 8.0},
        "input_tokens": {"name": "uniform", "low": 16, "high": 64},
        "output_tokens": {"name": "uniform", "low": 4, "high": 40},
    },
    "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 512},
    "kv_cache": {"block_size": 16, "num_blocks": 200},
    "cost": {"name": "linear", "base_ms": 10.0, "per_seq_ms": 1.0},
    "slo": {"ttft_ms": 300.0, "tpot_ms": 30.0},
    "grid": {"path": "scheduler.max_num_seqs", "values": [4, 16]},
    "figures": [{"name": "cdf", "metric": "ttft_ms"}],
    "quick": {"workload": {"num_requests": 30}},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("explore")
    path = root / "depths.yaml"
    path.write_text(json.dumps(SCENARIO))
    sc = scenario_from_dict(copy.deepcopy(SCENARIO), root)
    run_scenario(sc, root / "results", root / "figures", str(path), echo=lambda _s: None,
                 trace_events=True)  # fmt: skip
    return root / "results"


def test_finds_scenarios_and_variants_in_run_order(results, tmp_path):
    assert data.scenarios(results) == ["depths"]
    assert data.variants(results / "depths") == ["4", "16"]
    assert data.scenarios(tmp_path / "nothing") == []


def test_runs_read_back_as_written(results):
    run = data.load_run(results / "depths" / "16")
    text = (results / "depths" / "16" / "requests.jsonl").read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    assert len(run.latencies["ttft_ms"]) == sum(r["status"] == "ok" for r in rows)
    x, y = data.cdf(run, "ttft_ms")
    assert np.all(np.diff(x) >= 0)
    assert y[-1] == 1.0
    x, y = data.cdf(run, "itl_ms")
    assert np.all(np.diff(y) >= 0)
    assert y[-1] == pytest.approx(1.0)
    # ITL weighted by counts: the median is the summary's median ITL.
    assert x[np.searchsorted(y, 0.5)] == pytest.approx(run.summary["median_itl_ms"], rel=1e-6)
    table = data.summary_table([run, data.load_run(results / "depths" / "4")])
    assert table[0] == {"metric": "completed", "16": run.summary["completed"], "4": table[0]["4"]}


def test_timeline_thins_by_maximum(results):
    run = data.load_run(results / "depths" / "4")
    full = data.timeline(run)
    assert len(full["start_s"]) == len(run.series["start_s"])
    small = data.timeline(run, points=10)
    assert len(small["start_s"]) == 10
    assert max(small["waiting"]) == int(run.series["waiting"].max())
    assert max(small["kv_blocks"]) == int(run.series["kv_blocks"].max())


def test_provenance_says_what_the_numbers_are_worth(results, tmp_path):
    info = json.loads((results / "depths" / "4" / "manifest.json").read_text())
    p = data.provenance(info, tmp_path)
    assert p["cost"] == "linear"
    assert "not calibrated" in p["kind"]
    assert p["validation"].startswith("none applies")
    assert p["source"]["seed"] == 3
    roof = {**info, "cost_model": {"name": "roofline", "calibration": "catalogs"}}
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "calibration-roofline.md").write_text(
        "| source | rows | median abs. error | worst error |\n|---|---|---|---|\n"
        "| vidur | 30 | 12.8% | -39.6% |\n"
    )
    p = data.provenance(roof, tmp_path)
    assert "not a measurement" in p["kind"]
    assert "vidur median 12.8% (worst -39.6%)" in p["validation"]
    fitted = {**info, "cost_model": {"name": "profile", "calibration": {
        "fit_file": "f.yaml", "fit_quality": {"r2": 0.99},
        "profile_metadata": {"hardware": "cpu", "engine": "llama.cpp"}}}}  # fmt: skip
    (tmp_path / "docs" / "VALIDATION.md").write_text("| x | -0.9 % (±5 %) | +5.9 % (±1 %) |\n")
    p = data.provenance(fitted, tmp_path)
    assert p["kind"] == "fitted to a measured profile"
    assert "R² 0.99" in p["calibration"]
    assert "-0.9 % to +5.9 %" in p["validation"]
    assert data.provenance({}, tmp_path)["kind"] == "unknown"


def test_rerun_applies_the_knobs_in_quick_mode(results):
    info = json.loads((results / "depths" / "4" / "manifest.json").read_text())
    base = Path(info["scenario_file"]).parent
    knobs = {"max_num_seqs": 8, "rate_per_s": 2.0, "num_blocks": 150, "ttft_ms": 500.0}
    raw = data.rerun_raw(info, knobs, base)
    assert raw["workload"]["num_requests"] == 30  # the file's quick block
    assert raw["scheduler"]["max_num_seqs"] == 8
    assert raw["workload"]["arrival"]["rate_per_s"] == 2.0
    assert raw["kv_cache"]["num_blocks"] == 150
    assert raw["slo"]["ttft_ms"] == 500.0
    res = simulate(scenario_from_dict(raw, base))
    assert res.summary["completed"] == 30
    static = data.rerun_raw(info, {"scheduler": "static", "max_num_seqs": 6}, base)
    assert static["scheduler"] == {"name": "static", "max_batch": 6}
    scenario_from_dict(static, base)  # valid
    sglang = data.rerun_raw(info, {"scheduler": "prefill_first"}, base)
    assert sglang["scheduler"] == {"name": "prefill_first", "max_running_requests": 4,
                                   "chunked_prefill_size": 512}  # fmt: skip


# -- the page -------------------------------------------------------------------------------
@pytest.fixture
def app(results, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LYRA_EXPLORE_RESULTS", str(results))
    monkeypatch.setenv("LYRA_EXPLORE_FIGURES", str(results.parent / "figures"))
    monkeypatch.setenv("LYRA_EXPLORE_REPO", str(results.parent))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert not at.error
    return at


def test_page_shows_table_cdfs_timeline_figures_and_provenance(app, results):
    scen = next(s for s in app.selectbox if s.label == "scenario")
    assert scen.options == ["depths"]
    assert app.multiselect[0].value == ["4", "16"]
    table = app.dataframe[0].value
    assert list(table.columns) == ["metric", "4", "16"]
    summary = json.loads((results / "depths" / "16" / "summary.json").read_text())
    row = table[table["metric"] == "p99_ttft_ms"].iloc[0]
    assert row["16"] == pytest.approx(summary["p99_ttft_ms"])
    charts = app.get("vega_lite_chart")
    assert len(charts) == 8  # four CDFs, four timeline panels
    warnings = [w.value for w in app.warning]
    assert len(warnings) == 2
    assert all("not calibrated on hardware" in w for w in warnings)
    captions = " ".join(c.value for c in app.caption)
    assert "validation: none applies" in captions
    assert "trace_events.json in ui.perfetto.dev" in captions.replace("`", "")
    assert len(app.get("image")) == 1  # the scenario's own figure


def test_overlay_one_variant_and_a_real_run(app, results):
    app.multiselect[0].set_value(["16"]).run()
    app.text_input[0].set_value(str(results / "depths" / "4")).run()
    assert not app.exception
    assert list(app.dataframe[0].value.columns) == ["metric", "16", "real: 4"]


def test_rerun_in_the_page_adds_a_run(app):
    seqs = next(n for n in app.number_input if n.label == "max_num_seqs")
    assert seqs.value == 4
    seqs.set_value(8).run()
    app.button[0].click().run()
    assert not app.exception
    assert not app.error
    reruns = app.session_state["reruns"]
    assert len(reruns) == 1
    assert reruns[0].manifest["scenario"]["scheduler"]["max_num_seqs"] == 8
    assert reruns[0].summary["completed"] == 30
    assert list(app.dataframe[0].value.columns) == ["metric", "4", "16", "4 (rerun)"]


def test_empty_results_folder_says_what_to_run(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LYRA_EXPLORE_RESULTS", str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=30)
    at.run()
    assert not at.exception
    assert "tox -e scenarios" in at.info[0].value


# -- the launcher ---------------------------------------------------------------------------
def test_launcher_binds_localhost_headless(tmp_path):
    cmd = launch.command(tmp_path, tmp_path, 8599)
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--server.port") + 1] == "8599"
    env = launch.environ(tmp_path, tmp_path / "f")
    assert env["LYRA_EXPLORE_RESULTS"] == str(tmp_path.resolve())


def test_missing_extra_is_one_line(monkeypatch, tmp_path, capsys):
    real = launch.importlib.util.find_spec
    monkeypatch.setattr(
        launch.importlib.util, "find_spec", lambda n: None if n == "streamlit" else real(n)
    )
    assert main(["explore", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"lyra-simpy: explore needs Streamlit, the [app] extra: {launch.INSTALL}\n"
    assert launch.INSTALL == "pip install 'lyra-simpy[app]'"


def test_address_query_picks_the_first_view(results, monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("LYRA_EXPLORE_RESULTS", str(results))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["scenario"] = "depths"
    at.query_params["variants"] = "16,nope"
    at.run()
    assert not at.exception
    assert at.multiselect[0].value == ["16"]


def test_sim_vs_real_tab_shows_the_validation_error(results, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from lyra_simpy.live.compare import compare

    repo = Path(__file__).resolve().parents[2]  # docs/validation ships with the project
    monkeypatch.setenv("LYRA_EXPLORE_RESULTS", str(results))
    monkeypatch.setenv("LYRA_EXPLORE_REPO", str(repo))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    box = next(s for s in at.selectbox if s.label == "validation workload")
    assert "closed_loop_4" in box.options
    box.set_value("closed_loop_4").run()
    assert not at.exception
    table = at.dataframe[-1].value
    sim = repo / "docs" / "validation" / "sim" / "closed_loop_4"
    real = sorted((repo / "docs" / "validation" / "real" / "closed_loop_4").glob("run*"))
    want = {r["metric"]: round(r["error"] * 100, 1) for r in compare(sim, real)}
    assert dict(zip(table["metric"], table["error %"], strict=True)) == want


def test_explore_command_becomes_the_server(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_execve(path, argv, env):
        seen.update(path=path, argv=argv, env=env)

    monkeypatch.setattr(launch.os, "execve", fake_execve)
    assert main(["explore", str(tmp_path), "--port", "8600"]) == 0
    assert seen["argv"] == launch.command(tmp_path, tmp_path, 8600)
    assert seen["env"]["LYRA_EXPLORE_RESULTS"] == str(tmp_path.resolve())
    assert "http://127.0.0.1:8600" in capsys.readouterr().out
    assert main(["explore", str(tmp_path / "missing")]) == 2


def test_browser_job_without_chromium_says_so_and_skips(monkeypatch, capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "browser" / "app_browser.py"
    spec = importlib.util.spec_from_file_location("app_browser", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.shutil, "which", lambda _name: None)
    assert module.main([]) == 0
    out = capsys.readouterr().out
    assert (
        out == "app-browser: skipped, no Chromium found (Debian/Ubuntu: apt-get install chromium)\n"
    )
