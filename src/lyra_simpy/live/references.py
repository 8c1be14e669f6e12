"""The speed references ``lyra-simpy profile`` keeps in its metadata
(``speed_reference``), against which ``lyra-simpy speed`` reads the host before a load.

With ``grid.speed_reference`` a lone decode request is timed before every measurement
(:func:`speed_reference`: the typical step, the speed the profile was taken at); with
``grid.speed_reference_beside`` a prompt is also timed beside decoders through the grid
(:func:`beside_reference`), the reference of ``speed --prompt N --beside B``
(docs/VALIDATION-llamacpp.md items 77–78).
"""

from __future__ import annotations

import statistics
from typing import Any

from lyra_simpy.errors import LyraError
from lyra_simpy.live.profile_grid import ProfileGrid


def _spread(every: list[float]) -> dict[str, Any]:
    """The references' median (the typical one), lowest, highest and count."""
    return {
        "median_ms": round(float(statistics.median(every)), 3),
        "min_ms": round(min(every), 3),
        "max_ms": round(max(every), 3),
        "references": len(every),
    }


def speed_reference(grid: ProfileGrid, beside: list[list[float]]) -> dict[str, Any]:
    """The metadata's ``speed_reference``: the reference request (in words, and its
    prompt tokens and outputs, which ``lyra-simpy speed`` sends again), the typical step
    (the median of every reference, what the rows are scaled to) and the spread; *beside*
    holds each measurement's references (each a decode probe's median gap)."""
    return {
        "request": f"a lone prompt of {grid.speed_reference_context} tokens, "
        f"{grid.decode_steps} outputs; its median chunk gap",
        "context": grid.speed_reference_context,
        "outputs": grid.decode_steps,
        "mode": grid.speed_reference,
        **_spread([ms for row in beside for ms in row]),
    }


def beside_reference(
    pair: tuple[int, int], refs: list[tuple[int, float]], every: int
) -> dict[str, Any]:
    """The metadata's ``speed_reference.beside``: the prompt of *pair* ``(B, N)`` timed
    beside decoders through the grid (*refs*: the decoders' prompt, the prompt's steps
    summed), its median over them all (what ``lyra-simpy speed --prompt N --beside B``
    reads the host against), spread and count, and the median at each decoder prompt."""
    by_context = {
        ctx: round(float(statistics.median(ms for c, ms in refs if c == ctx)), 3)
        for ctx in sorted({c for c, _ in refs})
    }
    return {
        "decoders": pair[0],
        "tokens": pair[1],
        **_spread([ms for _, ms in refs]),
        "every": every,
        "by_context": by_context,
    }


def check_beside(grid: ProfileGrid) -> None:
    """Refuse a ``grid.speed_reference_beside`` the grid cannot take, in one line: it needs
    the lone reference on (``speed_reference`` record or scale), its decoders among
    ``mixed_batch`` and its prompt among ``mixed_prompt_tokens`` (the rows ``speed``
    falls back on)."""
    if grid.speed_reference_beside is None:
        return
    b, n = grid.speed_reference_beside
    if grid.speed_reference == "off" or b not in grid.mixed_batch:
        raise LyraError(
            f"grid.speed_reference_beside: got [{b}, {n}], needs speed_reference record "
            f"or scale (got {grid.speed_reference!r}) and its decoders among "
            f"mixed_batch {grid.mixed_batch}"
        )
    if n not in grid.mixed_prompt_tokens:
        raise LyraError(
            f"grid.speed_reference_beside: got [{b}, {n}], its prompt must be one of "
            f"mixed_prompt_tokens {grid.mixed_prompt_tokens} (the rows speed falls back on)"
        )
