"""Reading and writing results: per-request JSONL, summary JSON, time-series and ITL CSV.

Writes go to a temporary sibling folder that is renamed into place only when every file
is complete, so an interrupted run never leaves a result folder that looks finished.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row, allow_nan=False))
            fh.write("\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")


def write_series_csv(path: Path, series: dict[str, np.ndarray]) -> None:
    names = list(series)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        if names:
            writer.writerows(zip(*(series[n].tolist() for n in names), strict=True))


def read_series_csv(path: Path) -> dict[str, np.ndarray]:
    with path.open() as fh:
        header = fh.readline().strip().split(",")
    if not header or header == [""]:
        return {}
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return {name: data[:, i] for i, name in enumerate(header)}


def write_itl_csv(path: Path, values_s: np.ndarray, counts: np.ndarray) -> None:
    """Inter-token latencies as ``itl_ms,count`` rows (equal gaps merged, sorted)."""
    ms, inverse = np.unique(np.round(values_s * 1000.0, 9), return_inverse=True)
    totals = np.bincount(inverse, weights=counts, minlength=len(ms)).astype(np.int64)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["itl_ms", "count"])
        writer.writerows(zip(ms.tolist(), totals.tolist(), strict=True))


def read_itl_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(itl_ms, count) arrays written by :func:`write_itl_csv`."""
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return data[:, 0], data[:, 1].astype(np.int64)


@contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a fresh temporary folder that replaces *final* only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
    tmp.rename(final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call *write* on a temporary sibling of *path*, then rename it to *path*."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
