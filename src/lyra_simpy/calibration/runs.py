"""Engine steps rebuilt from the token streams of replayed runs (``calibrate --from-runs``).

A user of a remote endpoint sees no engine step, only when each request's tokens
arrive. A replay (:mod:`~lyra_simpy.live.replay`) keeps those times in ``tokens.jsonl``
beside ``requests.jsonl``. An engine emits one token to every sequence it decoded and a
first token to every sequence whose prompt it finished, all at the end of one step, so
the tokens that reach the client at (nearly) the same instant belong to one step:

1. **Cluster.** Every token-carrying chunk of every request, sorted by time; a new step
   starts where the gap to the previous chunk exceeds ``StepRebuild.gap_ms`` (by default
   half the shortest step the run's streams show), or where a
   request would get a second chunk in the same step (one chunk per request per step).
2. **End.** A step ends at the median of its chunks' times (robust to one late chunk).
3. **Composition.** A request's first chunk is its prefill: ``input_tokens −
   cached_tokens`` new tokens after ``cached_tokens`` cached — the whole prompt in one
   step, or, with ``StepRebuild.prompt_stops`` (an engine that cuts a prompt's last
   tokens into steps of their own, as llama.cpp's context checkpoints do) or
   ``StepRebuild.prompt_budget`` (an engine that computes at most so many tokens a step,
   as vLLM's chunked prefill and llama.cpp's ``n_batch`` do), its last chunk there and
   each earlier chunk in the step before — or in an earlier step that hid engine steps
   of its own and ended after the request arrived (it joined that step's last engine
   step: a prompt arriving while another's first chunk runs) — or hidden inside this
   step when no step in between emitted a token. Its *j*-th chunk (j ≥ 1) is a decode
   reading ``input_tokens + tokens before the chunk`` context tokens (the engine's KV
   length as :class:`~lyra_simpy.engine.request.Request` counts it).
4. **Duration** = end − start, where a step starts when the previous step ended, or —
   when a request prefilled in it was sent after that (the engine was idle) — when the
   last such request was sent (``idle_start: arrival``; ``drop`` leaves such steps out,
   since their time includes the request's trip to the server).

Each rebuilt step becomes one row of the fit, with the terms of
:mod:`~lyra_simpy.calibration.fit` (a step with *d* decodes and *p* prompts: ``d`` decode
sequences, Σ context, Σ new prompt tokens, Σ new × (cached + new), or with
``StepRebuild.llamacpp`` the KV cells the prompt tokens attend over). Where this breaks is
in docs/calibration.md §7 (overlapping runs, network jitter, chunked prefills whose first
chunks emit no token, speculative decoding's several tokens per chunk).
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, PositiveFloat, PositiveInt

from lyra_simpy.config import Closed
from lyra_simpy.errors import TraceError
from lyra_simpy.policies.llamacpp import prompt_chunk, step_attention_cells

TOKENS_FILE = "tokens.jsonl"
"""The replay's side file of per-token times (:mod:`~lyra_simpy.live.replay`)."""
Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


class StepRebuild(Closed):
    """How engine steps are rebuilt from token times (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gap_ms: PositiveFloat | None = None
    """Chunks further apart than this start a new step. It must exceed the spread with
    which one step's tokens reach the client (the server writing one stream after
    another, the network, the client's event loop) and be shorter than the shortest
    step. None (default): per run, half the shortest step its streams show — the 5th
    percentile of the gaps between a request's consecutive chunks (a request gets at
    most one chunk a step, so each such gap spans at least one step); 1 ms for a run
    with no such gap. A fixed 1 ms split the steps of llama.cpp on two busy cores, whose
    tokens of one step reached the client up to ~10 ms apart (issue 12: the 5th
    percentile there is 22-40 ms, the cut 11-20 ms)."""
    idle_start: Literal["arrival", "drop"] = "arrival"
    """A step the engine started idle, upon a request: ``arrival`` starts it when that
    request was sent (its time then includes the request's trip to the server and its
    parsing, a few ms on localhost); ``drop`` leaves such steps out of the fit."""
    prompt_stops: tuple[PositiveInt, ...] = ()
    """Tokens before a prompt's end where the engine cuts it into steps of its own
    (empty: a prompt is computed in the step that gives its first token). llama.cpp
    with context checkpoints on a sliding-window model stops ``4 + n_ubatch`` and ``4``
    tokens before the end (``LlamaCppConfig.checkpoint_stops``: ``[516, 4]`` with its
    defaults): the earlier chunks run in the steps before the first token's — a step
    that emitted tokens of other requests, or, when none did (the engine had only this
    prompt), a step hidden inside the first token's, counted in its ``steps``."""

    prompt_budget: PositiveInt | None = None
    """Most tokens one engine step computes: vLLM's ``--max-num-batched-tokens``,
    llama.cpp's ``-b`` (``n_batch``). A prompt longer than the room its first token's
    step left — the budget less that step's decode tokens — ran in chunks of that room
    in the steps before, placed as ``prompt_stops`` chunks are (both engines fill a
    step with decodes first, then prompt tokens up to the budget: vLLM's
    ``Scheduler.schedule`` running requests before waiting ones, llama.cpp's
    ``update_slots``). The decodes of the first token's step stand for those of the
    steps before it, and a step's other prompts are not counted against its room.
    None (default): no limit."""

    llamacpp: LlamaCppLayout | None = None
    """Rebuild the steps as ``llama-server`` runs them, in the units the ``llamacpp``
    engine model charges (None, the default: none of this):

    - *cells*: each step's prompt attention in the KV cells its passes attend over
      (:func:`~lyra_simpy.policies.llamacpp.step_attention_cells`: with ``-kvu`` a prompt
      beside running requests attends over all their cells; ``ProfileFit.attention:
      n_kv``), instead of a prompt token × its own tokens (``own``). What the buffer holds
      before a step is counted from the streams: each decoding request's context less the
      token the step adds, and each prompt's tokens computed in earlier steps; an idle
      slot's cells are not (llama.cpp's defaults clear them when a request is given a
      slot: ``LlamaCppConfig.clears_idle_slots``).
    - *slots and passes*: the client sees no slot ids, so the server's slot choice is
      replayed on the streams (:func:`replay_slots`: a request takes the least recently
      released idle slot when sent, or waits in order for the next to be released at a
      request's last token), and each step's forward passes follow from its requests'
      slots as the engine model counts them (:func:`~lyra_simpy.policies.ubatch.passes`:
      with per-slot KV one per run of consecutive slot ids), fitted by
      ``per_extra_pass_ms``.
    - *checkpoints*: a prompt chunk that ends within ``n_ubatch`` tokens of its prompt's
      end after earlier tokens of it copies the slot's state first, as the engine model
      counts them (``per_checkpoint_ms``; only with ``prompt_stops``).

    Several prompts in one step are taken in slot order, after the step's decodes."""

    def gap_s(self, requests: list[StreamedRequest]) -> float:
        """The gap that starts a new step, in seconds, for the run of *requests*."""
        if self.gap_ms is not None:
            return self.gap_ms / 1000.0
        gaps = [np.diff(r.chunk_s) for r in requests if len(r.chunk_s) > 1]
        if not gaps:
            return 0.001
        return float(np.percentile(np.concatenate(gaps), 5)) / 2.0


class LlamaCppLayout(Closed):
    """The llama.cpp server a rebuilt step's cells and passes are counted by
    (``StepRebuild.llamacpp``; the fields of :class:`~lyra_simpy.policies.llamacpp.LlamaCppConfig`
    of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_parallel: PositiveInt
    """Slots (``-np``)."""
    batch_tokens: PositiveInt
    """Tokens per step (effective ``n_batch``)."""
    kv_unified: bool
    """One buffer for every slot (``-kvu``), or a stream per slot."""
    ubatch_tokens: PositiveInt
    """Tokens per forward pass (effective ``n_ubatch``)."""
    stream_cells: PositiveInt
    """Cells of one KV stream: the whole buffer with ``-kvu``, else a slot's."""


def rebuild_for(scheduler: Any) -> dict[str, Any]:
    """The :class:`StepRebuild` fields a scenario's engine implies: llama.cpp's checkpoint
    stops, ``n_batch`` and KV layout; a chunked-prefill scheduler's token budget (vLLM);
    nothing for an engine that computes every prompt in one step, nor for SGLang's
    prefill-first batches, whose earlier chunks run in prefill-only steps between the
    decodes rather than beside them (the placement ``prompt_budget`` assumes; not
    rebuilt chunk by chunk yet)."""
    from lyra_simpy.policies.chunked import ChunkedPrefillConfig
    from lyra_simpy.policies.llamacpp import LlamaCppConfig

    if isinstance(scheduler, LlamaCppConfig):
        layout = LlamaCppLayout(
            n_parallel=scheduler.n_parallel,
            batch_tokens=scheduler.batch_tokens,
            kv_unified=scheduler.kv_unified,
            ubatch_tokens=scheduler.ubatch_tokens,
            stream_cells=scheduler.stream_cells,
        )
        return {
            "prompt_stops": scheduler.checkpoint_stops,
            "prompt_budget": scheduler.batch_tokens,
            "llamacpp": layout,
        }
    if isinstance(scheduler, ChunkedPrefillConfig):
        return {"prompt_budget": scheduler.alone_chunk_tokens}
    return {}


def prompt_split(tokens: int, stops: tuple[int, ...], room: int | None = None) -> list[int]:
    """The chunks a prompt of *tokens* is computed in when the engine stops at each of
    *stops* tokens before its end (``StepRebuild.prompt_stops``) and a step has *room*
    prompt tokens (``StepRebuild.prompt_budget`` less the step's decodes; None: no
    limit), first chunk first: the llamacpp scheduler's own rule
    (:func:`~lyra_simpy.policies.llamacpp.prompt_chunk`)."""
    chunks = []
    while tokens > 0:
        chunks.append(prompt_chunk(tokens, room or tokens, stops))
        tokens -= chunks[-1]
    return chunks


@dataclass(frozen=True)
class Steps:
    """Rebuilt steps as columns (one entry per step); the row-like columns make them
    readable by the fit report like profile rows."""

    latency_ms: Floats
    steps: Ints
    """Engine steps inside the rebuilt one: 1, or more when a prompt's earlier chunks
    ran in steps that emitted no token (``StepRebuild.prompt_stops``)."""
    decode_seqs: Ints
    decode_context_tokens: Ints
    prefill_seqs: Ints
    prefill_tokens: Ints
    prefill_attention_tokens: Ints
    prefill_attention_cells: Ints
    """Σ over a step's prompt tokens of the KV cells each attends over
    (``StepRebuild.llamacpp``; 0 without it)."""
    passes: Ints
    """Forward passes of the engine steps in the rebuilt one (``StepRebuild.llamacpp``;
    one per engine step without it)."""
    checkpoints: Ints
    """Context checkpoints copied in it (``StepRebuild.llamacpp``; 0 without it)."""
    run: npt.NDArray[np.str_]
    """The run folder each step came from."""
    dropped: int = 0
    """Steps found but left out: begun idle under ``idle_start: drop``, or the first of
    a run without a prompt in it (no known start)."""
    gap_ms: tuple[float, ...] = ()
    """The gap each run's steps were cut at (``StepRebuild.gap_ms``, resolved)."""
    approximated: int = 0
    """Requests taken at one token a chunk (``StreamedRequest.approximate``)."""
    llamacpp: bool = False
    """Rebuilt as llama-server runs (``StepRebuild.llamacpp``): attention in cells, and
    the pass and checkpoint terms."""

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
        """One column per term of :data:`~lyra_simpy.calibration.fit.TERMS` (and, rebuilt
        as llama-server runs, of ``ALL_TERMS``: extra passes, checkpoints)."""
        columns = [
            self.steps,
            self.decode_seqs,
            self.decode_context_tokens,
            self.prefill_tokens,
            self.prefill_attention_cells if self.llamacpp else self.prefill_attention_tokens,
        ]
        if self.llamacpp:
            columns += [self.passes - self.steps, self.checkpoints]
        return np.column_stack([c.astype(np.float64) for c in columns])


_COLUMNS = tuple(
    k
    for k in Steps.__dataclass_fields__
    if k not in ("dropped", "gap_ms", "approximated", "llamacpp")
)


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


def rebuild_steps(requests: list[StreamedRequest], cfg: StepRebuild, run: str = "") -> Steps:
    """The engine steps of one run (module docstring)."""
    events = sorted((t, r, j) for r, req in enumerate(requests) for j, t in enumerate(req.chunk_s))
    clusters: list[list[tuple[float, int, int]]] = []
    members: set[int] = set()
    last = -np.inf
    gap_s = cfg.gap_s(requests)
    for t, r, j in events:
        if not clusters or t - last > gap_s or r in members:
            clusters.append([])
            members = set()
        clusters[-1].append((t, r, j))
        members.add(r)
        last = t
    ends = [float(np.median([t for t, _, _ in c])) for c in clusters]
    n = len(clusters)
    hidden, pre, new, att, ctx = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    dec = [sum(1 for _, _, j in c if j) for c in clusters]  # a chunk after the first
    held = [0] * n  # decoders' KV cells before each step (StepRebuild.llamacpp)
    decoders: list[list[int]] = [[] for _ in range(n)]
    # the prompt chunks (request, tokens before, tokens) of each engine step, by rebuilt
    # step and engine step: a chunk hidden inside step k ran in an engine step before k's
    chunks_at: list[dict[int, list[tuple[int, int, int]]]] = [{} for _ in range(n)]
    sent = [-np.inf] * n
    # tokens each request had received before each of its chunks (once, not per chunk)
    before = [list(itertools.accumulate(r.chunk_tokens, initial=0)) for r in requests]
    budget = cfg.prompt_budget
    for k, cluster in enumerate(clusters):
        for _, r, j in cluster:
            req = requests[r]
            if j:
                ctx[k] += req.input_tokens + before[r][j]
                held[k] += req.input_tokens + before[r][j] - 1  # (the step adds one)
                decoders[k].append(r)
                continue
            done = req.cached_tokens
            room = None if budget is None else max(1, budget - dec[k])
            new_tokens = req.input_tokens - req.cached_tokens
            chunks = prompt_split(new_tokens, cfg.prompt_stops, room) or [0]
            at = k - (len(chunks) - 1)  # the step each chunk ran in, earliest first
            inside = 0
            for size in chunks:
                # a step begun before this request arrived cannot hold its chunk, unless
                # engine steps were hidden inside it (its last one may have begun after
                # the arrival: a prompt that arrives while another's first chunks run
                # joins that prompt's last chunk); otherwise the chunk ran in a step
                # hidden inside the first token's (no token of its own; prompts that
                # arrived together share it)
                place = k
                if at >= 0 and (
                    (at >= 1 and ends[at - 1] >= req.arrival_s)
                    or (at < k and hidden[at] and ends[at] > req.arrival_s)
                ):
                    place = at
                if place == k and at < k:
                    inside += 1
                pre[place] += 1
                new[place] += size
                chunks_at[place].setdefault(min(at, place), []).append((r, done, size))
                done += size
                att[place] += size * done
                if place == k:
                    sent[k] = max(sent[k], req.arrival_s)
                at += 1
            hidden[k] = max(hidden[k], inside)
    layout = cfg.llamacpp
    slots = replay_slots(requests, layout.n_parallel) if layout is not None else []
    cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
    prev_end: float | None = None
    dropped = 0
    for k in range(n):
        idle = prev_end is None or sent[k] > prev_end
        start = sent[k] if idle or prev_end is None else prev_end
        end = prev_end = ends[k]
        if (idle and cfg.idle_start == "drop") or not np.isfinite(start) or not end > start:
            dropped += 1  # (a first step without a prompt in it has no known start)
            continue
        cols["latency_ms"].append((end - start) * 1000.0)
        cols["steps"].append(1 + hidden[k])
        cols["decode_seqs"].append(dec[k])
        cols["decode_context_tokens"].append(ctx[k])
        cols["prefill_seqs"].append(pre[k])
        cols["prefill_tokens"].append(new[k])
        cols["prefill_attention_tokens"].append(att[k])
        cells, passes_k, checkpoints = 0, 1 + hidden[k], 0
        if layout is not None:
            cells, passes_k, checkpoints = _llamacpp_step(
                layout, bool(cfg.prompt_stops), requests, slots, k, decoders[k], held[k],
                chunks_at[k],
            )  # fmt: skip
        cols["prefill_attention_cells"].append(cells)
        cols["passes"].append(passes_k)
        cols["checkpoints"].append(checkpoints)
        cols["run"].append(run)
    ints = {
        k: np.asarray(cols[k], dtype=np.int64) for k in _COLUMNS if k not in ("latency_ms", "run")
    }
    return Steps(
        latency_ms=np.asarray(cols["latency_ms"], dtype=np.float64),
        run=np.asarray(cols["run"], dtype=np.str_),
        dropped=dropped,
        gap_ms=(gap_s * 1000.0,),
        approximated=sum(r.approximate for r in requests),
        llamacpp=cfg.llamacpp is not None,
        **ints,
    )


def replay_slots(requests: list[StreamedRequest], n_parallel: int) -> list[int]:
    """The slot each request of a run sat in, replaying llama-server's choice on the
    streams (``StepRebuild.llamacpp``): a request sent takes the idle slot released
    longest ago (``get_available_slot``'s LRU, as
    :meth:`~lyra_simpy.policies.llamacpp.LlamaCppServer.free_slot` has it: on a tie the
    highest id), or waits in order of sending for the next slot released; a slot is
    released at its request's last token."""
    finish = [req.chunk_s[-1] for req in requests]
    slot_of = [-1] * len(requests)
    busy: list[int | None] = [None] * n_parallel
    last_used = [-1.0] * n_parallel
    waiting: deque[int] = deque()
    releases: list[tuple[float, int]] = []  # (when, slot), a heap

    def assign() -> None:
        while waiting:
            idle = [i for i in range(n_parallel) if busy[i] is None]
            if not idle:
                return
            slot = min(idle, key=lambda i: (last_used[i], -i))
            r = waiting.popleft()
            busy[slot], slot_of[r] = r, slot
            heapq.heappush(releases, (finish[r], slot))

    def release_until(t: float) -> None:
        while releases and releases[0][0] <= t:
            when, slot = heapq.heappop(releases)
            busy[slot], last_used[slot] = None, when
            assign()

    for r in sorted(range(len(requests)), key=lambda r: requests[r].arrival_s):
        release_until(requests[r].arrival_s)
        waiting.append(r)
        assign()
    release_until(np.inf)
    return slot_of


def _llamacpp_step(
    layout: LlamaCppLayout,
    stops: bool,
    requests: list[StreamedRequest],
    slots: list[int],
    k: int,
    decoders: list[int],
    held: int,
    chunks_at: dict[int, list[tuple[int, int, int]]],
) -> tuple[int, int, int]:
    """(cells, passes, checkpoints) of rebuilt step *k* (``StepRebuild.llamacpp``): its
    own engine step's — its *decoders* in slot order, then its prompt chunks (request,
    tokens before, tokens) in slot order, the buffer holding *held* decoder cells and
    each prompt's earlier tokens — and those of the engine steps hidden in it (their
    prompts alone)."""
    from lyra_simpy.policies.ubatch import passes

    cells = n_passes = checkpoints = 0
    for sub in sorted({*chunks_at, k}):
        own = sub == k
        chunks = sorted(chunks_at.get(sub, []), key=lambda c: slots[c[0]])
        decoding = sorted(slots[r] for r in decoders) if own else []
        segments = [(s, 1) for s in decoding] + [(slots[r], size) for r, _, size in chunks]
        if segments:
            n_passes += passes(
                segments, layout.batch_tokens, layout.ubatch_tokens, layout.kv_unified
            )
        if chunks:
            buffer = (held if own else 0) + sum(b for _, b, _ in chunks)
            pieces = [(b, size) for _, b, size in chunks]
            cells += step_attention_cells(layout, len(decoding), pieces, buffer)
        if stops:  # the engine model's rule (LlamaCppServer.plan)
            checkpoints += sum(
                1
                for r, b, size in chunks
                if b and requests[r].input_tokens - b - size < layout.ubatch_tokens
            )
    return cells, max(n_passes, 1), checkpoints


def steps_of_runs(folders: list[Path], cfg: StepRebuild) -> Steps:
    """The rebuilt steps of every run in *folders*, run after run."""
    parts = [rebuild_steps(read_run(f), cfg, str(f)) for f in folders]
    return Steps(
        **{name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS},
        dropped=sum(p.dropped for p in parts),
        gap_ms=tuple(g for p in parts for g in p.gap_ms),
        approximated=sum(p.approximated for p in parts),
        llamacpp=cfg.llamacpp is not None,
    )
