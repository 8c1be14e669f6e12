"""Shared fixtures (STYLE §12): ``env``, ``rng``, ``tiny_scenario`` and a scenario factory.

Hypothesis runs with a modest example budget and no deadline (simulations vary in wall
time); set ``HYPOTHESIS_PROFILE=thorough`` for a longer search.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
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


#: The repository's scenarios folder.
SCENARIOS_DIR = Path(__file__).resolve().parents[1] / "scenarios"


@dataclass(frozen=True)
class QuickRun:
    """``lyra-simpy run --quick scenarios/`` once per session (the slowest thing the
    tests do, shared by the CLI and paper-figure tests)."""

    results: Path
    figures: Path
    stdout: str


@pytest.fixture(scope="session")
def quick_run_all(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    """Run once for the whole test run: under pytest-xdist the first worker to need it
    runs it into the folder the workers share, and the others wait for its mark."""
    from lyra_simpy.cli import main

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # (each worker's base is a folder of the run's)
    root = shared / "quick_all"
    out_dir, fig_dir = root / "results", root / "figures"
    done, stdout = root / "done", root / "stdout.txt"
    try:
        root.mkdir()  # the first to get here runs it
    except FileExistsError:
        deadline = time.monotonic() + 1800
        while not done.exists():
            assert time.monotonic() < deadline, "the quick run of every scenario never ended"
            time.sleep(0.2)
        return QuickRun(out_dir, fig_dir, stdout.read_text())
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        argv = ["run", "--quick", str(SCENARIOS_DIR), "--out", str(out_dir)]
        code = main([*argv, "--figures", str(fig_dir)])
    stdout.write_text(buf.getvalue())
    done.write_text(str(code))
    assert code == 0
    return QuickRun(out_dir, fig_dir, buf.getvalue())
