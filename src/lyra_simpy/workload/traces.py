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

Rows with zero input or output tokens are dropped (they cannot be served as requests);
times are made relative to the first row.
"""

from __future__ import annotations

import csv
import functools
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from lyra_simpy.errors import TraceError

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


def _read_rows(
    path: Path, fmt: TraceFormat, hashes: list[tuple[int, ...]]
) -> tuple[list[float], list[int], list[int]]:
    times: list[float] = []
    ins: list[int] = []
    outs: list[int] = []
    with path.open(newline="") as fh:
        if fmt == "mooncake":
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    times.append(float(row["timestamp"]) / 1000.0)
                    ins.append(int(row["input_length"]))
                    outs.append(int(row["output_length"]))
                    hashes.append(tuple(int(h) for h in row.get("hash_ids", ())))
            return times, ins, outs
        columns = {
            "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
            "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
            "csv": ("arrival_s", "input_tokens", "output_tokens"),
        }[fmt]
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: not a {fmt} trace, missing columns {missing}")
        t_col, i_col, o_col = columns
        for row in reader:
            t = row[t_col]
            times.append(_parse_azure_time(t) if fmt == "azure" else float(t))
            ins.append(int(float(row[i_col])))
            outs.append(int(float(row[o_col])))
    return times, ins, outs


@functools.lru_cache(maxsize=16)
def _load(path: str, fmt: TraceFormat, mtime_ns: int) -> Trace:
    hashes: list[tuple[int, ...]] = []
    try:
        times, ins, outs = _read_rows(Path(path), fmt, hashes)
    except (KeyError, ValueError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: malformed {fmt} trace ({exc})") from exc
    t = np.asarray(times, dtype=np.float64)
    i = np.asarray(ins, dtype=np.int64)
    o = np.asarray(outs, dtype=np.int64)
    keep = (i > 0) & (o > 0)
    t, i, o = t[keep], i[keep], o[keep]
    order = np.argsort(t, kind="stable")
    t, i, o = t[order], i[order], o[order]
    if len(t) == 0:
        raise TraceError(f"{path}: no usable rows in {fmt} trace")
    t = t - t[0]
    for arr in (t, i, o):
        arr.flags.writeable = False
    ids = None
    if hashes:
        kept = np.flatnonzero(keep)[order]
        ids = tuple(hashes[int(r)] for r in kept)
    return Trace(t, i, o, ids)


def read_trace(path: Path, fmt: TraceFormat) -> Trace:
    """Read the trace at *path* (cached per file and modification time)."""
    if not path.is_file():
        raise TraceError(
            f"trace file not found: {path} (a {fmt} trace: {_SOURCES[fmt]}; "
            "`lyra-simpy traces list` shows the traces known by name)"
        )
    return _load(str(path.resolve()), fmt, path.stat().st_mtime_ns)
