"""Engine steps rebuilt from the token streams of replayed runs (``calibrate --from-runs``).

A user of a remote endpoint sees no engine step, only when each request's tokens
arrive. A replay (:mod:`~lyra_simpy.live.replay`) keeps those times in ``tokens.jsonl``
beside ``requests.jsonl``. An engine emits one token to every sequence it decoded and a
first token to every sequence whose prompt it finished, all at the end of one step, so
the tokens that reach the client at (nearly) the same instant belong to one step:

1. **Cluster.** Every token-carrying chunk of every request, sorted by time; a new step
   starts where the gap to the previous chunk exceeds ``StepRebuild.gap_ms`` (by default
   half the shortest step the run's streams show), or where a
   request would get a second chunk in the same step (one chunk per request per step),
   or, with ``StepRebuild.prompts_alone``, where first tokens give way to decode tokens
   or back.
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
   step when no step in between emitted a token. With ``StepRebuild.prompts_alone``
   (SGLang's prefill-only steps) the chunks ran back to back before the first token,
   hidden inside its step, the first one possibly at the end of the prompt-only step
   before (:func:`alone_chunks`). Its *j*-th chunk (j ≥ 1) is a decode
   reading ``input_tokens + tokens before the chunk`` context tokens (the engine's KV
   length as :class:`~lyra_simpy.engine.request.Request` counts it).
4. **Duration** = end − start, where a step starts when the previous step ended, or —
   when a request prefilled in it was sent after that (the engine was idle) — when the
   last such request was sent (of those with the most engine steps in it: a prompt that
   joined the last of several hidden engine steps does not count; ``idle_start:
   arrival``; ``drop`` leaves such steps out, since their time includes the request's
   trip to the server).

Each rebuilt step becomes one row of the fit, with the terms of
:mod:`~lyra_simpy.calibration.fit` (a step with *d* decodes and *p* prompts: ``d`` decode
sequences, Σ context, Σ new prompt tokens, Σ new × (cached + new), or with
``StepRebuild.llamacpp`` the KV cells the prompt tokens attend over). Where this breaks is
in docs/calibration.md §7 (overlapping runs, network jitter, chunked prefills whose first
chunks emit no token, speculative decoding's several tokens per chunk).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, PositiveFloat, PositiveInt

from lyra_simpy.calibration.llamacpp_runs import (
    CellReplay,
    Chunk,
    LlamaCppLayout,
    decode_pass_rows,
    replay_slots,
    step_terms,
)
from lyra_simpy.calibration.steps import COLUMNS, Steps, join_steps
from lyra_simpy.calibration.streams import StreamedRequest, read_run
from lyra_simpy.config import Closed
from lyra_simpy.engine.kv import blocks_for
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
    sent_together_ms: PositiveFloat = 5.0
    """Requests sent within this of one another, before any of them had its first token,
    reach the server's queue in an order the client cannot see; the llama.cpp slot
    replay (:func:`~lyra_simpy.calibration.llamacpp_runs.replay_slots`) takes them in the
    order their first tokens show. The closed loops' clients send a wave within ~3 ms on
    the matrix's 2-core host; against the server's own log (``llamacpp_prompt_shapes.py
    --slots``, all six points) 5 ms puts 2 759 of 2 880 requests in the server's slot (up
    to the mirror), 2 ms 2 722, 20 ms 2 709, without it (item 58) 2 330:
    ``docs/VALIDATION-llamacpp.md`` item 59."""
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

    prompts_alone: bool = False
    """An engine whose steps compute prompts *or* decode, never both: SGLang's
    prefill-first batches (``Scheduler.get_next_batch_to_run``, without
    ``--enable-mixed-chunk``; the engine model's
    :mod:`~lyra_simpy.policies.prefill_first`). Then a step's first tokens and its
    decode tokens cannot be one step (a change of kind in the token times starts a new
    one), and with ``prompt_budget`` (``--chunked-prefill-size``) a prompt's chunks run
    in prefill-only steps back to back, as SGLang's ``PrefillAdder`` continues the
    chunked request first and admits nothing beside it: its middle chunks emit no token
    and are hidden inside its first token's step, and its first chunk is there too,
    unless the step before only computed prompts, began after the request arrived and
    left room in the budget (less the pages its prompts took): a new request chunked at
    the end of that batch. A first chunk is a whole number of ``page_tokens`` pages;
    the decodes do not take from the budget. False (default): prompts run beside
    decodes, as vLLM and llama.cpp run them."""
    page_tokens: PositiveInt = 1
    """Tokens a KV page holds: a prompt longer than a step's room starts with whole
    pages, as SGLang cuts it (``--page-size``, 1 by default; the engine model pages by
    ``kv_cache.block_size``). 1 (default): any number of tokens, as vLLM and llama.cpp."""

    llamacpp: LlamaCppLayout | None = None
    """Rebuild the steps as ``llama-server`` runs them, in the units the ``llamacpp``
    engine model charges (None, the default: none of this):

    - *cells*: each step's prompt attention in the KV cells its passes attend over
      (:func:`~lyra_simpy.policies.llamacpp_attention.step_attention`: with ``-kvu`` a prompt
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
      slots as the engine model counts them (:func:`~lyra_simpy.policies.ubatch.pass_counts`:
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


def rebuild_for(scheduler: Any, block_size: int = 1) -> dict[str, Any]:
    """The :class:`StepRebuild` fields a scenario's engine implies: llama.cpp's checkpoint
    stops, ``n_batch`` and KV layout; a chunked-prefill scheduler's token budget (vLLM);
    SGLang's chunk budget in pages of the scenario's *block_size*, in prefill-only steps
    (with ``enable_mixed_chunk``: beside the decodes, placed as vLLM's); nothing for an
    engine that computes every prompt in one step."""
    from lyra_simpy.policies.chunked import ChunkedPrefillConfig
    from lyra_simpy.policies.llamacpp_config import LlamaCppConfig
    from lyra_simpy.policies.prefill_first import PrefillFirstConfig

    if isinstance(scheduler, LlamaCppConfig):
        layout = LlamaCppLayout(
            n_parallel=scheduler.n_parallel,
            batch_tokens=scheduler.batch_tokens,
            kv_unified=scheduler.kv_unified,
            ubatch_tokens=scheduler.ubatch_tokens,
            stream_cells=scheduler.stream_cells,
            kv_layout=scheduler.kv_layout,
            swa_window=scheduler.swa_window if scheduler.sliding_window else 0,
            swa_layer_share=scheduler.swa_layer_share,
            clears_idle_slots=scheduler.clears_idle_slots,
        )
        return {
            "prompt_stops": scheduler.checkpoint_stops,
            "prompt_budget": scheduler.batch_tokens,
            "llamacpp": layout,
        }
    if isinstance(scheduler, ChunkedPrefillConfig):
        return {"prompt_budget": scheduler.alone_chunk_tokens}
    if isinstance(scheduler, PrefillFirstConfig):
        budget = {"prompt_budget": scheduler.chunked_prefill_size, "page_tokens": block_size}
        if scheduler.enable_mixed_chunk:
            return budget
        return {**budget, "prompts_alone": True}
    return {}


def prompt_split(
    tokens: int, stops: tuple[int, ...], room: int | None = None, page: int = 1
) -> list[int]:
    """The chunks a prompt of *tokens* is computed in when the engine stops at each of
    *stops* tokens before its end (``StepRebuild.prompt_stops``) and a step has *room*
    prompt tokens (``StepRebuild.prompt_budget`` less the step's decodes; None: no
    limit), first chunk first: the llamacpp scheduler's own rule
    (:func:`~lyra_simpy.policies.llamacpp.prompt_chunk`). With pages of *page* tokens
    a prompt that does not fit the room in whole pages starts with as many whole pages
    as fit (SGLang's ``PrefillAdder``)."""
    chunks = []
    if room is not None and page > 1 and blocks_for(tokens, page) * page > room >= page:
        chunks.append(room // page * page)
        tokens -= chunks[0]
    while tokens > 0:
        chunks.append(prompt_chunk(tokens, room or tokens, stops))
        tokens -= chunks[-1]
    return chunks


@dataclass(frozen=True)
class StepsSoFar:
    """What :func:`rebuild_steps` knows of each rebuilt step while it places prompts
    (one entry per step; the lists are its own, filled as it goes)."""

    ends: list[float]
    """When each step ended."""
    dec: list[int]
    """Decode chunks in each step."""
    hidden: list[int]
    """Engine steps each step hides."""
    sent: list[float]
    """When the engine could have begun each step, were it idle."""
    new: list[int]
    """Prompt tokens computed in each step."""
    last_new: list[int]
    """Prompt tokens computed in each step's last engine step."""
    taken: list[int]
    """The budget those took, in whole pages."""


def beside_chunks(
    cfg: StepRebuild, req: StreamedRequest, tokens: int, k: int, so_far: StepsSoFar
) -> tuple[list[tuple[int, int, int]], int]:
    """Where the *tokens* new prompt tokens of *req*, whose first token came in step *k*,
    were computed by an engine that runs prompts beside decodes (vLLM, llama.cpp): the
    (rebuilt step, tokens, engine step) chunks, first chunk first, and how many engine
    steps of its own step *k* hides. Its last chunk is in step *k*, each earlier one in
    the step before, unless that step began before the request arrived — and hid no
    engine steps of its own that ended after the arrival (a prompt arriving while
    another's first chunks run joins that prompt's last chunk) — then it ran in a step
    hidden inside step *k* (no token of its own; prompts that arrived together share it).
    """
    ends, hidden = so_far.ends, so_far.hidden
    room = None if cfg.prompt_budget is None else max(1, cfg.prompt_budget - so_far.dec[k])
    chunks = prompt_split(tokens, cfg.prompt_stops, room, cfg.page_tokens) or [0]
    at = k - (len(chunks) - 1)  # the step each chunk ran in, earliest first
    placed, inside = [], 0
    for size in chunks:
        place = k
        if at >= 0 and (
            (at >= 1 and ends[at - 1] >= req.arrival_s)
            or (at < k and hidden[at] and ends[at] > req.arrival_s)
        ):
            place = at
        if place == k and at < k:
            inside += 1
        placed.append((place, size, min(at, place)))
        at += 1
    return placed, inside


def alone_chunks(
    cfg: StepRebuild, req: StreamedRequest, tokens: int, k: int, so_far: StepsSoFar
) -> tuple[list[tuple[int, int, int]], int]:
    """Where the *tokens* new prompt tokens of *req*, whose first token came in step *k*,
    were computed by an engine that runs prompts alone (``StepRebuild.prompts_alone``):
    the (rebuilt step, tokens, engine step) chunks as :func:`beside_chunks` gives them,
    and how many engine steps of its own step *k* hides. The engine model's rule
    (:mod:`~lyra_simpy.policies.prefill_first`): a new prompt longer than the budget
    left is cut to whole pages, and continues with up to the budget in each following
    step, nothing else beside it."""
    budget, page = cfg.prompt_budget, cfg.page_tokens
    if budget is None or tokens <= 0:
        return [(k, tokens, k)], 0
    paged = blocks_for(tokens, page) * page
    first = None
    s = so_far
    if k >= 1 and s.dec[k - 1] == 0:  # the step before computed prompts only
        start = max(s.ends[k - 2] if k >= 2 else -np.inf, s.sent[k - 1])
        if s.hidden[k - 1] and np.isfinite(start):
            # its last engine step began after those it hides: in proportion to the
            # prompt tokens it computed (a prompt-only step's cost is mostly theirs)
            share = s.last_new[k - 1] / max(1, s.new[k - 1])
            start = s.ends[k - 1] - (s.ends[k - 1] - start) * share
        left = budget - s.taken[k - 1]
        if req.arrival_s <= start and paged > left >= page:
            first = (k - 1, left // page * page)
    if first is None and paged > budget:
        first = (k, max(1, budget // page * page))
    if first is None:
        return [(k, tokens, k)], 0
    rest = tokens - first[1]
    chunks = [first] + [(k, min(budget, rest - i)) for i in range(0, rest, budget)]
    hides = len(chunks) - 1 - (first[0] < k)  # the chunks before its last, in step k
    return [(place, size, place) for place, size in chunks], hides


def rebuild_steps(requests: list[StreamedRequest], cfg: StepRebuild, run: str = "") -> Steps:
    """The engine steps of one run (module docstring)."""
    events = sorted((t, r, j) for r, req in enumerate(requests) for j, t in enumerate(req.chunk_s))
    clusters: list[list[tuple[float, int, int]]] = []
    members: set[int] = set()
    last = -np.inf
    gap_s = cfg.gap_s(requests)
    kind = False  # the current step's chunks are first tokens (prompts_alone)
    for t, r, j in events:
        if (
            not clusters
            or t - last > gap_s
            or r in members
            or (cfg.prompts_alone and (j == 0) != kind)
        ):
            clusters.append([])
            members = set()
            kind = j == 0
        clusters[-1].append((t, r, j))
        members.add(r)
        last = t
    ends = [float(np.median([t for t, _, _ in c])) for c in clusters]
    n = len(clusters)
    hidden, pre, new, att, ctx = [0] * n, [0] * n, [0] * n, [0] * n, [0] * n
    dec = [sum(1 for _, _, j in c if j) for c in clusters]  # a chunk after the first
    decoders: list[list[int]] = [[] for _ in range(n)]
    positions: list[dict[int, int]] = [{} for _ in range(n)]  # a decoder's token position
    last_step = [0] * len(requests)  # the step of each request's last token
    for k, cluster in enumerate(clusters):
        for _, r, _ in cluster:
            last_step[r] = k
    # the prompt chunks (request, tokens before, tokens) of each engine step, by rebuilt
    # step and engine step: a chunk hidden inside step k ran in an engine step before k's
    chunks_at: list[dict[int, list[Chunk]]] = [{} for _ in range(n)]
    # when the engine could start each step, were it idle: when the last of the prompts
    # computed in its first engine step was sent (the prompts with the most engine steps
    # in it; one that joined a later engine step, arriving meanwhile, does not count)
    sent, depth = [-np.inf] * n, [0] * n

    def began(k: int, steps_in_k: int, arrival_s: float) -> None:
        if steps_in_k > depth[k]:
            depth[k], sent[k] = steps_in_k, arrival_s
        elif steps_in_k == depth[k]:
            sent[k] = max(sent[k], arrival_s)

    # tokens each request had received before each of its chunks (once, not per chunk)
    before = [list(itertools.accumulate(r.chunk_tokens, initial=0)) for r in requests]
    # the prompt tokens of each step's last engine step, and the budget they took in pages
    last_new, taken = [0] * n, [0] * n
    so_far = StepsSoFar(ends, dec, hidden, sent, new, last_new, taken)
    for k, cluster in enumerate(clusters):
        for _, r, j in cluster:
            req = requests[r]
            if j:
                ctx[k] += req.input_tokens + before[r][j]
                decoders[k].append(r)
                positions[k][r] = req.input_tokens + before[r][j] - 1
                continue
            done = req.cached_tokens
            tokens = req.input_tokens - req.cached_tokens
            if cfg.prompts_alone:
                placed, inside = alone_chunks(cfg, req, tokens, k, so_far)
            else:
                placed, inside = beside_chunks(cfg, req, tokens, k, so_far)
            hidden[k] = max(hidden[k], inside)
            for i, (place, size, engine_step) in enumerate(placed):
                pre[place] += 1
                new[place] += size
                chunks_at[place].setdefault(engine_step, []).append((r, done, size))
                if place < k or i == len(placed) - 1:  # in its step's last engine step
                    taken[place] += blocks_for(size, cfg.page_tokens) * cfg.page_tokens
                    last_new[place] += size
                done += size
                att[place] += size * done
            began(k, inside + 1, req.arrival_s)
    layout = cfg.llamacpp
    slots = (
        replay_slots(requests, layout.n_parallel, cfg.sent_together_ms / 1000.0)
        if layout is not None
        else []
    )
    terms: list[tuple[int, int, int, int, int]] = []
    if layout is not None:
        # every step, dropped ones too: with the placed layout each one moves the cells
        replay = CellReplay(layout, slots, last_step) if layout.placed else None
        stops = bool(cfg.prompt_stops)
        for k in range(n):
            # the decoders' KV cells before the step: their contexts less the token it adds
            held = ctx[k] - dec[k]
            got = step_terms(layout, stops, requests, slots, k, decoders[k], held, chunks_at[k],
                             replay, positions[k])  # fmt: skip
            terms.append(got)
    cols: dict[str, list[Any]] = {k: [] for k in COLUMNS}
    width = layout.n_parallel if layout is not None else 0  # (Steps.pass_rows)
    prev_end: float | None = None
    dropped = 0
    arrivals = np.sort([req.arrival_s for req in requests])
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
        cells, computed, passes_k, checkpoints, outputs = 0, 0, 1 + hidden[k], 0, 1
        if layout is not None:
            cells, computed, passes_k, checkpoints, outputs = terms[k]
        cols["prefill_attention_cells"].append(cells)
        cols["prefill_computed_cells"].append(computed)
        cols["passes"].append(passes_k)
        cols["checkpoints"].append(checkpoints)
        cols["output_passes"].append(outputs)
        rows: tuple[int, ...] = ()
        if layout is not None and passes_k > 1 and not pre[k] and not hidden[k]:
            rows = decode_pass_rows(layout, slots, decoders[k])
        cols["pass_rows"].append(rows + (0,) * (width - len(rows)))
        cols["arrivals"].append(
            int(np.searchsorted(arrivals, end) - np.searchsorted(arrivals, start))
        )
        cols["run"].append(run)
        cols["end_s"].append(end)
    ints = {
        k: np.asarray(cols[k], dtype=np.int64)
        for k in COLUMNS
        if k not in ("latency_ms", "run", "end_s")
    }
    ints["pass_rows"] = ints["pass_rows"].reshape(len(cols["latency_ms"]), width)
    return Steps(
        latency_ms=np.asarray(cols["latency_ms"], dtype=np.float64),
        run=np.asarray(cols["run"], dtype=np.str_),
        end_s=np.asarray(cols["end_s"], dtype=np.float64),
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
