"""CUDA-graph padding of decode batches.

Engines that replay CUDA graphs for decode run a batch of *n* sequences as the graph
captured for the next size up, and pay for the padded size: vLLM pads to its
``cudagraph_capture_sizes``, SGLang to the sizes up to ``--cuda-graph-max-bs``. Above the
largest captured size they run eagerly (no padding). Mixed and prefill iterations run
eagerly in SGLang and are not padded here.

YAML: ``padding: none`` (eager), ``padding: max_batch`` (one graph at the scheduler's
batch width: every decode batch costs the full width, as in the classroom model), or a
list of captured sizes, e.g. ``[1, 2, 4, 8, 16, 24, 32]``.
"""

from __future__ import annotations

import bisect
from typing import Literal

Padding = Literal["none", "max_batch"] | list[int]


def check_padding(value: object) -> object:
    """Accept ``none``, ``max_batch`` or a non-empty list of positive sizes."""
    if value in ("none", "max_batch"):
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return value
    raise ValueError("must be 'none', 'max_batch' or a list of captured batch sizes (ints > 0)")


class Padder:
    """Maps a decode row count to the count the cost model charges."""

    __slots__ = ("_sizes",)

    def __init__(self, padding: Padding, max_batch: int) -> None:
        if padding == "none":
            self._sizes: list[int] = []
        elif padding == "max_batch":
            self._sizes = [max_batch]
        else:
            self._sizes = sorted(set(padding))

    def captured(self, rows: int) -> bool:
        """Whether a decode batch of *rows* rows replays a captured graph."""
        return bool(self._sizes) and rows <= self._sizes[-1]

    def __call__(self, rows: int) -> int:
        sizes = self._sizes
        i = bisect.bisect_left(sizes, rows)
        return sizes[i] if i < len(sizes) else rows
