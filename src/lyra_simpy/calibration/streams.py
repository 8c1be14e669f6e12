"""What a replay recorded of each request's stream (``tokens.jsonl`` beside
``requests.jsonl``), read back for ``calibrate --from-runs``
(:mod:`~lyra_simpy.calibration.runs`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyra_simpy.errors import TraceError

TOKENS_FILE = "tokens.jsonl"
"""The replay's side file of per-token times (:mod:`~lyra_simpy.live.replay`); not part
of the DESIGN §4 contract, which ``requests.jsonl`` keeps unchanged."""


@dataclass(frozen=True)
class StreamedRequest:
    """What a replay recorded of one request: when it was sent, its prompt, and when
    each token-carrying chunk arrived with how many tokens."""

    arrival_s: float
    input_tokens: int
    cached_tokens: int
    chunk_s: list[float]
    chunk_tokens: list[int]
    approximate: bool = False
    """The stream held fewer chunks than tokens (``counted_by: usage``, e.g. a token
    whose text the server held back until the next): taken at one token a chunk, so
    the steps where it decoded without a chunk miss its decode."""


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
    times. A request counted by ``usage`` (its chunks did not match its tokens) is taken
    at one token a chunk (``StreamedRequest.approximate``)."""
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
        approximate = False
        if counts is None and isinstance(times, list):
            # counted by usage: which chunk carried which token is unknown
            approximate, counts = True, [1] * len(times)
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
                approximate,
            )
        )
    return out
