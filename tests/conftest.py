"""Shared fixtures (STYLE §12): ``env``, ``rng``, ``tiny_scenario`` and a scenario factory.

Hypothesis runs with a modest example budget and no deadline (simulations vary in wall
time); set ``HYPOTHESIS_PROFILE=thorough`` for a longer search.
"""

from __future__ import annotations

import copy
import functools
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


#: matplotlib's note that placing a ``loc="best"`` legend took over a second (a timing
#: note on a loaded machine, not a fault; pyproject.toml's filterwarnings ignores it too).
LEGEND_WARNING = 'Creating legend with loc="best" can be slow'

#: The repository's scenarios folder.
SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"


@dataclass(frozen=True)
class QuickRun:
    """``lyra-simpy run --quick scenarios/`` once per session (the slowest thing the
    tests do, shared by the CLI and paper-figure tests)."""

    results: Path
    figures: Path
    stdout: str


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
    done = root / "done.json"
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


@pytest.fixture(scope="session")
def once(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., tuple[Path, Any]]:
    """``once(name, make)``: :func:`once_per_run` in this test run's shared folder."""
    return functools.partial(once_per_run, tmp_path_factory)


@pytest.fixture(scope="session")
def quick_run_all(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    """``lyra-simpy run --quick scenarios/ --figures ...`` once for the whole test run
    (:func:`once_per_run`), as a user runs it: in its own process, warnings as errors.
    Coverage does not trace that process: under the tracer the run takes three times as
    long (238 s against 82 s on the 2-core CI), and the code it runs is traced by the
    unit tests."""

    def run(root: Path) -> str:
        argv = ["run", "--quick", str(SCENARIOS_DIR), "--out", str(root / "results")]
        warnings = ["-W", "error", "-W", f"ignore:{LEGEND_WARNING}:UserWarning"]
        cmd = [sys.executable, *warnings, "-m", "lyra_simpy", *argv]
        figures = ["--figures", str(root / "figures")]
        done = subprocess.run([*cmd, *figures], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    root, stdout = once_per_run(tmp_path_factory, "quick_all", run)
    return QuickRun(root / "results", root / "figures", stdout)
