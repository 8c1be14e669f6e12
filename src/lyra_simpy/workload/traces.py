"""Readers for public request traces → arrival times (s, from 0) and token lengths.

Formats (DESIGN §5):

* ``azure``: Azure LLM inference trace 2023 CSV, ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (Patel et al., Splitwise, ISCA'24; github.com/Azure/AzurePublicDataset, ``data/``).
* ``mooncake``: Mooncake FAST'25 JSONL, ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (512-token block ids; github.com/kvcache-ai/Mooncake,
  ``FAST25-release/traces/``).
* ``burstgpt``: BurstGPT CSV, ``Timestamp`` (s), ``Request tokens``, ``Response tokens``
  (github.com/HPMLL/BurstGPT).
* ``csv``: plain ``arrival_s,input_tokens,output_tokens`` (what a replay records).

Every row is checked as it is read: its time must be finite, not negative and not
before the previous row's, and its token counts whole numbers ≥ 1. A row that breaks
this is refused with the file and its line (a NaN time once made ``run`` spin forever;
a negative count was dropped silently) — never dropped or reordered. One exception,
the dataset's own convention: BurstGPT logs failed requests with ``Response tokens``
0 (its README, "Log Type"); those rows are not requests that were served and are
skipped. Times are made relative to the first row.

CSV traces are read column-wise: only the three columns used, converted and checked
with array operations (the Azure conversation trace's 19 366 rows in a few ms, where
parsing each timestamp with ``datetime`` took 0.3 s); a plain file (no quotes, every row
as wide as the header) is split with ``str.split`` rather than ``csv.reader``. Only when
a check fails is the file read again row by row, to name the line that broke it.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from lyra_simpy.errors import TraceError
from lyra_simpy.files import per_file_version

TraceFormat = Literal["azure", "mooncake", "burstgpt", "csv"]

_SOURCES = {
    "azure": "github.com/Azure/AzurePublicDataset (data/AzureLLMInferenceTrace_*.csv)",
    "mooncake": "github.com/kvcache-ai/Mooncake (FAST25-release/traces/*.jsonl)",
    "burstgpt": "github.com/HPMLL/BurstGPT (data/BurstGPT_*.csv)",
    "csv": "a replay's requests (arrival_s,input_tokens,output_tokens)",
}


@dataclass(frozen=True)
class Trace:
    """A trace's rows, in arrival order."""

    arrival_s: npt.NDArray[np.float64]
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    hash_ids: tuple[tuple[int, ...], ...] | None = None
    """Per row, the ids of its prompt's blocks (Mooncake; None for other formats)."""

    def __len__(self) -> int:
        return len(self.arrival_s)


def _parse_azure_time(text: str) -> float:
    # 7 fractional digits: datetime takes at most 6.
    head, _, frac = text.strip().partition(".")
    base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


class _Rows:
    """The rows read so far, each checked (see the module docstring)."""

    def __init__(self, path: Path, fmt: TraceFormat) -> None:
        self.path, self.fmt = path, fmt
        self.times: list[float] = []
        self.ins: list[int] = []
        self.outs: list[int] = []
        self._last: float | None = None

    def _refuse(self, line: int, what: str) -> TraceError:
        return TraceError(f"{self.path}: line {line}: {what}")

    def _tokens(self, line: int, column: str, value: object) -> int:
        try:
            if isinstance(value, bool):
                raise TypeError
            x = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise self._refuse(line, f"{column} {value!r}, must be a whole number >= 1") from None
        if not (math.isfinite(x) and x >= 1 and x == int(x)):
            raise self._refuse(line, f"{column} {value!r}, must be a whole number >= 1")
        return int(x)

    def add(
        self,
        line: int,
        t: float,
        columns: tuple[str, str, str],
        i: object,
        o: object,
        per_s: float = 1.0,
    ) -> None:
        """Check and keep one row: time *t* in the file's unit (*per_s* of them make a
        second), input *i* and output *o* tokens as written."""
        t_col, i_col, o_col = columns
        if self.fmt == "burstgpt" and str(o).strip() in ("0", "0.0"):
            return  # a failed request in the BurstGPT log (see the module docstring)
        if not math.isfinite(t) or t < 0:
            raise self._refuse(line, f"{t_col} {t!r}, must be a finite time >= 0")
        if self._last is not None and t < self._last:
            raise self._refuse(
                line,
                f"{t_col} {t!r} is before the previous row's {self._last!r}; "
                "rows must be in arrival order",
            )
        self.ins.append(self._tokens(line, i_col, i))
        self.outs.append(self._tokens(line, o_col, o))
        self.times.append(t / per_s)
        self._last = t


_CSV_COLUMNS: dict[str, tuple[str, str, str]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "csv": ("arrival_s", "input_tokens", "output_tokens"),
}


def _azure_times(texts: list[str]) -> npt.NDArray[np.float64]:
    """Azure wall-clock strings → seconds, vectorised: the date and time to the second
    as UTC (only differences are used), plus the fraction (7 digits, more than
    ``datetime`` takes), exactly as :func:`_parse_azure_time` computes them on a UTC
    machine. Raises ValueError on any string that is not of that form."""
    fixed = _azure_times_fixed(texts)
    if fixed is not None:
        return fixed
    stripped = [t.strip() for t in texts]
    whole = np.array([t[:19] for t in stripped], dtype="datetime64[s]").astype(np.int64)
    frac = np.array(["0" + t[19:] if len(t) > 19 else "0" for t in stripped], dtype=np.float64)
    if any(len(t) > 19 and t[19] != "." for t in stripped):
        raise ValueError("not a wall-clock time")
    out: npt.NDArray[np.float64] = whole.astype(np.float64) + frac
    return out


def _azure_times_fixed(texts: list[str]) -> npt.NDArray[np.float64] | None:
    """:func:`_azure_times` for the trace's usual form, every string
    ``YYYY-MM-DD HH:MM:SS.fffffff`` of one length without surrounding space: the same
    two conversions (the first 19 characters as ``datetime64[s]``, ``"0" +`` the rest as
    a float) done on one fixed-width byte array instead of a list of strings (half the
    time). None for anything else, which the general path then reads."""
    try:
        b = np.array(texts, dtype=np.bytes_)
    except UnicodeEncodeError:
        return None
    width = b.dtype.itemsize
    if width < 21 or not bool(np.all(np.strings.str_len(b) == width)):
        return None
    frac = np.strings.slice(b, 19, None)
    digits = np.strings.isdigit(np.strings.slice(frac, 1, None))
    starts = np.strings.isdigit(np.strings.slice(b, 0, 1))
    if not bool(np.all(np.strings.startswith(frac, b".") & digits & starts)):
        return None
    try:
        whole = b.astype("S19").astype("datetime64[s]").astype(np.int64)
        out: npt.NDArray[np.float64] = whole.astype(np.float64) + (b"0" + frac).astype(np.float64)
    except ValueError:
        return None
    return out


def _split_plain(text: str) -> tuple[list[str], list[str]] | None:
    """A CSV file's header and then every row's fields in one flat list, split with
    ``str.split`` (the conversation trace's 19 366 rows in ~10 ms, half the time
    ``csv.reader`` takes), when the file is plain: no quotes, and every row with as
    many fields as the header (blank rows included: ``csv.reader`` gives them no
    field). None otherwise: ``csv.reader`` reads it. Newlines are ``\\n``, ``\\r\\n``
    or ``\\r`` for both (``read_text`` translates them as ``csv.reader`` ends rows)."""
    if '"' in text:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the last row's newline ends it; csv.reader makes no row of it
    if not lines:
        return None
    header = lines[0].split(",")
    body = lines[1:]
    commas = len(header) - 1
    if any(n != commas for n in map(str.count, body, [","] * len(body))):
        return None
    return header, ",".join(body).split(",") if body else []


def _fast_csv(path: Path, fmt: TraceFormat) -> Trace | None:
    """The trace read column-wise (only the three columns used) and checked with
    array operations; None when any row breaks a rule, so that the row-by-row reader
    finds it and names its line (the two readers agree on every valid file)."""
    split = _split_plain(path.read_text())
    if split is None:
        return _fast_csv_rows(path, fmt)
    header, fields = split
    k_t, k_i, k_o = _column_indices(path, fmt, header)
    width = len(header)
    t_text, i_text, o_text = fields[k_t::width], fields[k_i::width], fields[k_o::width]
    return _checked(fmt, t_text, i_text, o_text)


def _column_indices(path: Path, fmt: TraceFormat, header: list[str]) -> tuple[int, int, int]:
    columns = _CSV_COLUMNS[fmt]
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(f"{path}: not a {fmt} trace, missing columns {missing}")
    k_t, k_i, k_o = (header.index(c) for c in columns)
    return k_t, k_i, k_o


def _fast_csv_rows(path: Path, fmt: TraceFormat) -> Trace | None:
    """:func:`_fast_csv` for a file that is not plain: its columns taken through
    ``csv.reader``."""
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        k_t, k_i, k_o = _column_indices(path, fmt, next(reader, []))
        try:
            rows = [(r[k_t], r[k_i], r[k_o]) for r in reader]
        except IndexError:
            return None
    if not rows:
        return None
    t_text, i_text, o_text = (list(col) for col in zip(*rows, strict=True))
    return _checked(fmt, t_text, i_text, o_text)


def _checked(
    fmt: TraceFormat, t_text: list[str], i_text: list[str], o_text: list[str]
) -> Trace | None:
    """The columns as numbers, checked with array operations (None: a row breaks a
    rule, or no row)."""
    if not t_text:
        return None
    try:
        t = _azure_times(t_text) if fmt == "azure" else np.asarray(t_text, dtype=np.float64)
        i = np.asarray(i_text, dtype=np.float64)
        o = np.asarray(o_text, dtype=np.float64)
    except ValueError:
        return None
    if fmt == "burstgpt":  # failed requests (see the module docstring)
        keep = o != 0
        t, i, o = t[keep], i[keep], o[keep]
    if len(t) == 0:
        return None
    good = bool(np.all(np.isfinite(t)) and t[0] >= 0 and np.all(t[1:] >= t[:-1]))
    for x in (i, o):
        good = good and bool(np.all(np.isfinite(x)) and np.all(x >= 1) and np.all(x == np.floor(x)))
    if not good:
        return None
    return Trace(t - t[0], i.astype(np.int64), o.astype(np.int64))


def _read_rows(path: Path, fmt: TraceFormat, hashes: list[tuple[int, ...]]) -> _Rows:
    rows = _Rows(path, fmt)
    with path.open(newline="") as fh:
        if fmt == "mooncake":
            cols = ("timestamp", "input_length", "output_length")
            for line, text in enumerate(fh, start=1):
                if text.strip():
                    row = json.loads(text)
                    t_ms = float(row["timestamp"])
                    i, o = row["input_length"], row["output_length"]
                    rows.add(line, t_ms, cols, i, o, per_s=1000.0)
                    hashes.append(tuple(int(h) for h in row.get("hash_ids", ())))
            return rows
        columns = _CSV_COLUMNS[fmt]
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: not a {fmt} trace, missing columns {missing}")
        t_col, i_col, o_col = columns
        for row in reader:
            text = row[t_col]
            try:
                t = _parse_azure_time(text) if fmt == "azure" else float(text)
            except (TypeError, ValueError):
                raise rows._refuse(reader.line_num, f"{t_col} {text!r}, must be a time") from None
            rows.add(reader.line_num, t, columns, row[i_col], row[o_col])
    return rows


@per_file_version(maxsize=16)
def _load(path: Path, fmt: TraceFormat) -> Trace:
    if fmt != "mooncake":
        trace = _fast_csv(Path(path), fmt)
        if trace is not None:
            for arr in (trace.arrival_s, trace.input_tokens, trace.output_tokens):
                arr.flags.writeable = False
            return trace
    hashes: list[tuple[int, ...]] = []
    try:
        rows = _read_rows(Path(path), fmt, hashes)
    except (KeyError, ValueError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: malformed {fmt} trace ({exc})") from exc
    t = np.asarray(rows.times, dtype=np.float64)
    i = np.asarray(rows.ins, dtype=np.int64)
    o = np.asarray(rows.outs, dtype=np.int64)
    if len(t) == 0:
        raise TraceError(f"{path}: no usable rows in {fmt} trace")
    t = t - t[0]
    for arr in (t, i, o):
        arr.flags.writeable = False
    return Trace(t, i, o, tuple(hashes) if hashes else None)


def read_trace(path: Path, fmt: TraceFormat) -> Trace:
    """Read the trace at *path* (cached per file and modification time)."""
    if not path.is_file():
        raise TraceError(
            f"trace file not found: {path} (a {fmt} trace: {_SOURCES[fmt]}; "
            "`lyra-simpy traces list` shows the traces known by name)"
        )
    return _load(path, fmt)
