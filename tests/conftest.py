"""Shared fixtures (STYLE §12): ``env``, ``rng``, ``tiny_scenario`` and a scenario factory.

Hypothesis runs with a modest example budget and no deadline (simulations vary in wall
time); set ``HYPOTHESIS_PROFILE=thorough`` for a longer search.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, settings

from lyra_simpy import Scenario, scenario_from_dict
from lyra_simpy.scenario import set_path

settings.register_profile(
    "default",
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_configure(config: pytest.Config) -> None:
    # When a property fails, hypothesis imports libcst to write a patch; libcst imports
    # mypy_extensions, which warns, and filterwarnings=error would turn the failure report
    # into an INTERNALERROR that hides the falsifying example.
    config.addinivalue_line(
        "filterwarnings", "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
    )
    WARNING_FILTERS[:] = config.getini("filterwarnings")


WARNING_FILTERS: list[str] = []
"""The test run's warning filters (pyproject.toml's ``filterwarnings``: every warning an
error but the few named), which :func:`lyra_simpy_process` gives its process as ``-W``."""


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A test marked ``no_cover`` runs untraced under pytest-xdist too. pytest-cov pauses
    its own coverage for it, but an xdist worker holds two started coverages (pytest-cov
    7.1 starts one more when ``-n`` is in the worker's arguments) and pausing the top one
    resumes the other, so the test ran traced all the same (the M/D/1 tests 25 s against
    6 s). Inside pytest-cov's pause (``trylast``: the innermost wrapper) this stops every
    coverage still started and restarts them after, in the order they were started."""
    stopped: list[Any] = []
    if item.get_closest_marker("no_cover") is not None:
        import coverage

        while (cov := coverage.Coverage.current()) is not None:
            cov.stop()
            stopped.append(cov)
    try:
        yield
    finally:
        for cov in reversed(stopped):
            cov.start()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One test needing the quick run of every scenario (``quick_run_all``, the slowest
    thing the tests do) first, the other tests needing it last: under pytest-xdist one
    worker runs it while the others take every other test, instead of waiting for it
    from the start or starting it at the end."""
    uses = [item for item in items if "quick_run_all" in getattr(item, "fixturenames", ())]
    if uses:
        needing = set(uses)
        rest = [item for item in items if item not in needing]
        items[:] = [uses[0], *rest, *uses[1:]]


#: A small, valid scenario: 12 Poisson requests on a continuous-batching replica.
TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 7,
    "workload": {
        "num_requests": 12,
        "arrival": {"name": "poisson", "rate_per_s": 20.0},
        "input_tokens": {"name": "uniform", "low": 4, "high": 40},
        "output_tokens": {"name": "uniform", "low": 1, "high": 24},
    },
    "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 256},
    "kv_cache": {"block_size": 8, "num_blocks": 64},
    "cost": {"name": "linear", "base_ms": 10.0, "per_seq_ms": 1.0},
    "slo": {"ttft_ms": 200.0, "tpot_ms": 20.0},
}


@pytest.fixture
def env() -> simpy.Environment:
    return simpy.Environment()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240607)


@pytest.fixture
def tiny_raw() -> dict[str, Any]:
    """The tiny scenario as plain data (a fresh copy per test)."""
    return copy.deepcopy(TINY)


@pytest.fixture
def tiny_scenario(tiny_raw: dict[str, Any]) -> Scenario:
    return scenario_from_dict(tiny_raw)


@pytest.fixture
def make_scenario() -> Callable[..., Scenario]:
    """``make_scenario({"scheduler.max_num_seqs": 2, ...})``: the tiny scenario with
    dotted paths replaced (a mapping value replaces the whole sub-tree)."""

    def make(changes: dict[str, Any] | None = None, **kw: Any) -> Scenario:
        raw = copy.deepcopy(TINY)
        for path, value in (changes or {}).items():
            set_path(raw, path, value)
        return scenario_from_dict(raw, **kw)

    return make


#: The repository's scenarios folder.
SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"


@dataclass(frozen=True)
class QuickRun:
    """``lyra-simpy run --quick scenarios/`` once per session (the slowest thing the
    tests do, shared by the CLI and paper-figure tests), then ``lyra-simpy figures
    --quick`` on its results."""

    results: Path
    figures: Path
    """The figures ``run`` drew (``--figures``)."""
    stdout: str
    paper: Path
    """Every paper figure ``lyra-simpy figures --quick`` drew from :attr:`results`."""
    paper_stdout: str


def once_per_run(
    factory: pytest.TempPathFactory, name: str, make: Callable[[Path], Any]
) -> tuple[Path, Any]:
    """``make(folder)`` once for the whole test run, its JSON-able value shared: under
    pytest-xdist the first worker to get here runs it into a folder the workers share
    and the others wait for its mark (a module- or session-scoped fixture would run once
    on every worker that gets one of its tests). Returns the folder and the value."""
    shared = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # (each worker's base is a folder of the run's)
    root = shared / name
    done = shared / f"{name}.done.json"  # (beside the folder: *make* owns all of it)
    try:
        root.mkdir()  # the first to get here runs it
    except FileExistsError:
        deadline = time.monotonic() + 1800
        while not done.exists():
            assert time.monotonic() < deadline, f"{name}: the run sharing it never ended"
            time.sleep(0.2)
        got = json.loads(done.read_text())
        assert "error" not in got, f"{name} failed on another worker: {got.get('error')}"
        return root, got["value"]
    try:
        value = make(root)
    except BaseException as exc:
        done.write_text(json.dumps({"error": repr(exc)}))
        raise
    done.write_text(json.dumps({"value": value}))
    return root, value


def lyra_simpy_process(*args: str) -> str:
    """``lyra-simpy ARGS`` as a user runs it, in its own process from the repository's
    root, under the test run's warning filters (:data:`WARNING_FILTERS`, as ``-W``: a
    later filter wins in both); its stdout (a failure shows its stderr's end). Coverage
    does not trace that process: under the tracer ``run --quick scenarios/`` took three
    times as long (238 s against 82 s on a 2-core VM). The unit tests trace most of what
    it runs; the paper figures' drawing, which only ``figures`` runs whole, is left out
    of the coverage figure (95 % against 96 % with it in process)."""
    warnings = [option for rule in WARNING_FILTERS for option in ("-W", rule)]
    cmd = [sys.executable, *warnings, "-m", "lyra_simpy", *args]
    root = SCENARIOS_DIR.parent
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root)
    assert done.returncode == 0, f"lyra-simpy {' '.join(args)}:\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def quick_run_all(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    """``lyra-simpy run --quick scenarios/ --figures ...``, then ``lyra-simpy figures
    --quick`` on its results, once for the whole test run (:func:`once_per_run`,
    :func:`lyra_simpy_process`): one worker draws the paper figures right after the run,
    while the others take the tests that need neither, instead of one drawing them at
    the end while another waits."""

    def run(root: Path) -> dict[str, str]:
        results = root / "results"
        out = ["--out", str(results), "--figures", str(root / "figures")]
        stdout = lyra_simpy_process("run", "--quick", str(SCENARIOS_DIR), *out)
        folders = ["--scenarios", str(SCENARIOS_DIR), "--results", str(results)]
        paper = lyra_simpy_process("figures", "--quick", *folders, "--out", str(root / "paper"))
        return {"run": stdout, "figures": paper}

    root, printed = once_per_run(tmp_path_factory, "quick_all", run)
    return QuickRun(
        root / "results", root / "figures", printed["run"], root / "paper", printed["figures"]
    )
