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

import itertools
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, PositiveFloat, PositiveInt

from lyra_simpy.calibration.llamacpp_runs import Chunk, LlamaCppLayout, replay_slots, step_terms
from lyra_simpy.calibration.steps import COLUMNS, Steps, join_steps
from lyra_simpy.calibration.streams import StreamedRequest, read_run
from lyra_simpy.config import Closed
from lyra_simpy.policies.llamacpp import prompt_chunk


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
    decoders: list[list[int]] = [[] for _ in range(n)]
    # the prompt chunks (request, tokens before, tokens) of each engine step, by rebuilt
    # step and engine step: a chunk hidden inside step k ran in an engine step before k's
    chunks_at: list[dict[int, list[Chunk]]] = [{} for _ in range(n)]
    sent = [-np.inf] * n
    # tokens each request had received before each of its chunks (once, not per chunk)
    before = [list(itertools.accumulate(r.chunk_tokens, initial=0)) for r in requests]
    budget = cfg.prompt_budget
    for k, cluster in enumerate(clusters):
        for _, r, j in cluster:
            req = requests[r]
            if j:
                ctx[k] += req.input_tokens + before[r][j]
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
    cols: dict[str, list[Any]] = {k: [] for k in COLUMNS}
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
            # the decoders' KV cells before the step: their contexts less the token it adds
            held = ctx[k] - dec[k]
            cells, passes_k, checkpoints = step_terms(
                layout, bool(cfg.prompt_stops), requests, slots, k, decoders[k], held,
                chunks_at[k],
            )  # fmt: skip
        cols["prefill_attention_cells"].append(cells)
        cols["passes"].append(passes_k)
        cols["checkpoints"].append(checkpoints)
        cols["run"].append(run)
    ints = {
        k: np.asarray(cols[k], dtype=np.int64) for k in COLUMNS if k not in ("latency_ms", "run")
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


def steps_of_runs(folders: list[Path], cfg: StepRebuild) -> Steps:
    """The rebuilt steps of every run in *folders*, run after run."""
    parts = [rebuild_steps(read_run(f), cfg, str(f)) for f in folders]
    return join_steps(parts, cfg.llamacpp is not None)
