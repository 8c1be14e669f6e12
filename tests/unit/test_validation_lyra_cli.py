"""validation/lyra_cli.py: how the validation scripts run ``lyra-simpy`` (in-process, each
command logged as typed) and find the run folder it wrote."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from builders import validation_module

CLI = validation_module("lyra_cli")


def _scenario(tmp_path: Path) -> Path:
    raw = {"name": "tiny", "seed": 1, "engine": {"name": "vllm"}, "kv_cache": {"num_blocks": 64},
           "cost": {"name": "linear", "base_ms": 5.0, "per_seq_ms": 1.0},
           "workload": {"num_requests": 5, "arrival": {"name": "poisson", "rate_per_s": 2.0},
                        "input_tokens": {"name": "fixed", "tokens": 16},
                        "output_tokens": {"name": "fixed", "tokens": 4}}}  # fmt: skip
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_command_runs_in_process_and_is_logged_as_typed(tmp_path: Path) -> None:
    log: list[str] = []
    scenario = _scenario(tmp_path)
    out = tmp_path / "out dir"
    CLI.run("run", str(scenario), "--out", str(out), "--no-figures", log=log)
    assert log == [f"lyra-simpy run {scenario} --out '{out}' --no-figures"]
    found = CLI.sim_folder(out / "tiny")  # (OUT/SCENARIO/RUN: one run, no variants)
    assert (found / "summary.json").is_file()
    assert found.parent == out / "tiny"
    # a server's address is written $URL: its port changes from run to run
    log.clear()
    url = "http://127.0.0.1:8123"
    CLI.run("run", f"{url}/missing.yaml", "--no-figures", log=log, url=url, ok=(0, 2))
    assert log == ["lyra-simpy run $URL/missing.yaml --no-figures"]
    # a path in the clone is logged from its root, as a user types it there
    log.clear()
    CLI.run("run", str(CLI.ROOT / "no-such.yaml"), log=log, ok=(0, 2))
    assert log == ["lyra-simpy run no-such.yaml"]


def test_a_failed_command_stops_the_script_naming_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["validation/validate_cpu.py"])
    log: list[str] = []
    with pytest.raises(SystemExit, match=r"^validate_cpu: `lyra-simpy run` exited 2$"):
        CLI.run("run", str(tmp_path / "missing.yaml"), log=log)
    assert log == [f"lyra-simpy run {tmp_path / 'missing.yaml'}"]
    # an exit code the caller allows is not a failure
    CLI.run("run", str(tmp_path / "missing.yaml"), log=log, ok=(0, 2))


def test_a_folder_without_exactly_one_run_stops_the_script(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["validation/validate_vllm_cpu.py"])
    with pytest.raises(SystemExit, match=r"^validate_vllm_cpu: expected one run in .*, found 0$"):
        CLI.sim_folder(tmp_path)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"found 2$"):
        CLI.sim_folder(tmp_path)
