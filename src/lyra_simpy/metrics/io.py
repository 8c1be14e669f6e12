"""Reading and writing results: per-request JSONL, summary JSON, the per-iteration time
series (a columnar ``.npz``, optionally CSV too) and ITL CSV.

Writes go to a temporary sibling folder that is renamed into place only when every file
is complete, so an interrupted run never leaves a result folder that looks finished.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import zipfile
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


def _json_column(column: np.ndarray) -> list[str]:
    """Each value of *column* as ``json.dumps`` writes it: integers and finite floats as
    their ``repr``, NaN and None as ``null``, strings quoted; an infinite float raises
    (as ``allow_nan=False`` does)."""
    if column.dtype.kind in "iub":
        return (
            [str(v) for v in column.tolist()]
            if column.dtype.kind != "b"
            else ["true" if v else "false" for v in column.tolist()]
        )
    if column.dtype.kind == "f":
        if np.isinf(column).any():
            raise ValueError("Out of range float values are not JSON compliant")
        floats = list(map(repr, column.tolist()))
        for i in np.flatnonzero(np.isnan(column)).tolist():
            floats[i] = "null"
        return floats
    texts: dict[Any, str] = {}
    out = []
    for v in column.tolist():
        text = texts.get(v)
        if text is None:
            nan = isinstance(v, float) and v != v
            text = "null" if nan else json.dumps(v, allow_nan=False)
            texts[v] = text
        out.append(text)
    return out


def write_records_jsonl(path: Path, records: dict[str, np.ndarray], fields: Iterable[str]) -> None:
    """Columns *records* (one array per field) as JSON Lines, one object per row with
    *fields* in order: byte for byte what ``write_jsonl`` writes for the same rows (NaN
    as null), built column-wise (10 000 records in ~15 ms instead of ~0.12 s)."""
    names = list(fields)
    template = "{" + ", ".join(f"{json.dumps(n)}: %s" for n in names) + "}\n"
    columns = [_json_column(np.asarray(records[n])) for n in names]
    with path.open("w") as fh:
        fh.writelines(template % row for row in zip(*columns, strict=True))


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


_FIXED_DATE = (1980, 1, 1, 0, 0, 0)
"""The zip members' time stamp: fixed, so the same run writes the same bytes."""


def write_series_npz(path: Path, series: dict[str, np.ndarray]) -> None:
    """The series as NumPy's ``.npz`` (one ``.npy`` column per name, uncompressed): exact
    values, written at memory speed (the 10 000-request benchmark's 118 925 iterations
    in ~10 ms, against ~0.35 s as CSV). ``np.load(path)`` reads it; so does
    :func:`read_series`. Unlike ``np.savez`` the members carry a fixed date."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, column in series.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_DATE)
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(column), allow_pickle=False)


def read_series(folder: Path, name: str = "timeseries") -> dict[str, np.ndarray]:
    """A result folder's series *name*: ``NAME.npz`` (what ``lyra-simpy run`` writes) or,
    failing that, ``NAME.csv`` (``--timeseries-csv``, or folders written before the
    ``.npz``); columns in their order."""
    npz = folder / f"{name}.npz"
    if npz.is_file():
        with np.load(npz, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    return read_series_csv(folder / f"{name}.csv")


def read_series_csv(path: Path) -> dict[str, np.ndarray]:
    with path.open() as fh:
        header = fh.readline().strip().split(",")
    if not header or header == [""]:
        return {}
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return {name: data[:, i] for i, name in enumerate(header)}


ITL_DECIMALS = 9
"""Decimals of ``itl_ms`` in ``itl.csv`` (1e-9 ms: a picosecond); equal gaps after
rounding to it are merged into one row."""

_DIGIT = np.uint8(ord("0"))


def _digit_matrix(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative integers *values* as a ``(n, width)`` matrix of ASCII digits,
    right-aligned with leading zeros."""
    out = np.empty((len(values), width), np.uint8)
    rest = values.copy()
    for col in range(width - 1, -1, -1):
        rest, digit = np.divmod(rest, 10)
        out[:, col] = digit.astype(np.uint8) + _DIGIT
    return out


def _integer_text(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative integers as a digit matrix and the mask of the digits each one's
    decimal text keeps (no leading zeros; ``0`` keeps one)."""
    width = len(str(int(values.max()))) if len(values) else 1
    digits = _digit_matrix(values, width)
    lengths = np.ones(len(values), np.int64)
    for power in range(1, width):
        lengths += values >= 10**power
    keep = np.arange(width) >= (width - lengths)[:, None]
    return digits, keep


def write_itl_csv(path: Path, values_s: np.ndarray, counts: np.ndarray) -> None:
    """Inter-token latencies as ``itl_ms,count`` rows (CRLF, as ``csv.writer``): each
    gap in ms rounded to :data:`ITL_DECIMALS` decimals and written as that exact decimal
    (trailing zeros dropped, at least one decimal: ``31.0``, ``22.153846154``), equal
    gaps merged, sorted. The text is built column-wise in NumPy, not one float at a time
    (``benchmarks/speed.py`` times the run's files)."""
    scale = 10**ITL_DECIMALS
    units = np.rint(np.asarray(values_s, dtype=np.float64) * (1000.0 * scale))
    if len(units) and not (np.isfinite(units).all() and units.min() >= 0 and units.max() < 2**62):
        raise ValueError("inter-token latencies must be finite and non-negative")
    gaps, inverse = np.unique(units.astype(np.int64), return_inverse=True)
    totals = np.bincount(inverse, weights=counts, minlength=len(gaps)).astype(np.int64)
    whole, frac = np.divmod(gaps, scale)
    whole_digits, whole_keep = _integer_text(whole)
    frac_digits = _digit_matrix(frac, ITL_DECIMALS)
    significant = frac_digits != _DIGIT
    significant[:, 0] = True  # at least one decimal
    last = ITL_DECIMALS - 1 - np.argmax(significant[:, ::-1], axis=1)
    frac_keep = np.arange(ITL_DECIMALS) <= last[:, None]
    count_digits, count_keep = _integer_text(totals)
    n = len(gaps)

    def literal(text: str) -> tuple[np.ndarray, np.ndarray]:
        chars = np.frombuffer(text.encode(), np.uint8)
        return np.broadcast_to(chars, (n, len(chars))), np.ones((n, len(chars)), bool)

    parts = [
        (whole_digits, whole_keep),
        literal("."),
        (frac_digits, frac_keep),
        literal(","),
        (count_digits, count_keep),
        literal("\r\n"),
    ]
    chars = np.hstack([p[0] for p in parts])
    keep = np.hstack([p[1] for p in parts])
    with path.open("wb") as fh:
        fh.write(b"itl_ms,count\r\n")
        fh.write(chars[keep].tobytes())


def read_itl_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(itl_ms, count) arrays written by :func:`write_itl_csv`."""
    with path.open() as fh:
        fh.readline()
        if not fh.read(1):  # header only: a run without a single gap
            return np.empty(0), np.empty(0, np.int64)
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
