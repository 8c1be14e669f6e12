"""Run a sweep: skip the points already done, run the rest, write the tidy table.

Layout of the result folder ``OUT/``:

- ``points/<key>.json``: one file per distinct point — its key, swept values, seed,
  summary (DESIGN §4 names), engine counters, resolved scenario, package version and git
  revision. Written to a temporary file and renamed into place (``metrics.io.atomic_write``) by the
  process that collects results, so a file exists only when it is complete: a sweep
  killed at any moment (``kill -9`` included) resumes where it stopped, without losing
  or duplicating a point, and a rerun with nothing changed computes nothing.
- ``sweep.csv``: one row per point × seed, in the sweep's order (not the order points
  finished): the swept dotted paths, ``seed``, ``key``, then every summary metric.
  Numbers are written exactly (Python's shortest round-trip form).
- ``manifest.json``: the sweep file, the base scenario, version, revision, date.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra_simpy.errors import LyraError
from lyra_simpy.metrics.io import atomic_write, write_json
from lyra_simpy.output.provenance import git_revision, package_version
from lyra_simpy.sweep.executors import open_executor, simulate_summary
from lyra_simpy.sweep.spec import Point, Sweep, load_sweep


@dataclass(frozen=True)
class SweepReport:
    """What one call of :func:`run_sweep` did."""

    out: Path
    """The result folder."""
    table: Path
    """``OUT/sweep.csv``."""
    rows: int
    """Rows of the table (points × seeds)."""
    distinct: int
    """Distinct simulations among them (rows with equal keys share one)."""
    computed: int
    """Simulations run by this call (0 when everything was already done)."""


def _point_file(points_dir: Path, key: str) -> Path:
    return points_dir / f"{key}.json"


def _read_point(path: Path, key: str) -> dict[str, Any] | None:
    """The point stored at *path*, or None if absent or not a complete point for *key*."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or "summary" not in data:
        return None
    return data


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text))


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return value


def _write_table(sweep: Sweep, points_dir: Path, path: Path) -> None:
    stored = {p.key: _read_point(_point_file(points_dir, p.key), p.key) for p in sweep.points}
    metrics = list(next(iter(stored.values()))["summary"]) if stored else []  # type: ignore[index]

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow([*sweep.swept, "seed", "key", *metrics])
            for p in sweep.points:
                data = stored[p.key]
                if data is None:  # pragma: no cover - every point was just written
                    raise LyraError(
                        f"{_point_file(points_dir, p.key)}: point missing after the run"
                    )
                summary = data["summary"]
                row = [*(p.values[k] for k in sweep.swept), p.seed, p.key]
                writer.writerow([_cell(v) for v in row] + [_cell(summary.get(m)) for m in metrics])

    atomic_write(path, write)


def _record(point: Point, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": point.key,
        "values": point.values,
        "seed": point.seed,
        "summary": result["summary"],
        "engine": result["engine"],
        "scenario": point.scenario.resolved(),
        "version": package_version(),
        "git_revision": git_revision(),
    }


def run_sweep(
    sweep: Sweep | str | Path,
    out: str | Path | None = None,
    workers: int | None = None,
    dask: Any = None,
    progress: bool | None = None,
) -> SweepReport:
    """Run every point of *sweep* not already in *out*, then write ``OUT/sweep.csv``.

    Parameters
    ----------
    sweep
        A :class:`~lyra_simpy.sweep.spec.Sweep` or the path of a sweep file.
    out
        Result folder (default: the file's ``out:``, else ``results/sweeps/<name>``).
    workers
        Processes (default ``os.cpu_count()``; 1 runs in this process).
    dask
        ``"local"``, a scheduler address or a ``distributed.Client`` (default: no Dask).
    progress
        Show a progress bar on stderr (default: when stderr is a terminal).
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    folder = Path(out or sweep.spec.out or Path("results") / "sweeps" / sweep.name)
    points_dir = folder / "points"
    points_dir.mkdir(parents=True, exist_ok=True)
    # A hidden file is a write a killed run left half done (metrics.io.atomic_write
    # names its temporary ``.<name>.<random>.json``); never a result.
    for stale in points_dir.glob(".*"):
        stale.unlink(missing_ok=True)
    distinct = {p.key: p for p in reversed(sweep.points)}  # first point of each key
    todo = [
        p
        for p in sorted(distinct.values(), key=lambda p: p.index)
        if _read_point(_point_file(points_dir, p.key), p.key) is None
    ]
    from tqdm import tqdm

    bar = tqdm(
        total=len(distinct),
        initial=len(distinct) - len(todo),
        unit="point",
        file=sys.stderr,
        disable=not (sys.stderr.isatty() if progress is None else progress),
    )
    computed = 0
    with bar:
        if todo:  # nothing to do starts no pool or cluster
            with open_executor(workers, dask) as executor:
                for i, result in executor.run(simulate_summary, [p.scenario for p in todo]):
                    point = todo[i]
                    _write_atomic(_point_file(points_dir, point.key), _record(point, result))
                    computed += 1
                    bar.update(1)
    table = folder / "sweep.csv"
    _write_table(sweep, points_dir, table)
    write_json(
        folder / "manifest.json",
        {
            "sweep": sweep.spec.model_dump(mode="json"),
            "base_scenario": sweep.base.resolved(),
            "rows": len(sweep.points),
            "distinct": len(distinct),
            "version": package_version(),
            "git_revision": git_revision(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
    )
    return SweepReport(folder, table, len(sweep.points), len(distinct), computed)


def load_table(out: str | Path) -> Any:
    """``OUT/sweep.csv`` as a pandas DataFrame (numbers read back exactly)."""
    try:
        import pandas as pd
    except ImportError:
        raise LyraError(
            "load_table needs pandas (pip install pandas); or read sweep.csv with csv"
        ) from None
    path = Path(out)
    path = path / "sweep.csv" if path.is_dir() else path
    if not path.is_file():
        raise LyraError(f"{path}: no sweep table (run the sweep first)")
    # pandas 3 parses floats exactly by default (and deprecates the option)
    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    return pd.read_csv(path, **exact)
