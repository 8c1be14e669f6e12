"""Progress on stderr (lyra_simpy.output.progress): only on a terminal outside CI, one line per
scenario for a folder, and a watched run is the same run."""

from __future__ import annotations

import io
import json
import re

import pytest

from lyra_simpy.cli import main
from lyra_simpy.output import progress
from lyra_simpy.output.progress import RunProgress, wanted
from lyra_simpy.simulation import simulate


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_wanted_only_on_a_terminal_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert wanted(_Terminal())
    assert not wanted(io.StringIO())
    monkeypatch.setenv("CI", "true")
    assert not wanted(_Terminal())


def test_disabled_bars_write_nothing(tiny_scenario):
    stream = _Terminal()
    with RunProgress("tiny", 1, enabled=False, stream=stream) as bars:
        simulate(tiny_scenario, bars.watch("base", None))
        bars.done()
    assert stream.getvalue() == ""


def test_watched_run_shows_simulated_time_and_changes_nothing(make_scenario, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    monkeypatch.setattr(progress, "POLL_S", 0.001)
    sc = make_scenario({"workload.num_requests": 600, "scheduler.max_num_seqs": 16,
                        "kv_cache.num_blocks": 600})  # fmt: skip
    plain = simulate(sc)
    stream = _Terminal()
    with RunProgress("tiny", 1, enabled=True, stream=stream) as bars:
        watched = simulate(sc, bars.watch("base", None))
        bars.done()
    text = stream.getvalue()
    # Read while running (several values), and the end of the clock last.
    shown = re.findall(r"base: ([0-9.]+) sim s", text)
    assert len(set(shown)) > 2
    assert shown[-1] == f"{watched.engine['end_s']:.1f}"
    assert watched.engine["end_s"] == plain.engine["end_s"]
    assert watched.summary == plain.summary
    assert list(watched.requests()) == list(plain.requests())


def test_folder_run_names_each_scenario_on_stderr(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    folder = tmp_path / "sc"
    folder.mkdir()
    for name in ("a", "b"):
        raw = {
            "name": name,
            "workload": {"num_requests": 4, "arrival": {"name": "constant", "rate_per_s": 5},
                         "input_tokens": {"name": "fixed", "tokens": 8},
                         "output_tokens": {"name": "fixed", "tokens": 4}},
            "kv_cache": {"block_size": 8, "num_blocks": 32},
            "cost": {"name": "linear", "base_ms": 5.0},
        }  # fmt: skip
        (folder / f"{name}.yaml").write_text(json.dumps(raw))
    assert main(["run", str(folder), "--out", str(tmp_path / "r"), "--no-figures"]) == 0
    err = capsys.readouterr().err.splitlines()
    # Not a terminal: no bars, just the two lines.
    assert err == [f"[1/2] {folder / 'a.yaml'} (1 run)", f"[2/2] {folder / 'b.yaml'} (1 run)"]


@pytest.mark.parametrize("n", [1])
def test_single_file_run_prints_nothing_on_stderr(tmp_path, capsys, n):
    raw = {
        "name": "one",
        "workload": {"num_requests": n, "arrival": {"name": "constant", "rate_per_s": 5},
                     "input_tokens": {"name": "fixed", "tokens": 8},
                     "output_tokens": {"name": "fixed", "tokens": 4}},
        "kv_cache": {"block_size": 8, "num_blocks": 32},
        "cost": {"name": "linear", "base_ms": 5.0},
    }  # fmt: skip
    path = tmp_path / "one.yaml"
    path.write_text(json.dumps(raw))
    assert main(["run", str(path), "--out", str(tmp_path / "r"), "--no-figures"]) == 0
    assert capsys.readouterr().err == ""


def test_disabled_progress_does_not_import_tqdm():
    import subprocess
    import sys

    code = (
        "import sys; from lyra_simpy.output.progress import RunProgress; "
        "RunProgress('x', 2, False).close(); print('tqdm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
