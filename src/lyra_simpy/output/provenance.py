"""The manifest written beside every result (DESIGN §4): what produced these numbers."""

from __future__ import annotations

import datetime as dt
import functools
import platform
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from lyra_simpy.scenario import Scenario


def package_version() -> str:
    try:
        return metadata.version("lyra-simpy")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def git_revision() -> str:
    """The source tree's commit (with ``-dirty`` if it has changes), or ``unknown``;
    asked of git once per process."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


_asking: threading.Thread | None = None
"""The thread asking git ahead (:func:`ask_git_revision`), None until one is started."""


def ask_git_revision() -> None:
    """Ask git now, on a thread, what :func:`git_revision` answers: the two git
    processes take 10–20 ms, which the run's simulation then hides; the manifest waits
    for the answer (:func:`manifest`). Nothing when git was asked already."""
    global _asking
    if _asking is None and not git_revision.cache_info().currsize:
        _asking = threading.Thread(target=git_revision, name="git-revision", daemon=True)
        _asking.start()


def cost_provenance(scenario: Scenario) -> dict[str, Any]:
    """Which cost model, with which numbers, calibrated from where."""
    cfg = scenario.cost
    out: dict[str, Any] = {
        "name": cfg.name,
        "parameters": cfg.model_dump(mode="json"),
        "calibration": cfg.calibration(),  # each cost model says where its numbers came from
    }
    if cfg.name == "roofline":
        from lyra_simpy.cost.roofline import RooflineCost

        out["catalog"] = RooflineCost(cfg, scenario.scheduler.max_batch).describe()
        out["kv_cache"] = scenario.kv_cache.model_dump(mode="json")
    return out


def manifest(scenario: Scenario, engine: dict[str, Any], source_file: str | None) -> dict[str, Any]:
    """Provenance of one run of *scenario*."""
    if _asking is not None:
        _asking.join()  # (then git_revision() reads its cached answer)
    return {
        "scenario": scenario.resolved(),
        "scenario_file": source_file,
        "seed": scenario.seed,
        "package": "lyra-simpy",
        "version": package_version(),
        "git_revision": git_revision(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cost_model": cost_provenance(scenario),
        "engine": engine,
    }
