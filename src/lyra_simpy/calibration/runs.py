"""Engine steps rebuilt from the token streams of replayed runs (``calibrate --from-runs``).

A user of a remote endpoint sees no engine step, only when each request's tokens
arrive. A replay (:mod:`~lyra_simpy.live.replay`) keeps those times in ``tokens.jsonl``
beside ``requests.jsonl``. An engine emits one token to every sequence it decoded and a
first token to every sequence whose prompt it finished, all at the end of one step, so
the tokens that reach the client at (nearly) the same instant belong to one step:

1. **Cluster.** Every token-carrying chunk of every request, sorted by time; a new step
   starts where the gap to the previous chunk exceeds ``StepRebuild.gap_ms``, or where a
   request would get a second chunk in the same step (one chunk per request per step).
2. **End.** A step ends at the median of its chunks' times (robust to one late chunk).
3. **Composition.** A request's first chunk is its prefill: ``input_tokens −
   cached_tokens`` new tokens after ``cached_tokens`` cached (the whole prompt in one
   step). Its *j*-th chunk (j ≥ 1) is a decode reading ``input_tokens + tokens before the
   chunk`` context tokens (the engine's KV length as :class:`~lyra_simpy.engine.request.Request`
   counts it).
4. **Duration** = end − start, where a step starts when the previous step ended, or —
   when a request prefilled in it was sent after that (the engine was idle) — when the
   last such request was sent (``idle_start: arrival``; ``drop`` leaves such steps out,
   since their time includes the request's trip to the server).

Each rebuilt step becomes one row of the fit, with the terms of
:mod:`~lyra_simpy.calibration.fit` (a step with *d* decodes and *p* prompts: ``d`` decode
sequences, Σ context, Σ new prompt tokens, Σ new × (cached + new)). Where this breaks is
in docs/calibration.md §7 (overlapping runs, network jitter, chunked prefills whose first
chunks emit no token, speculative decoding's several tokens per chunk).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, PositiveFloat

from lyra_simpy.config import Closed
from lyra_simpy.errors import TraceError

TOKENS_FILE = "tokens.jsonl"
"""The replay's side file of per-token times (:mod:`~lyra_simpy.live.replay`)."""
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


class StepRebuild(Closed):
    """How engine steps are rebuilt from token times (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gap_ms: PositiveFloat = 1.0
    """Chunks further apart than this start a new step. It must exceed the spread with
    which one step's tokens reach the client (the server writing one stream after
    another, the network, the client's event loop: well under a millisecond on
    localhost) and be shorter than the shortest step (≈ 15 ms for the llama.cpp CPU
    decode of docs/VALIDATION.md; a few ms for a GPU engine's small decodes)."""
    idle_start: Literal["arrival", "drop"] = "arrival"
    """A step the engine started idle, upon a request: ``arrival`` starts it when that
    request was sent (its time then includes the request's trip to the server and its
    parsing, a few ms on localhost); ``drop`` leaves such steps out of the fit."""


@dataclass(frozen=True)
class Steps:
    """Rebuilt steps as columns (one entry per step); the row-like columns make them
    readable by the fit report like profile rows."""

    latency_ms: Floats
    decode_seqs: Ints
    decode_context_tokens: Ints
    prefill_seqs: Ints
    prefill_tokens: Ints
    prefill_attention_tokens: Ints
    run: npt.NDArray[np.str_]
    """The run folder each step came from."""
    dropped: int = 0
    """Steps found but left out: begun idle under ``idle_start: drop``, or the first of
    a run without a prompt in it (no known start)."""

    def __len__(self) -> int:
        return len(self.latency_ms)

    @property
    def phase(self) -> npt.NDArray[np.str_]:
        """``runs:prefill``, ``runs:decode`` or ``runs:mixed`` per step."""
        kind = np.where(
            self.prefill_seqs == 0,
            "runs:decode",
            np.where(self.decode_seqs == 0, "runs:prefill", "runs:mixed"),
        )
        return np.asarray(kind, dtype=np.str_)

    @property
    def batch_size(self) -> Ints:
        return np.asarray(self.decode_seqs + self.prefill_seqs, dtype=np.int64)

    @property
    def input_tokens(self) -> Ints:
        return self.prefill_tokens

    @property
    def context_len(self) -> Ints:
        """Mean decode context per decoding sequence (0 without decodes), rounded."""
        seqs = np.maximum(self.decode_seqs, 1)
        return np.asarray(np.rint(self.decode_context_tokens / seqs), dtype=np.int64)

    def design_matrix(self) -> Floats:
        """One column per term of :data:`~lyra_simpy.calibration.fit.TERMS`."""
        return np.column_stack(
            [
                np.ones(len(self)),
                self.decode_seqs.astype(np.float64),
                self.decode_context_tokens.astype(np.float64),
                self.prefill_tokens.astype(np.float64),
                self.prefill_attention_tokens.astype(np.float64),
            ]
        )


_COLUMNS = tuple(k for k in Steps.__dataclass_fields__ if k != "dropped")


@dataclass(frozen=True)
class StreamedRequest:
    """What a replay recorded of one request: when it was sent, its prompt, and when
    each token-carrying chunk arrived with how many tokens."""

    arrival_s: float
    input_tokens: int
    cached_tokens: int
    chunk_s: list[float]
    chunk_tokens: list[int]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    out = []
    for k, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            raise TraceError(f"{path}: line {k}: not a JSON object")
        out.append(row)
    return out


def read_run(folder: Path) -> list[StreamedRequest]:
    """The requests of the replayed run in *folder* that got tokens, with their chunk
    times. A request whose chunks cannot be placed (counted by ``usage``) fails the run:
    its tokens would be missing from the steps they belong to."""
    tokens_path = folder / TOKENS_FILE
    if not tokens_path.is_file():
        raise TraceError(
            f"{folder}: no {TOKENS_FILE} (per-token times); replay the run again with "
            "this version of lyra-simpy, which writes it"
        )
    records = {r.get("request_id"): r for r in _read_jsonl(folder / "requests.jsonl")}
    out = []
    for row in _read_jsonl(tokens_path):
        rid = row.get("request_id")
        rec = records.get(rid)
        if rec is None:
            raise TraceError(f"{tokens_path}: request_id {rid!r} is not in requests.jsonl")
        times, counts = row.get("chunk_s"), row.get("chunk_tokens")
        if counts is None:
            raise TraceError(
                f"{tokens_path}: request {rid}: chunk_tokens is null (its token count came "
                "from usage, so which chunk carried which token is unknown); steps "
                "cannot be rebuilt from this run"
            )
        if not isinstance(times, list) or not isinstance(counts, list) or len(times) != len(counts):
            raise TraceError(
                f"{tokens_path}: request {rid}: chunk_s and chunk_tokens must be lists "
                "of one length"
            )
        out.append(
            StreamedRequest(
                float(rec["arrival_s"]),
                int(rec["input_tokens"]),
                int(rec.get("cached_tokens") or 0),
                [float(t) for t in times],
                [int(n) for n in counts],
            )
        )
    return out


def rebuild_steps(requests: list[StreamedRequest], cfg: StepRebuild, run: str = "") -> Steps:
    """The engine steps of one run (module docstring)."""
    events = sorted((t, r, j) for r, req in enumerate(requests) for j, t in enumerate(req.chunk_s))
    clusters: list[list[tuple[float, int, int]]] = []
    members: set[int] = set()
    last = -np.inf
    gap_s = cfg.gap_ms / 1000.0
    for t, r, j in events:
        if not clusters or t - last > gap_s or r in members:
            clusters.append([])
            members = set()
        clusters[-1].append((t, r, j))
        members.add(r)
        last = t
    cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
    prev_end: float | None = None
    dropped = 0
    for cluster in clusters:
        end = float(np.median([t for t, _, _ in cluster]))
        dec = ctx = pre = new = att = 0
        sent = -np.inf
        for _, r, j in cluster:
            req = requests[r]
            if j == 0:
                n = req.input_tokens - req.cached_tokens
                pre += 1
                new += n
                att += n * (req.cached_tokens + n)
                sent = max(sent, req.arrival_s)
            else:
                dec += 1
                ctx += req.input_tokens + sum(req.chunk_tokens[:j])
        idle = prev_end is None or sent > prev_end
        start = sent if idle or prev_end is None else prev_end
        prev_end = end
        if (idle and cfg.idle_start == "drop") or not np.isfinite(start) or not end > start:
            dropped += 1  # (a first step without a prompt in it has no known start)
            continue
        cols["latency_ms"].append((end - start) * 1000.0)
        cols["decode_seqs"].append(dec)
        cols["decode_context_tokens"].append(ctx)
        cols["prefill_seqs"].append(pre)
        cols["prefill_tokens"].append(new)
        cols["prefill_attention_tokens"].append(att)
        cols["run"].append(run)
    return Steps(
        latency_ms=np.asarray(cols["latency_ms"], dtype=np.float64),
        decode_seqs=np.asarray(cols["decode_seqs"], dtype=np.int64),
        decode_context_tokens=np.asarray(cols["decode_context_tokens"], dtype=np.int64),
        prefill_seqs=np.asarray(cols["prefill_seqs"], dtype=np.int64),
        prefill_tokens=np.asarray(cols["prefill_tokens"], dtype=np.int64),
        prefill_attention_tokens=np.asarray(cols["prefill_attention_tokens"], dtype=np.int64),
        run=np.asarray(cols["run"], dtype=np.str_),
        dropped=dropped,
    )


def steps_of_runs(folders: list[Path], cfg: StepRebuild) -> Steps:
    """The rebuilt steps of every run in *folders*, run after run."""
    parts = [rebuild_steps(read_run(f), cfg, str(f)) for f in folders]
    return Steps(
        **{name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS},
        dropped=sum(p.dropped for p in parts),
    )
