"""Measure a live engine's step costs and write a profile CSV (DESIGN §4) with metadata.

Three kinds of measurement, each taken ``repeats`` times (the median is kept). The
repeats are rounds: the whole grid is walked once a round, so a row's measurements lie
minutes apart and a slow spell of a shared host moves one of them, not all.

* ``prefill``: one request with a prompt of *P* tokens and one output token, alone on the
  server. Latency: the engine's own time when it tells it — llama.cpp's
  ``timings.prompt_ms``; vLLM's ``/metrics`` histogram ``vllm:request_prefill_time_seconds``
  (first scheduling to first token), read before and after the request — else the
  client's TTFT (which adds the request path: HTTP, the API server, the stream). Where the
  engine timed it, the median of the client's TTFT less the engine's time is written to
  the metadata as ``request_path_ms``: set it as ``workload.request_path_ms`` for the
  simulated TTFT and E2E to be what a client reads.
* ``decode``: *B* requests sent together, each a prompt of *L* tokens and
  ``decode_steps`` output tokens; once their prompts are in, the *B* sequences decode in
  lock-step, one token each per engine step, so a step is the gap between two streamed
  chunks. Latency (``grid.decode_step``): by default the median inter-chunk gap over
  all *B* streams (client-side: robust to the steps at the start that also carry the
  others' prompts, which a mean of the engine's ``predicted_per_token_ms`` folds in;
  that mean is kept in the extra column ``engine_ms``, and to a slow spell inside the
  probe); or the mean step of the window in which all *B* decode, after the last prompt
  is in. Both are kept either way, in the extra columns ``median_gap_ms`` and
  ``mean_step_ms``. Context: *L* + half the output.
* ``mixed``: *B* requests decoding (prompt ``mixed_context``, or each one of its list),
  then one probe request with a prompt of *P* tokens and one output token; the engine
  puts the probe's prompt into the same step as the *B* decodes (llama.cpp
  ``update_slots``: sampled tokens of decoding slots first, then prompt tokens up to
  ``n_batch``). Latency: the probe's
  engine time as for ``prefill``, else its client TTFT. Against llama.cpp (by default,
  ``grid.mixed_timing``) one row per engine step the prompt ran in instead, each timed
  by the gap its decoders' streams show around that step, its ``input_tokens`` the
  prompt tokens computed in it (extra columns ``prompt_tokens`` and ``prompt_step``:
  the whole prompt, and which of its steps).

With ``grid.speed_reference`` a lone decode request is timed before every measurement:
the metadata gets the typical one (the speed the profile was taken at), every
measurement beside its reference goes to ``x.speed.csv`` in the order taken (whether the
reference tracks the measurement can be read from the profile itself:
``validation/speed_reference.py``), and with ``scale`` each measurement is scaled by the
typical reference over its own before the rounds' median is taken, so that the rows read
as the host at its typical speed (:class:`~lyra_simpy.live.profile_grid.ProfileGrid`
says when that holds); the unscaled median and the row's speed factor are kept
(``raw_latency_ms``, ``speed_factor``).

With ``grid.wander_s`` the grid is followed by that long of lock-step decode streams
(``grid.wander_batch`` decoders), every decode step of them a row of ``x.wander.csv``
(the contract's columns, llama.cpp's count columns, and ``end_s``: when it ended, s from
the probe's start) and the metadata's ``wander_probe``; ``lyra-simpy calibrate`` reads the
host's drift over seconds from it (:func:`~lyra_simpy.calibration.fit.with_profile_wander`),
which rows that are medians of short probes cannot show.

Against llama.cpp with its prompt cache in RAM (``--cache-ram``, on by default) the
grid is followed by the prompt-cache probe (``grid.save_prompt_tokens``): lone prompts
launched with a slot of *N* tokens to save, each a row of ``PROFILE.save.csv`` (*N*, its
TTFT less ``prompt_ms``) and the metadata's ``save_probe`` (``skipped`` where the
endpoint gives no ``prompt_ms``); ``lyra-simpy calibrate`` fits the ms per token saved
(:mod:`~lyra_simpy.calibration.savefit`). With ``grid.save_fill_prompts`` the cache is
then filled to its limit and the probe taken again (``PROFILE.save_full.csv``: the price
into memory the cache held before).

The metadata YAML beside the CSV says engine, version, model, hardware, flags, date and
which timing each phase used (``timing_source``).

**llama.cpp** (the endpoint has ``/props`` ``total_slots`` and ``--flags`` gives its launch
flags, read by :mod:`lyra_simpy.presets.llamacpp`): every probe pins its requests to
slots (the request field ``id_slot``; decoders in slots 0..B−1, a mixed probe in slot B),
so the forward passes of each step are known, and every row gets the extra columns
``steps``, ``passes``, ``checkpoints`` and ``output_passes``
(:data:`~lyra_simpy.calibration.profiles.STEP_COLUMNS`) that
:mod:`~lyra_simpy.policies.llamacpp` says the server runs for it: a prompt split for a
context checkpoint is two steps and a checkpoint (on a model with sliding-window
attention: ``grid.sliding_window``), of which only the second computes logits (the
prompt's last token); a prompt beside the decoders shares a pass with the slot before
it; ``attention_cells``, the KV cells its prompt tokens' passes span (with ``-kvu``,
the decoders' cells too), and ``attention_computed``, the (query row, cell) pairs of
those the flash attention computes (:mod:`~lyra_simpy.live.llamacpp_probes`). Three
probes measure what those mechanics cost:

* ``fragmented_decode_batch``: *B* decoders in every other slot (0, 2, 4, ...): the same
  decode batch as the contiguous one, but *B* forward passes instead of one with per-slot
  KV — the difference is the cost of a pass (``per_extra_pass_ms``; with passes of one
  sequence each, ``decode_pass_gap_ms``); ``split_decode_batch`` (off by default): *B*
  decoders in slots 0..B−2 and B, a pass of B − 1 beside a pass of one;
* prefill rows of ``checkpoint_prompt_tokens`` (default 4 and 8): a prompt of 4 tokens is
  one step, one of 8 is two (4 + 4) with a checkpoint between — beside the other prefill
  rows they separate a step's fixed cost from a checkpoint's (``per_checkpoint_ms``);
* ``prefill_together`` (off by default): *B* prompts of each ``prefill_tokens`` length
  sent at once, a ``prefill`` row of ``batch_size`` *B* timed from the first prompt's
  start to the last one's end (each request's first token less its ``prompt_ms``). With
  ``-kvu`` they share passes: the mask spans every prompt's cells, the flash attention
  computes each one's own — four prompts of 290 tokens cost 13 % less than one of 1 160
  on the same passes (``validation/llamacpp_masked.py``); beside the lone prompts these
  rows let the fit tell the two attention terms apart (``per_prefill_attention_ms`` per
  cell spanned, ``per_computed_attention_ms`` per pair computed; how well, so far:
  ``docs/VALIDATION-llamacpp.md`` item 10).

``lyra-simpy calibrate`` fits those columns with the same relative-error loss as the
rest (``--loss soft_l1`` for the robust one); every row is already a median of
``repeats`` measurements.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from lyra_simpy.calibration.profiles import decode_slots
from lyra_simpy.calibration.savefit import write_saves
from lyra_simpy.calibration.wakefit import WAKE_COLUMNS, WAKE_SUFFIX
from lyra_simpy.errors import LyraError
from lyra_simpy.live.client import (
    Api,
    check_endpoint,
    engine_info,
)
from lyra_simpy.live.llamacpp_probes import (
    COUNT_COLUMNS,
    check_slots,
    fill_size,
    llamacpp_config,
    prompt_steps,
    row_counts,
    save_sizes,
)
from lyra_simpy.live.prober import Prober
from lyra_simpy.live.profile_grid import ProfileGrid, mixed_contexts
from lyra_simpy.live.references import beside_reference, check_beside, speed_reference
from lyra_simpy.machine import cpu_model
from lyra_simpy.metrics.io import atomic_write


def _cpu() -> str:
    """This machine's CPU model and core count (Linux), else the platform's word."""
    model = cpu_model()
    if model is not None:
        return f"{model} ({os.cpu_count()} cores)"
    return f"{platform.processor() or platform.machine()} CPU"


def _metadata(
    props: dict[str, Any],
    url: str,
    api: Api,
    hardware: str | None,
    flags: str,
    sources: dict[str, str],
) -> dict[str, Any]:
    info = engine_info(url, api, props)
    return {
        "engine": info["engine"],
        "version": info["version"],
        "model": Path(str(info["model"])).name,
        "hardware": hardware or _cpu(),
        "tp": 1,
        "date": dt.date.today().isoformat(),
        "flags": flags,
        "server_settings": info["flags"],
        "timing_source": sources,
        "measured_by": "lyra-simpy profile (lyra_simpy.live.profile)",
    }


def profile(
    url: str,
    api: Api,
    grid: ProfileGrid,
    out: Path,
    hardware: str | None = None,
    flags: str = "",
    vocab_size: int | None = None,
) -> tuple[int, str]:
    """Measure *grid* on the engine at *url*; write *out* (CSV) and its ``.yaml``.
    Returns (rows, a word on the timing source). The prompt ids fit the model's
    vocabulary (*vocab_size*, else what the endpoint reports; :mod:`.limits`)."""
    url = url.rstrip("/")
    props = check_endpoint(url)
    seed = grid.prompt_seed if grid.prompt_seed is not None else secrets.randbits(63)
    prober = Prober.for_endpoint(url, api, grid, seed, vocab_size)
    slots = props.get("total_slots")
    if isinstance(slots, int) and grid.mixed_batch and max(grid.mixed_batch) >= slots:
        raise LyraError(
            f"grid.mixed_batch: got {max(grid.mixed_batch)}, must be < the server's "
            f"{slots} slots (the probe needs a slot of its own beside the decoders)"
        )
    llama = llamacpp_config(flags, grid) if isinstance(slots, int) else None
    if llama is not None:
        if llama.n_parallel != slots:
            raise LyraError(
                f"profile --flags: -np {llama.n_parallel} (or its default), but the server "
                f"has {slots} slots: give the flags it was started with"
            )
        check_slots(grid, llama)
    prober.pin = llama is not None
    rows: list[tuple[str, int, int, int, float, float, float, float]] = []
    nan = float("nan")
    counts: list[tuple[int, ...]] = []
    """The :data:`COUNT_COLUMNS` of each row (llama.cpp only)."""

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    extra_prefill = grid.checkpoint_prompt_tokens if llama and llama.checkpoint_stops else []
    if grid.prefill_together and llama is None:
        raise LyraError(
            f"grid.prefill_together: got {grid.prefill_together}, allowed only for "
            "llama.cpp (a server with /props total_slots, and --flags): other engines "
            "do not say when each prompt started"
        )
    if grid.mixed_timing == "steps" and llama is None:
        raise LyraError(
            "grid.mixed_timing: got 'steps', allowed only for llama.cpp (a server with "
            "/props total_slots, and --flags): how many steps a prompt runs in comes from "
            "its engine model; use 'prompt' or 'auto'"
        )
    by_step = llama is not None and grid.mixed_timing != "prompt"
    check_beside(grid)
    together = [b for b in grid.prefill_together if b > 1]
    per_slot = llama is not None and not llama.kv_unified
    fragmented = grid.fragmented_decode_batch if per_slot else []
    split = [b for b in grid.split_decode_batch if b >= 3] if per_slot else []
    decodes = [
        *((b, decode_slots(b, 1)) for b in grid.decode_batch),
        *((b, decode_slots(b, b)) for b in fragmented),
        *((b, decode_slots(b, 2)) for b in split),
    ]
    plan: list[tuple[str, int, int, Any]] = [
        *(("prefill", 1, p, 1) for p in sorted(set(grid.prefill_tokens) | set(extra_prefill))),
        *(("prefill", b, p, 1) for b in together for p in sorted(set(grid.prefill_tokens))),
        *(("decode", b, ctx, slots) for b, slots in decodes for ctx in grid.decode_context),
        *(
            ("mixed", b, p, ctx)
            for ctx in mixed_contexts(grid)
            for b in grid.mixed_batch
            for p in grid.mixed_prompt_tokens
        ),
    ]
    """The rows: (phase, batch, prompt tokens or decode context, the decode rows' slots
    or the mixed rows' decoder prompt)."""
    got: list[list[tuple[float, float, float, float]]] = [[] for _ in plan]
    """Each row's measurements: (latency, the engine's figure or the mixed context, the
    decode probe's median gap and mean step)."""
    step_ms: list[list[list[float]]] = [[] for _ in plan]
    """Each mixed row's measurements, step by step (``by_step``)."""

    def steps_of(b: int, n: int) -> int:
        """Engine steps a mixed probe's prompt of *n* tokens runs in beside *b* decoders
        (0: not timed by step; the count does not depend on the decoders' context)."""
        return len(prompt_steps(llama, 1, n, b, 0)) if by_step and llama else 0

    beside: list[list[float]] = [[] for _ in plan]
    """Each measurement's speed reference (``grid.speed_reference``), ms."""
    beside_refs: list[tuple[int, float]] = []
    """The prompt timed beside decoders through the grid (``grid.speed_reference_beside``):
    (the decoders' prompt tokens, the prompt's steps summed in ms)."""
    pair = grid.speed_reference_beside  # (with the lone reference on: check_beside)
    pair_steps = steps_of(*pair) if pair is not None else 0
    contexts = mixed_contexts(grid)
    wander: list[tuple[float, float, int]] = []
    """The wander probe's decode steps (``grid.wander_s``): (end, s from its start;
    latency, ms; context per sequence)."""
    wander_batch = grid.wander_batch or max(grid.decode_batch)
    wander_context = min(grid.decode_context)

    async def measure_wander() -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < grid.wander_s:
            ends = await prober.lockstep_ends(wander_batch, wander_context, grid.wander_outputs, t0)
            for j in range(1, len(ends)):  # decode step j: j tokens out before it ends
                wander.append((ends[j], (ends[j] - ends[j - 1]) * 1000.0, wander_context + j))

    saves = save_sizes(grid, llama)
    fill = fill_size(grid, llama, saves)
    save_full: list[tuple[int, float]] = []  # the probe again on a full cache (the fill)
    save: list[tuple[int, float]] = []
    """The prompt-cache probe's lone prompts (``grid.save_prompt_tokens``): (tokens its
    launch saved, its TTFT less its prompt_ms in ms)."""
    save_untimed = False
    """The endpoint gave no ``timings.prompt_ms``: the probe was skipped."""
    wake: list[tuple[float, float]] = []
    """The wake probe's prompts (``grid.wake_gaps_s``): (idle before it, s; its time, ms)."""
    wake_tokens = grid.wake_prompt_tokens or min(grid.prefill_tokens)

    async def measure_wake() -> None:
        for _ in range(grid.wake_repeats):
            for _ in range(grid.wake_warmup):  # the engine busy again before the round
                await prober.decode(1, wake_tokens)
            for gap in (0.0, *grid.wake_gaps_s):
                wake.append((gap, await prober.prompt_after(wake_tokens, gap)))

    async def measure() -> None:
        nonlocal save_untimed
        await prober.prefill(8)  # warm-up
        # The grid is walked `repeats` times, each row once a round, so that a row's
        # measurements lie minutes apart: a slow spell of the host (VALIDATION-NOTES;
        # validation/host_noise.py) then moves one of them, which the median drops,
        # where back to back it would move them all.
        for r in range(grid.repeats):
            for k, (phase, b, n, arg) in enumerate(plan):
                at = r * len(plan) + k
                if pair is not None and at % grid.speed_reference_beside_every == 0:
                    ctx = contexts[(at // grid.speed_reference_beside_every) % len(contexts)]
                    lat, _, gaps = await prober.mixed(*pair, ctx, pair_steps)
                    beside_refs.append((ctx, float(sum(gaps)) if pair_steps else lat))
                if grid.speed_reference != "off":
                    gap, _, _ = await prober.decode(1, grid.speed_reference_context)
                    beside[k].append(gap)
                if phase == "prefill" and b > 1:
                    got[k].append((await prober.prefill_together(b, n), nan, nan, nan))
                elif phase == "prefill":
                    got[k].append((await prober.prefill(n), nan, nan, nan))
                elif phase == "decode":
                    gap, mean, engine = await prober.decode(b, n, arg)
                    got[k].append((mean if grid.decode_step == "mean" else gap, engine, gap, mean))
                else:
                    lat, ctx, gaps = await prober.mixed(b, n, arg, steps_of(b, n))
                    got[k].append((lat, float(ctx), nan, nan))
                    step_ms[k].append(gaps)
        if grid.wander_s > 0:
            await measure_wander()
        if saves:
            pairs = await prober.save_probe(saves, grid.save_repeats, min(grid.prefill_tokens))
            save.extend(pairs or [])
            save_untimed = pairs is None
            if fill is not None and pairs:
                await prober.fill_cache(grid.save_fill_prompts, fill)
                again = await prober.save_probe(saves, grid.save_repeats, min(grid.prefill_tokens))
                save_full.extend(again or [])
        if grid.wake_gaps_s:
            await measure_wake()

    asyncio.run(measure())
    speed = speed_reference(grid, beside) if grid.speed_reference != "off" else None
    if speed is not None and pair is not None:
        speed["beside"] = beside_reference(pair, beside_refs, grid.speed_reference_beside_every)
    raw_rows: list[tuple[float, float]] = []
    """Each row's unscaled latency and speed factor (``grid.speed_reference``)."""
    row_of: list[tuple[int, int | None]] = []
    """Each row's plan entry, and for a row of one step of a mixed probe's prompt, which
    step (``by_step``)."""
    for k, ((phase, b, n, arg), values) in enumerate(zip(plan, got, strict=True)):
        factors = [ms / speed["median_ms"] for ms in beside[k]] if speed is not None else []
        if grid.speed_reference == "scale":
            # the timings at the typical speed; a mixed row's context stays
            values = [
                (v[0] / f, v[1] if phase == "mixed" else v[1] / f, v[2] / f, v[3] / f)
                for v, f in zip(values, factors, strict=True)
            ]
        lat, other, gap, mean = (med([v[j] for v in values]) for j in range(4))
        if phase == "prefill":
            rows.append(("prefill", b, n, 0, lat, nan, nan, nan))
        elif phase == "decode":
            rows.append(("decode", b, 0, n + grid.decode_steps // 2, lat, other, gap, mean))
        elif not (by_step and llama):
            rows.append(("mixed", b, n, int(other), lat, nan, nan, nan))
        else:  # one row per step of the prompt, each the median of its rounds
            context = int(other)
            for j, step in enumerate(prompt_steps(llama, 1, n, b, context)):
                times = [g[j] for g in step_ms[k]]
                if speed is not None:
                    raw_rows.append((med(times), med(factors)))
                if grid.speed_reference == "scale":
                    times = [t / f for t, f in zip(times, factors, strict=True)]
                rows.append(("mixed", b, step.tokens, context, med(times), nan, nan, nan))
                row_of.append((k, j))
                counts.append((1, *step[1:]))
            continue
        row_of.append((k, None))
        if speed is not None:
            raw_rows.append((med([v[0] for v in got[k]]), med(factors)))
        if llama is None:
            continue
        _, _, prompt, context, *_ = rows[-1]
        slots = arg if phase == "decode" else None
        counts.append(row_counts(llama, phase, b, prompt, context, slots))
    sources = {
        "prefill": prober.timed_by.get("prefill", "client TTFT"),
        "decode": (
            "client mean step of the lock-step window"
            if grid.decode_step == "mean"
            else "client median inter-chunk gap"
        )
        + " (engine predicted_per_token_ms in engine_ms)",
        "mixed": "client: each step of the probe's prompt, the gap its decoders' streams "
        "show around it"
        if by_step
        else prober.timed_by["mixed"] + " of the probe"
        if "mixed" in prober.timed_by
        else "client TTFT of the probe",
    }

    def write_csv(tmp: Path) -> None:
        head = (
            "phase,batch_size,input_tokens,context_len,latency_ms,engine_ms,median_gap_ms,"
            "mean_step_ms"
        )
        head += "," + ",".join(COUNT_COLUMNS) if counts else ""
        head += ",raw_latency_ms,speed_factor" if raw_rows else ""
        stepped = any(j is not None for _, j in row_of)
        head += ",prompt_tokens,prompt_step" if stepped else ""
        lines = [head]
        for k, (ph, b, i, c, lat, eng, gap, mean) in enumerate(rows):
            extra = ",".join("" if v != v else f"{v:.4f}" for v in (eng, gap, mean))
            line = f"{ph},{b},{i},{c},{lat:.4f},{extra}"
            if counts:
                line += "," + ",".join(map(str, counts[k]))
            if raw_rows:
                line += f",{raw_rows[k][0]:.4f},{raw_rows[k][1]:.4f}"
            if stepped:
                p, j = row_of[k]
                line += f",{plan[p][2]},{j}" if j is not None else ",,"
            lines.append(line)
        tmp.write_text("\n".join(lines) + "\n")

    meta = _metadata(props, url, api, hardware, flags, sources)
    meta["prompt_seed"] = seed
    if prober.mixed_retries:  # (a host whose streams blur the steps: grid.mixed_step_tries)
        meta["mixed_step_retries"] = prober.mixed_retries
    if speed is not None:
        meta["speed_reference"] = speed
    if prober.path_ms:  # the client's TTFT beyond the engine's prompt time, lone prefills
        every = [ms for sizes in prober.path_ms.values() for ms in sizes]
        meta["request_path_ms"] = round(float(statistics.median(every)), 2)
        # by prompt size: whether the path grows with the prompt (sent as JSON, parsed)
        meta["request_path_ms_by_prompt"] = {
            p: round(float(statistics.median(ms)), 2) for p, ms in sorted(prober.path_ms.items())
        }
    atomic_write(out, write_csv)
    if speed is not None:

        def write_pairs(tmp: Path) -> None:
            lines = ["round,row,phase,batch_size,input_tokens,context_len,reference_ms,latency_ms"]
            for r in range(grid.repeats):
                for k, (ph, b, i, c, *_) in enumerate(rows):
                    p, j = row_of[k]
                    ref = beside[p][r]
                    lat = got[p][r][0] if j is None else step_ms[p][r][j]
                    lines.append(f"{r + 1},{k + 1},{ph},{b},{i},{c},{ref:.4f},{lat:.4f}")
            tmp.write_text("\n".join(lines) + "\n")

        atomic_write(out.with_suffix(".speed.csv"), write_pairs)
    if wander:
        meta["wander_probe"] = {
            "batch": wander_batch,
            "context": wander_context,
            "outputs": grid.wander_outputs,
            "seconds": grid.wander_s,
            "steps": len(wander),
        }

        def write_wander(tmp: Path) -> None:
            head = "phase,batch_size,input_tokens,context_len,latency_ms,end_s"
            head += "," + ",".join(COUNT_COLUMNS) if llama is not None else ""
            lines = [head]
            for end, ms, ctx in wander:
                line = f"decode,{wander_batch},0,{ctx},{ms:.4f},{end:.6f}"
                if llama is not None:
                    counts_row = row_counts(llama, "decode", wander_batch, 0, ctx)
                    line += "," + ",".join(map(str, counts_row))
                lines.append(line)
            tmp.write_text("\n".join(lines) + "\n")

        atomic_write(out.with_suffix(".wander.csv"), write_wander)
    if save_untimed:
        meta["save_probe"] = {"skipped": "the endpoint gave no timings.prompt_ms"}
    if save:
        meta["save_probe"] = {"sizes": saves, "prompt_tokens": min(grid.prefill_tokens),
                              "repeats": grid.save_repeats}  # fmt: skip
    if save_full:
        meta["save_probe"]["fill"] = {"prompts": grid.save_fill_prompts, "prompt_tokens": fill}
    write_saves(out, save, save_full)
    if wake:
        meta["wake_probe"] = {
            "prompt_tokens": wake_tokens,
            "gaps_s": [0.0, *grid.wake_gaps_s],
            "repeats": grid.wake_repeats,
            "warmup": grid.wake_warmup,
            "timed_by": prober.timed_by.get("wake", "client TTFT"),
        }

        def write_wake(tmp: Path) -> None:
            lines = [",".join(WAKE_COLUMNS), *(f"{g:g},{ms:.4f}" for g, ms in wake)]
            tmp.write_text("\n".join(lines) + "\n")

        atomic_write(out.with_suffix(WAKE_SUFFIX), write_wake)
    atomic_write(
        out.with_suffix(".yaml"), lambda tmp: tmp.write_text(yaml.safe_dump(meta, sort_keys=False))
    )
    word = "engine" if prober.timed_by else "client"
    return len(rows), word
