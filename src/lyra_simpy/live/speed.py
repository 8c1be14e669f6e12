"""``lyra-simpy speed``: how fast the host runs now against the speed a profile was
taken at, as the ``cost.speed`` to simulate a load about to run.

A shared or thermally limited host does not hold one speed: on the llama.cpp matrix's
2-core host the real runs' decode steps ran 0.89–1.18 × what their profile, taken
minutes before, charged (docs/VALIDATION-llamacpp.md, items 37–41). A profile taken with
``grid.speed_reference`` (``record`` or ``scale``) keeps in its metadata the typical
step of a lone reference request (``speed_reference.median_ms``: a prompt of
``context`` fresh tokens and ``outputs`` outputs, its median chunk gap). This command
sends the same request *probes* times, *pause_s* apart, right before a load, and prints
the median of the steps over the profile's: the factor
:class:`~lyra_simpy.cost.profiled.ProfileCost`'s ``speed`` multiplies every time by.

The median of several probes, not the last one: a probe's step swings by 10–15 % from
one request to the next on that host (``validation/host_noise.py``). The matrix's speed
gate (``validation/speed_gate.py``) sends a lone request of the same prompt size before
every real run; the median of every probe it took (``validation/llamacpp_at_speed.py
--ratio gate-all``) is what this command reads. With ``--batch`` it reads the full batch
instead (:func:`batch_speed`), as ``validate_cpu.py --batch-before`` does before each run.
With ``--prompt N`` it times a lone prompt of *N* tokens against the profile's prefill
row for it (:func:`~lyra_simpy.live.speed_prompt.prompt_speed`): the
``cost.prompt_speed`` for the steps that carry prompt tokens, which on a shared host
need not move with the decode steps
(docs/VALIDATION-llamacpp.md item 70). Read before every run of three of the matrix's
points, it did not forecast their prompt steps: Table 1 at both readings held 85 of 105
cells, at the full batch's reading alone 89 (item 72); a real run's ``compare --steps``
gives the ``cost.prompt_speed`` it ran at. With ``--prompt N --beside B`` it times the
prompt beside *B* sequences decoding against the profile's mixed rows
(:func:`~lyra_simpy.live.speed_prompt.beside_speed`): the kind of step a load's prompts
run in. Read so before every
run of two points (item 75) it scattered less about the runs' prompt steps than the lone
prompt and Table 1 held 53 of 70 cells at it against 43, but with a bias of its own at
each point (−9 % and +5 %); over all six points (items 75–78), with ``--batch NP`` for
the decode steps, 181 of 210 against 154 with the lone prompt, 167 at the full batch's
reading alone and 164 at the lone decode reading alone.
``validate_cpu.py --matrix --speed-before`` runs this command itself, both readings,
before every real run; the document says how well each forecast the runs (items 42–43,
every point: the full batch's reading the better, Table 1 183 of 210 cells against the
lone reading's 169 and the profile's speed's 155; either strays about 3 % from the runs'
mean step, and 6 probes a reading instead of 3 did not stray less).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import statistics
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lyra_simpy.errors import LyraError
from lyra_simpy.live.client import Api

if TYPE_CHECKING:
    from lyra_simpy.live.prober import Prober
    from lyra_simpy.live.profile_grid import ProfileGrid


@dataclass(frozen=True)
class SpeedReading:
    """What :func:`host_speed` or :func:`batch_speed` measured."""

    steps_ms: list[float]
    """Each probe's step, ms, in the order taken."""
    profile_ms: float
    """What the profile says for the same probe (ms): its typical reference step
    (``speed_reference.median_ms``), or its decode row for the batch."""
    contexts: tuple[int, ...]
    """The probes' prompt tokens (each of them a round)."""
    outputs: int
    batch: int = 1
    statistic: Literal["median", "mean"] = "median"
    """How the probes make one step: ``median`` (lone probes: one in a slow moment reads
    far off) or ``mean`` (the full batch's lock-step mean steps: a request's TPOT sums its
    steps, so their tail counts)."""
    phase: Literal["decode", "prompt"] = "decode"
    """What was timed: decode steps (``cost.speed``) or prompts (``cost.prompt_speed``):
    lone ones (``contexts`` their tokens), or with :attr:`beside` decoders."""
    beside: int = 0
    """For a prompt reading, the sequences decoding beside each prompt
    (:func:`~lyra_simpy.live.speed_prompt.beside_speed`, their prompts the grid's
    ``mixed_context``); 0: lone prompts."""
    against: str = ""
    """For a beside reading, what :attr:`profile_ms` is: the profile's ``beside
    reference`` or its ``mixed rows``; empty for the others."""

    @property
    def field(self) -> str:
        """The scenario field the reading is for."""
        return "cost.prompt_speed" if self.phase == "prompt" else "cost.speed"

    @property
    def now_ms(self) -> float:
        if self.statistic == "mean":
            return float(statistics.mean(self.steps_ms))
        return float(statistics.median(self.steps_ms))

    @property
    def speed(self) -> float:
        """The host's step now over the profile's: ``cost.speed``."""
        return self.now_ms / self.profile_ms

    def as_json(self) -> dict[str, Any]:
        return {
            "steps_ms": [round(ms, 3) for ms in self.steps_ms],
            f"{self.statistic}_ms": round(self.now_ms, 3),
            "profile_ms": self.profile_ms,
            # the figure the command prints (``--set cost.speed=…``), rounded once: a
            # value kept to 4 places and printed to 3 could round the other way
            "speed": round(self.speed, 3),
            "request": {
                "batch": self.batch,
                "contexts": list(self.contexts),
                "outputs": self.outputs,
                **({"beside": self.beside} if self.beside else {}),
            },
            "phase": self.phase,
            **({"against": self.against} if self.against else {}),
        }


def metadata_reference(profile_csv: Path) -> tuple[Path | None, dict[str, Any]]:
    """The metadata file beside *profile_csv* (None: none) and its ``speed_reference``
    (empty where it has none)."""
    from lyra_simpy.calibration.profiles import metadata_path_of, read_metadata

    meta_path = metadata_path_of(profile_csv)
    ref = read_metadata(meta_path).get("speed_reference") if meta_path is not None else None
    return meta_path, ref if isinstance(ref, dict) else {}


def reference_ms(ref: dict[str, Any], where: str, field: str, hint: str = "") -> float:
    """*ref*'s ``median_ms``, refused in one line naming *where* and *field* unless it is
    a number > 0."""
    ms = ref.get("median_ms")
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not ms > 0:
        raise LyraError(f"{where}: {field}.median_ms: got {ms!r}, must be a number > 0{hint}")
    return float(ms)


def reference_of(profile_csv: Path) -> dict[str, Any]:
    """The ``speed_reference`` of the metadata beside *profile_csv*, checked."""
    meta_path, ref = metadata_reference(profile_csv)
    if meta_path is None:
        raise LyraError(
            f"{profile_csv}: no metadata YAML beside it; speed reads the profile's "
            "speed_reference, which lyra-simpy profile writes there"
        )
    reference_ms(ref, str(meta_path), "speed_reference",
                 " (profile with grid speed_reference: record or scale)")  # fmt: skip
    return ref


_REQUEST_WORDS = re.compile(r"a lone prompt of (\d+) tokens, (\d+) outputs")
"""How :func:`~lyra_simpy.live.references.speed_reference` words the request (``request``),
the only record of it in a profile written before ``context`` and ``outputs`` were kept."""


def request_of(ref: dict[str, Any], where: Path) -> tuple[int, int]:
    """The reference request of *ref* (a profile's ``speed_reference``): (prompt tokens,
    outputs), from its numbers, else from its words."""
    context, outputs = ref.get("context"), ref.get("outputs")
    if isinstance(context, int) and isinstance(outputs, int) and context > 0 and outputs > 1:
        return context, outputs
    found = _REQUEST_WORDS.match(str(ref.get("request", "")))
    if found is None or int(found[1]) < 1 or int(found[2]) < 2:
        raise LyraError(
            f"{where}: speed_reference.context/outputs: got {context!r}/{outputs!r} and "
            f"request {ref.get('request')!r}, must name a prompt of >= 1 tokens and >= 2 outputs "
            "(profile again)"
        )
    return int(found[1]), int(found[2])


async def _spaced(rounds: int, pause_s: float) -> AsyncIterator[int]:
    """Each round's index, *pause_s* of idle before every one but the first: the spacing
    of ``lyra-simpy speed``'s probes, decode or prompt."""
    for k in range(rounds):
        if k:
            await asyncio.sleep(pause_s)
        yield k


def decode_rounds(
    prober: Prober,
    batch: int,
    contexts: Sequence[int],
    rounds: int,
    pause_s: float,
    on_step: Callable[[int, int, float, float], object] | None = None,
) -> list[tuple[float, float]]:
    """*batch* requests decoding together (:meth:`~lyra_simpy.live.prober.Prober.decode`:
    the prober's ``decode_steps`` outputs, slots 0..batch−1 when it pins) at each of
    *contexts* prompt tokens, *rounds* times *pause_s* apart: each decode's (median
    chunk gap, lock-step window's mean step), ms, in the order taken, each passed to
    *on_step* (round, context, gap, mean) as it comes. The probes of ``lyra-simpy speed``
    and of the validation matrix's full-batch check (``validation/llamacpp_matrix.py``)."""

    async def measure() -> list[tuple[float, float]]:
        got: list[tuple[float, float]] = []
        async for k in _spaced(rounds, pause_s):
            for ctx in contexts:
                try:
                    gap, mean, _ = await prober.decode(batch, ctx)
                except statistics.StatisticsError:
                    raise LyraError(
                        f"speed: round {k + 1} at context {ctx}: a stream had fewer than 2 "
                        f"chunks for {prober.grid.decode_steps} outputs: no step to time"
                    ) from None
                got.append((gap, mean))
                if on_step is not None:
                    on_step(k, ctx, gap, mean)
        return got

    return asyncio.run(measure())


def _prober(url: str, api: Api, grid: ProfileGrid, vocab_size: int | None) -> tuple[Prober, Any]:
    """A prober of *grid* against *url* (fresh prompt ids, as ``lyra-simpy profile``
    draws them) and the server's llama.cpp slot count (None for another engine)."""
    from lyra_simpy.live.client import check_endpoint
    from lyra_simpy.live.prober import Prober

    url = url.rstrip("/")
    slots = check_endpoint(url).get("total_slots")
    return Prober.for_endpoint(url, api, grid, secrets.randbits(63), vocab_size), slots


def host_speed(
    url: str,
    api: Api,
    profile_csv: Path,
    grid: ProfileGrid,
    probes: int,
    pause_s: float,
    vocab_size: int | None = None,
    say: Callable[[str], object] = print,
) -> SpeedReading:
    """Send the profile's reference request (:func:`request_of`) *probes* times,
    *pause_s* apart, to the engine at *url*, each probe's step reported to *say*.
    *grid* (a :class:`~lyra_simpy.live.profile_grid.ProfileGrid`: the profile's own) gives
    the request's ``extra_body``, ``token_ids`` and ``timeout_s``."""
    ref = reference_of(profile_csv)
    context, outputs = request_of(ref, profile_csv)
    grid = grid.model_copy(update={"decode_steps": outputs})
    prober, _ = _prober(url, api, grid, vocab_size)
    got = decode_rounds(
        prober, 1, [context], probes, pause_s,
        lambda k, _ctx, gap, _mean: say(f"probe {k + 1}/{probes}: {gap:.2f} ms"),
    )  # fmt: skip
    return SpeedReading([gap for gap, _ in got], float(ref["median_ms"]), (context,), outputs)


def one_pass_decode_ms(
    profile_csv: Path, batch: int, contexts: Collection[int] | None = None
) -> list[float]:
    """The ``latency_ms`` of the profile's decode rows of *batch* sequences in one
    forward pass (a profile without the ``passes`` column: every decode row of *batch*)
    at *contexts* (``context_len``; None: every one)."""
    from lyra_simpy.calibration.profiles import read_profile

    prof = read_profile(profile_csv)
    rows = (prof.phase == "decode") & (prof.batch_size == batch)
    if prof.passes is not None:
        rows &= prof.passes == 1
    if contexts is not None:
        rows &= np.isin(prof.context_len, list(contexts))
    return [float(ms) for ms in prof.latency_ms[rows]]


def batch_row_ms(profile_csv: Path, batch: int, contexts: list[int], outputs: int) -> float:
    """The profile's decode step of *batch* sequences in one forward pass at the decode
    probes of *contexts* prompt tokens and *outputs* outputs (rows at context
    ``ctx + outputs // 2``, as :mod:`lyra_simpy.live.profile` writes them): the median of
    their ``latency_ms``."""
    want = sorted({ctx + outputs // 2 for ctx in contexts})
    found = one_pass_decode_ms(profile_csv, batch, want)
    if not found:
        from lyra_simpy.calibration.profiles import read_profile

        prof = read_profile(profile_csv)
        have = sorted({int(b) for b in prof.batch_size[prof.phase == "decode"]})
        raise LyraError(
            f"speed --batch: got {batch}, {profile_csv} has no decode row of {batch} "
            f"sequences in one pass at context {want} (the grid's decode_context "
            f"+ decode_steps // 2); its decode batches: {have}"
        )
    return float(statistics.median(found))


def batch_speed(
    url: str,
    api: Api,
    profile_csv: Path,
    grid: ProfileGrid,
    batch: int,
    probes: int,
    pause_s: float,
    vocab_size: int | None = None,
    say: Callable[[str], object] = print,
) -> SpeedReading:
    """*batch* requests decoding together at each of *grid*'s ``decode_context``
    (``decode_steps`` outputs; against llama.cpp pinned to slots 0..batch−1, as the
    profile's rows were), *probes* rounds *pause_s* apart: the mean of their lock-step
    windows' mean steps over the profile's row for the batch (:func:`batch_row_ms`).
    The mean, because a request's TPOT sums its steps: on the llama.cpp matrix the
    runs' mean step ran up to 6 % over their median (docs/VALIDATION-llamacpp.md
    item 41, where this reading, taken by ``validate_cpu.py --batch-before``, forecast
    Table 1's speed best: ``llamacpp_at_speed.py --ratio batch-mean``; and item 42, taken
    by this command before every run: ``--ratio speed-batch``)."""
    row = batch_row_ms(profile_csv, batch, grid.decode_context, grid.decode_steps)
    prober, slots = _prober(url, api, grid, vocab_size)
    if isinstance(slots, int) and batch > slots:
        raise LyraError(f"speed --batch: got {batch}, the server has {slots} slots")
    prober.pin = isinstance(slots, int)
    got = decode_rounds(
        prober, batch, grid.decode_context, probes, pause_s,
        lambda k, ctx, _gap, mean: say(f"round {k + 1}/{probes}, context {ctx}: {mean:.2f} ms"),
    )  # fmt: skip
    steps = [mean for _, mean in got]
    return SpeedReading(steps, row, tuple(grid.decode_context), grid.decode_steps, batch, "mean")
