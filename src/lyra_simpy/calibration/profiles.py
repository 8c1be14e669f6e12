"""Profile CSVs (DESIGN §4): measured engine steps, read and checked.

One row per measured step, header required:
``phase,batch_size,input_tokens,context_len,latency_ms``.

* ``prefill``: ``batch_size`` sequences each compute ``input_tokens`` new prompt tokens
  with ``context_len`` tokens per sequence already cached (0 without a prefix hit);
* ``decode``: ``batch_size`` sequences each decode one token with ``context_len`` tokens
  each in the KV cache (``input_tokens`` is 0);
* ``mixed``: ``batch_size`` decoding sequences at ``context_len`` together with
  ``input_tokens`` prompt tokens being prefilled in the same step.

Extra columns are allowed and ignored, except the optional ``steps``, ``passes``,
``checkpoints``, ``output_passes`` (:data:`STEP_COLUMNS`), ``attention_cells`` and
``attention_computed``. The metadata (``hardware``, ``model``, ``engine``, ``version``,
``tp``, ``date``, anything else) lives beside the CSV in a YAML file of the same stem
(``x.csv`` → ``x.yaml``, or ``x.meta.yaml``). Every problem is one line naming the file,
the row, the column, the value and what is allowed (:class:`~lyra_simpy.errors.TraceError`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from lyra_simpy.errors import TraceError

COLUMNS = ("phase", "batch_size", "input_tokens", "context_len", "latency_ms")
"""The contract's columns, in order (DESIGN §4)."""
STEP_COLUMNS = ("steps", "passes", "checkpoints", "output_passes")
"""Optional extra columns that the fit reads (``lyra-simpy profile`` writes them for
llama.cpp; see :class:`Profile`): integers >= 1, >= 1, >= 0 and >= 0."""
ATTENTION_COLUMN = "attention_cells"
"""Optional column: Σ over the row's prompt tokens of the KV cells each attends over, as
the engine runs the probe (llama.cpp's padded ``n_kv``,
:func:`~lyra_simpy.policies.llamacpp_attention.step_attention`; ``lyra-simpy profile``
writes it for llama.cpp). A fit then prices prompt attention per token × cell."""
COMPUTED_COLUMN = "attention_computed"
"""Optional column: the (query row, KV cell) pairs of attention the engine computes for
the row's prompt tokens — llama.cpp's CPU flash attention computes only the 64 × 64 tiles
its mask leaves open (the prompt's own cells, causal), where ``attention_cells`` counts
every cell its passes span (:func:`~lyra_simpy.policies.llamacpp_attention.step_attention`;
``lyra-simpy profile`` writes it for llama.cpp). A fit of a profile with step columns
then prices both (``per_computed_attention_ms``)."""
PHASES = ("prefill", "decode", "mixed")
METADATA_KEYS = ("hardware", "model", "engine", "version", "tp", "date")
"""What the metadata YAML should say (missing keys are reported as ``unknown``)."""


@dataclass(frozen=True)
class Profile:
    """The rows of a profile CSV as columns, with its metadata."""

    path: Path
    phase: npt.NDArray[np.str_]
    batch_size: npt.NDArray[np.int64]
    input_tokens: npt.NDArray[np.int64]
    context_len: npt.NDArray[np.int64]
    latency_ms: npt.NDArray[np.float64]
    metadata: dict[str, Any] = field(default_factory=dict)
    """The metadata YAML's mapping (``{}`` when there is none)."""
    metadata_path: Path | None = None
    steps: npt.NDArray[np.int64] | None = None
    """Optional column ``steps``: engine iterations the row's latency covers (a llama.cpp
    prompt split for a context checkpoint is two); None: one each."""
    passes: npt.NDArray[np.int64] | None = None
    """Optional column ``passes``: forward passes (llama.cpp ubatches) in those steps
    together; None: one per step."""
    checkpoints: npt.NDArray[np.int64] | None = None
    """Optional column ``checkpoints``: llama.cpp context checkpoints copied; None: 0."""
    output_passes: npt.NDArray[np.int64] | None = None
    """Optional column ``output_passes``: those passes that computed logits (a decode's
    token or a prompt's last: :func:`~lyra_simpy.policies.ubatch.pass_counts`); None:
    one for a ``prefill`` row (its prompts end together), every pass of a ``decode`` row,
    one per step of a ``mixed`` row (exact when its prompt shares a pass with the
    decodes)."""
    attention_cells: npt.NDArray[np.int64] | None = None
    """Optional column ``attention_cells`` (:data:`ATTENTION_COLUMN`); None: prompt
    attention is counted as Σ new × (cached + new)."""
    attention_computed: npt.NDArray[np.int64] | None = None
    """Optional column ``attention_computed`` (:data:`COMPUTED_COLUMN`); None: not
    measured (``per_computed_attention_ms`` is then fitted as 0)."""

    def __len__(self) -> int:
        return len(self.latency_ms)


def metadata_path_of(path: Path) -> Path | None:
    """The metadata YAML beside the profile CSV *path*, if there is one."""
    for candidate in (path.with_suffix(".yaml"), path.with_suffix(".meta.yaml")):
        if candidate.is_file():
            return candidate
    return None


def _int(path: Path, line: int, column: str, text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low:
        raise TraceError(f"{path}: row {line}: {column}: got {text!r}, must be an integer >= {low}")
    return value


def _latency(path: Path, line: int, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise TraceError(
            f"{path}: row {line}: latency_ms: got {text!r}, must be a number > 0 (milliseconds)"
        )
    return value


def _check_row(path: Path, line: int, phase: str, batch: int, inp: int) -> None:
    if phase == "decode" and inp != 0:
        raise TraceError(f"{path}: row {line}: input_tokens: got {inp}, must be 0 in a decode row")
    if phase == "prefill" and inp == 0:
        raise TraceError(f"{path}: row {line}: input_tokens: got 0, must be > 0 in a prefill row")
    if phase == "mixed" and batch == 0 and inp == 0:
        raise TraceError(
            f"{path}: row {line}: batch_size: got 0 with input_tokens 0, a mixed row needs "
            "decoding sequences or prompt tokens"
        )
    if phase != "mixed" and batch == 0:
        raise TraceError(f"{path}: row {line}: batch_size: got 0, must be > 0 in a {phase} row")


def read_metadata(path: Path) -> dict[str, Any]:
    """The metadata mapping in the YAML file at *path*."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TraceError(f"{path}: cannot read profile metadata ({exc})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TraceError(f"{path}: got {type(data).__name__}, must be a mapping of metadata")
    return data


def request_path_ms(path: str | Path) -> float:
    """The request path the profile CSV at *path* measured: its metadata's
    ``request_path_ms`` (``lyra-simpy profile``: lone prompts' client TTFT less the
    engine's own prompt time), what ``workload.request_path_ms`` takes; 0 when the
    profile has no metadata or the metadata no path (a profile timed by the client)."""
    meta = metadata_path_of(Path(path))
    return float(read_metadata(meta).get("request_path_ms") or 0.0) if meta else 0.0


def read_profile(path: str | Path) -> Profile:
    """Read and check the profile CSV at *path* and the metadata YAML beside it."""
    p = Path(path)
    try:
        fh = p.open(newline="", encoding="utf-8-sig")  # a spreadsheet's BOM is fine
    except OSError as exc:
        raise TraceError(f"{p}: cannot read profile ({exc.strerror})") from None
    rows: list[tuple[str, int, int, int, float]] = []
    with fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise TraceError(
                f"{p}: header: missing column(s) {', '.join(missing)}; a profile needs "
                f"{','.join(COLUMNS)} (DESIGN §4)"
            )
        at = [header.index(c) for c in COLUMNS]
        opt = {
            c: header.index(c)
            for c in (*STEP_COLUMNS, ATTENTION_COLUMN, COMPUTED_COLUMN)
            if c in header
        }
        counts: dict[str, list[int]] = {c: [] for c in opt}
        for line, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < len(header):
                raise TraceError(
                    f"{p}: row {line}: got {len(row)} fields, must have {len(header)} "
                    "(as many as the header)"
                )
            phase, batch, inp, ctx, lat = (row[i].strip() for i in at)
            if phase not in PHASES:
                raise TraceError(
                    f"{p}: row {line}: phase: got {phase!r}, must be one of {', '.join(PHASES)}"
                )
            b = _int(p, line, "batch_size", batch, 0)
            i = _int(p, line, "input_tokens", inp, 0)
            c = _int(p, line, "context_len", ctx, 0)
            _check_row(p, line, phase, b, i)
            rows.append((phase, b, i, c, _latency(p, line, lat)))
            for name, k in opt.items():
                counts[name].append(_int(p, line, name, row[k].strip(), _LOW[name]))
    if not rows:
        raise TraceError(f"{p}: no rows after the header; a profile needs measured steps")
    meta_path = metadata_path_of(p)
    phase_col, b_col, i_col, c_col, l_col = zip(*rows, strict=True)
    return Profile(
        path=p,
        phase=np.array(phase_col, dtype=np.str_),
        batch_size=np.array(b_col, dtype=np.int64),
        input_tokens=np.array(i_col, dtype=np.int64),
        context_len=np.array(c_col, dtype=np.int64),
        latency_ms=np.array(l_col, dtype=np.float64),
        metadata=read_metadata(meta_path) if meta_path else {},
        metadata_path=meta_path,
        **{name: np.array(values, dtype=np.int64) for name, values in counts.items()},
    )


_LOW = {
    "steps": 1,
    "passes": 1,
    "checkpoints": 0,
    "output_passes": 0,
    ATTENTION_COLUMN: 0,
    COMPUTED_COLUMN: 0,
}


WANDER_SUFFIX = ".wander.csv"
"""The wander probe's steps beside a profile CSV (``grid.wander_s`` of ``lyra-simpy
profile``): ``PROFILE.wander.csv``."""


def read_wander(path: Path) -> tuple[Profile, npt.NDArray[np.float64]] | None:
    """The wander probe's steps beside the profile CSV at *path* (:data:`WANDER_SUFFIX`),
    read as profile rows, and each one's ``end_s``; None when the profile has none."""
    steps_path = path.with_suffix(WANDER_SUFFIX)
    if not steps_path.is_file():
        return None
    (ends,) = number_columns(steps_path, {"end_s": (None, "a number (s)")}, "the wander probe's")
    return read_profile(steps_path), ends


SPEED_SUFFIX = ".speed.csv"
"""Every measurement of a profile beside the speed reference timed before it
(``grid.speed_reference`` of ``lyra-simpy profile``), in the order taken:
``PROFILE.speed.csv``."""


def read_speed_references(path: Path) -> npt.NDArray[np.float64] | None:
    """The speed references beside the profile CSV at *path* (:data:`SPEED_SUFFIX`) in the
    order taken, one a probe (the rows one probe gives share its reference: a run of equal
    references within a round counts once); None when the profile has none."""
    refs_path = path.with_suffix(SPEED_SUFFIX)
    if not refs_path.is_file():
        return None
    rounds, refs = number_columns(
        refs_path,
        {
            "round": (1.0, "a round number (1 or more)"),
            "reference_ms": (math.ulp(0.0), "a positive number (ms)"),
        },
        "the speed references'",
    )
    new = np.ones(len(refs), dtype=bool)
    new[1:] = (rounds[1:] != rounds[:-1]) | (refs[1:] != refs[:-1])
    return refs[new]


def number_columns(
    path: Path, columns: dict[str, tuple[float | None, str]], whose: str
) -> list[npt.NDArray[np.float64]]:
    """The *columns* of the probe CSV at *path* as arrays, in their order; each column
    maps to the lowest value allowed (None: any finite number) and the words an error
    gives for what is allowed. A missing column or a bad cell is one line naming the
    file, the row and the column (*whose*: whose column it is, e.g. the wander probe's).
    Blank rows are skipped."""
    out: list[list[float]] = [[] for _ in columns]
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for name in columns:
            if name not in header:
                raise TraceError(f"{path}: header: missing column {name} ({whose})")
        at = [header.index(name) for name in columns]
        for line, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            for values, i, (name, (low, allowed)) in zip(out, at, columns.items(), strict=True):
                cell = row[i] if i < len(row) else ""
                try:
                    value = float(cell)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value) or (low is not None and value < low):
                    raise TraceError(f"{path}: row {line}: {name}: got {cell!r}, must be {allowed}")
                values.append(value)
    return [np.asarray(v, dtype=np.float64) for v in out]


def write_profile(path: Path, rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> None:
    """Write *rows* (mappings with the contract's columns and *extra* ones) as a profile CSV."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow((*COLUMNS, *extra))
        for row in rows:
            writer.writerow([row[c] for c in (*COLUMNS, *extra)])


def decode_slots(batch: int, passes: int) -> tuple[int, ...]:
    """The slots a decode probe row pins its *batch* decoders to, by the *passes* it runs
    in with per-slot KV: one, slots 0..B−1 (``decode_batch``); one a sequence, every other
    slot (``fragmented_decode_batch``); two of a batch of 3 or more, slots 0..B−2 and B
    (``split_decode_batch``)."""
    if passes == 1:
        return tuple(range(batch))
    if passes == batch:
        return tuple(range(0, 2 * batch, 2))
    if passes == 2 and batch >= 3:
        return (*range(batch - 1), batch)
    raise ValueError(f"passes: got {passes} for a decode row of {batch}, allowed 1, 2 or {batch}")
