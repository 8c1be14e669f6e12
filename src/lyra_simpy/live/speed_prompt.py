"""``lyra-simpy speed --prompt N``: how fast the host runs the steps that carry prompt
tokens now against a profile's, as the ``cost.prompt_speed`` to simulate a load about to
run (:mod:`lyra_simpy.live.speed` reads the decode steps, ``cost.speed``).

A lone prompt of *N* fresh tokens (:func:`prompt_speed`) is timed as ``lyra-simpy
profile`` times its prefill rows; with ``--beside B`` the prompt is timed beside *B*
sequences decoding (:func:`beside_speed`), as the profile takes its mixed rows: the kind
of step a load's prompts run in. On the llama.cpp matrix's 2-core host neither
forecast the runs' prompt steps: the lone prompts strayed as far as the host moved
(docs/VALIDATION-llamacpp.md item 72), the prompts beside decoders scattered less but
kept a bias of their own at each point (item 75); with the full batch's decode reading
they gave the best forecast of the six points' runs, Table 1 181 of 210 (items 77–78).
"""

from __future__ import annotations

import asyncio
import csv
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lyra_simpy.errors import LyraError
from lyra_simpy.live.client import Api
from lyra_simpy.live.speed import (
    SpeedReading,
    _prober,
    _spaced,
    metadata_reference,
    reference_ms,
)

if TYPE_CHECKING:
    from lyra_simpy.live.profile_grid import ProfileGrid


def _lone_prompts(profile_csv: Path) -> tuple[np.ndarray, np.ndarray]:
    """The profile's lone prompts (``prefill`` rows of one sequence, no cached context):
    their tokens and ``latency_ms``."""
    from lyra_simpy.calibration.profiles import read_profile

    prof = read_profile(profile_csv)
    lone = (prof.phase == "prefill") & (prof.batch_size == 1) & (prof.context_len == 0)
    return prof.input_tokens[lone], prof.latency_ms[lone]


def lone_prompt_sizes(profile_csv: Path) -> list[int]:
    """The sizes of the profile's lone prompts, in order (``speed --prompt`` takes one)."""
    return sorted({int(n) for n in _lone_prompts(profile_csv)[0]})


def prompt_row_ms(profile_csv: Path, tokens: int) -> float:
    """The profile's lone prompt of *tokens* fresh tokens: the median of its rows'
    ``latency_ms``."""
    sizes, ms = _lone_prompts(profile_csv)
    found = ms[sizes == tokens]
    if not len(found):
        raise LyraError(
            f"speed --prompt: got {tokens}, {profile_csv} has no lone prompt of {tokens} "
            f"tokens; its prompt sizes: {lone_prompt_sizes(profile_csv)}"
        )
    return float(np.median(found))


def prompt_speed(
    url: str,
    api: Api,
    profile_csv: Path,
    grid: ProfileGrid,
    tokens: int,
    probes: int,
    pause_s: float,
    vocab_size: int | None = None,
    say: Callable[[str], object] = print,
) -> SpeedReading:
    """A lone prompt of *tokens* fresh tokens (one output), *probes* times *pause_s* apart,
    timed as ``lyra-simpy profile`` times its prefill rows
    (:meth:`~lyra_simpy.live.prober.Prober.prefill`: the engine's own prompt time where it
    reports one, llama.cpp's ``timings.prompt_ms``, else the client's TTFT): the median
    over the profile's row for the size (:func:`prompt_row_ms`), the ``cost.prompt_speed``
    to price a load's prompt steps at."""
    row = prompt_row_ms(profile_csv, tokens)
    prober, _ = _prober(url, api, grid, vocab_size)

    async def measure() -> list[float]:
        got: list[float] = []
        async for k in _spaced(probes, pause_s):
            got.append(await prober.prefill(tokens))
            say(f"prompt {k + 1}/{probes}: {got[-1]:.2f} ms")
        return got

    steps = asyncio.run(measure())
    return SpeedReading(steps, row, (tokens,), 1, phase="prompt")


def _mixed_rows(profile_csv: Path) -> tuple[list[tuple[int, int, int, float]], bool]:
    """The profile's mixed rows as (decoders, the prompt's tokens, the decoders' context,
    ``latency_ms``), and whether they are step by step: where the profile has llama.cpp's
    extra columns ``prompt_tokens`` and ``prompt_step`` (``grid.mixed_timing``; a prompt's
    rows share its tokens), else each row is its prompt's whole."""
    from lyra_simpy.calibration.profiles import read_profile

    read_profile(profile_csv)  # (the file checked as calibrate reads it)
    with profile_csv.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["phase"] == "mixed"]
    stepped = bool(rows) and "prompt_tokens" in rows[0]
    col = "prompt_tokens" if stepped else "input_tokens"
    return [(int(r["batch_size"]), int(r[col]), int(r["context_len"]), float(r["latency_ms"]))
            for r in rows if r[col].strip()], stepped  # fmt: skip


def mixed_pairs(profile_csv: Path) -> list[tuple[int, int]]:
    """The (decoders, prompt tokens) pairs the profile has mixed rows of, in order."""
    return sorted({(b, n) for b, n, _, _ in _mixed_rows(profile_csv)[0]})


def mixed_rows_ms(profile_csv: Path, beside: int, tokens: int) -> dict[int, tuple[int, float]]:
    """The profile's mixed rows of a prompt of *tokens* beside *beside* decoders: for each
    decoder context they were taken at (``context_len``), (how many engine steps the
    prompt ran in, 0 for a prompt timed whole; their ``latency_ms`` summed)."""
    rows, stepped = _mixed_rows(profile_csv)
    found: dict[int, list[float]] = {}
    for b, n, ctx, ms in rows:
        if (b, n) == (beside, tokens):
            found.setdefault(ctx, []).append(ms)
    if not found:
        raise LyraError(
            f"speed --prompt --beside: got {tokens} tokens beside {beside}, {profile_csv} has "
            f"no mixed row of it; its (decoders, prompt) pairs: {mixed_pairs(profile_csv)}"
        )
    return {ctx: (len(ms) if stepped else 0, float(sum(ms))) for ctx, ms in found.items()}


def beside_speed(
    url: str,
    api: Api,
    profile_csv: Path,
    grid: ProfileGrid,
    beside: int,
    tokens: int,
    probes: int,
    pause_s: float,
    vocab_size: int | None = None,
    say: Callable[[str], object] = print,
) -> SpeedReading:
    """A prompt of *tokens* fresh tokens beside *beside* sequences decoding, as
    ``lyra-simpy profile`` takes its mixed rows (:meth:`~lyra_simpy.live.prober.Prober.mixed`:
    the decoders' prompt each of *grid*'s ``mixed_context``, against llama.cpp pinned to
    slots 0..beside−1 and the prompt to the next), *probes* rounds *pause_s* apart: the
    median of the prompt's steps summed (read on the decoders' streams, as the profile's
    rows were; for another engine its prompt time) over the profile's rows for it
    (:func:`mixed_rows_ms`, the median over the decoder contexts). The
    ``cost.prompt_speed`` of the steps a load's prompts run in, which beside other
    requests' decodes are the kind of step this one is, where a lone prompt's is not
    (docs/VALIDATION-llamacpp.md item 75). Where the profile timed the same prompt beside
    as many decoders through its grid (:func:`beside_reference`,
    ``grid.speed_reference_beside``) the reading goes against the median of those instead
    of the two rows, each the median of a few probes taken at the same moments (item
    77)."""
    from lyra_simpy.live.profile_grid import mixed_contexts

    rows = mixed_rows_ms(profile_csv, beside, tokens)
    contexts = mixed_contexts(grid)
    ref = [min(rows, key=lambda c: abs(c - ctx)) for ctx in contexts]
    """Each decoder prompt's rows: those taken at the context nearest it (a row's
    ``context_len`` is the decoders' context when the prompt joined: their prompt and the
    few tokens they had made, fewer than the ``2 × decode_steps`` each is sent for)."""
    far = [ctx for ctx, at in zip(contexts, ref, strict=True)
           if not 0 <= at - ctx <= 2 * grid.decode_steps]  # fmt: skip
    if far:
        raise LyraError(
            f"speed --beside: the grid's mixed_context {contexts}, but {profile_csv}'s mixed "
            f"rows of {tokens} tokens beside {beside} were taken with the decoders at "
            f"{sorted(rows)} tokens: give the profile's own grid (--grid)"
        )
    recorded = beside_reference(profile_csv, beside, tokens)  # (refused before any probe)
    prober, slots = _prober(url, api, grid, vocab_size)
    if isinstance(slots, int) and beside >= slots:
        raise LyraError(
            f"speed --beside: got {beside}, must be < the server's {slots} slots (the prompt "
            "needs a slot of its own beside the decoders)"
        )
    prober.pin = isinstance(slots, int)

    async def measure() -> list[float]:
        got: list[float] = []
        async for k in _spaced(probes, pause_s):
            for ctx, at in zip(contexts, ref, strict=True):
                steps = rows[at][0]
                lat, _, gaps = await prober.mixed(beside, tokens, ctx, steps)
                got.append(float(sum(gaps)) if steps else lat)
                say(f"round {k + 1}/{probes}, decoders' prompt {ctx}: {got[-1]:.2f} ms")
        return got

    steps_ms = asyncio.run(measure())
    if recorded is not None:
        profile_ms, against = recorded, "beside reference"
    else:
        profile_ms, against = float(statistics.median(rows[at][1] for at in ref)), "mixed rows"
    return SpeedReading(steps_ms, profile_ms, (tokens,), 1, phase="prompt", beside=beside,
                        against=against)  # fmt: skip


def beside_reference(profile_csv: Path, beside: int, tokens: int) -> float | None:
    """The profile's own reference for a prompt of *tokens* beside *beside* decoders, where
    it took one through its grid (``grid.speed_reference_beside``: the metadata's
    ``speed_reference.beside``, its ``median_ms``); None where it has none for that pair
    (the reading then goes against the mixed rows)."""
    meta, ref = metadata_reference(profile_csv)
    got = ref.get("beside")
    if not isinstance(got, dict) or (got.get("decoders"), got.get("tokens")) != (beside, tokens):
        return None
    return reference_ms(got, str(meta), "speed_reference.beside")
