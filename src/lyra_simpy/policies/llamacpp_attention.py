"""llama.cpp's prompt attention counted as if each sequence's KV cells were one block:
the cells each prompt token's pass spans (``n_kv``) and the (query row, KV cell) pairs
its CPU flash attention computes (:func:`step_attention`). Per-slot KV is always so (a
slot's stream holds one request, emptied when the next starts); with ``-kvu`` it is the
``kv_layout: packed`` count — ``placed`` counts the same on the cells as llama.cpp
places them (:mod:`~lyra_simpy.policies.kvcells`). The mechanics and their sources are
in :mod:`~lyra_simpy.policies.llamacpp` ("What a prompt token attends over", "What the
attention computes"); the profiler and the step rebuild count their rows and steps with
the same function."""

from __future__ import annotations

import itertools
from typing import NamedTuple, Protocol

PAD = 256
"""``GGML_PAD(n_ctx, 256)`` and ``GGML_PAD(n_ctx_seq, 256)`` in ``llama_context``."""


def _pad(n: int) -> int:
    return -(-n // PAD) * PAD


def n_kv(cells: int, stream: int) -> int:
    """``get_n_kv``: the cells a pass attends over in a stream of *stream* cells whose
    used cells end at *cells*: padded to 256, at least 256, at most the stream."""
    return min(stream, max(PAD, _pad(cells)))


class CellCounts(Protocol):
    """What :func:`step_attention` reads of a KV layout
    (:class:`~lyra_simpy.policies.llamacpp.LlamaCppConfig`, or
    :class:`~lyra_simpy.calibration.llamacpp_runs.LlamaCppLayout` for steps rebuilt from
    runs)."""

    @property
    def kv_unified(self) -> bool: ...
    @property
    def ubatch_tokens(self) -> int: ...
    @property
    def stream_cells(self) -> int: ...


FA_TILE = 64
"""Query rows × KV cells of one tile of llama.cpp's CPU flash attention
(``GGML_FA_TILE_Q`` = ``GGML_FA_TILE_KV`` = 64, ``ggml/src/ggml-cpu/common.h``)."""


class AttentionCounts(NamedTuple):
    """A step's prompt attention, as :func:`step_attention` counts it."""

    spanned: int
    """Σ over the prompt tokens of the cells each one's pass spans (``n_kv``, masked
    cells included: what the mask scan reads)."""
    computed: int
    """(query row, KV cell) pairs the flash attention computes for them (whole tiles)."""


def _tile_count(first: int, last: int) -> int:
    """KV tiles holding cells *first*..*last* (inclusive; 0 when empty)."""
    return last // FA_TILE - first // FA_TILE + 1 if last >= first else 0


def _stream_pairs(first: int, rows: int) -> int:
    """Pairs computed for *rows* prompt rows of one sequence at positions *first*,
    *first* + 1, ..., its cells packed from its stream's first tile: whole tiles below
    the diagonal when the pass is tiled, else each row's own cells."""
    if rows < FA_TILE:
        return rows * first + rows * (rows + 1) // 2
    return sum(
        FA_TILE * FA_TILE * ((first + min(q0 + FA_TILE, rows) - 1) // FA_TILE + 1)
        for q0 in range(0, rows, FA_TILE)
    )


def step_attention(
    config: CellCounts, decode_tokens: int, chunks: list[tuple[int, int]], held: int
) -> AttentionCounts:
    """A step's prompt attention (module docstring): the cells each prompt token's pass
    spans, and the (query row, KV cell) pairs llama.cpp's CPU flash attention computes.
    *chunks*: (tokens its sequence holds before the step, prompt tokens it adds), in batch
    order after the step's *decode_tokens* decode tokens; *held*: cells the whole buffer
    holds before the step (``-kvu`` only).

    ``ggml_compute_forward_flash_attn_ext_f16`` (``ggml/src/ggml-cpu/ops.cpp``): a pass of
    at least :data:`FA_TILE` rows runs ``..._tiled``: for each tile of 64 consecutive query
    rows (in batch order) and each tile of 64 KV cells it computes the whole 64 × 64 block
    (a GEMM; a short last tile is padded), unless the mask hides every cell of the block
    from every row of the tile (``can_skip``); a pass of fewer rows runs ``..._one_chunk``,
    which skips each masked cell of each row (``if (mv == -INFINITY) continue``). A prompt
    token sees the cells of its own sequence up to its own (causal); the other sequences'
    cells and the empty ones are masked. Modelling choices: the cells stay packed (the
    step's tokens take cells ``held``, ``held`` + 1, ... in batch order); a sequence's
    cells from earlier steps form one block of whole tiles of its own; a tile whose rows
    include a decoding sequence's token computes every tile of the *held* cells (a
    decoding sequence's tokens are spread over the buffer, one a step); a pass that holds
    no prompt token counts nothing (its attention is the decode term's: its rows see their
    own context only)."""
    nub, stream = config.ubatch_tokens, config.stream_cells
    spanned = computed = 0
    if not config.kv_unified:
        # split_equal: a prompt's passes hold its stream alone (prompts with equal chunks
        # in consecutive slots may share a pass in llama.cpp, n_kv their largest: taken
        # alone here)
        for before, take in chunks:
            for done in range(0, take, nub):
                piece = min(nub, take - done)
                spanned += piece * n_kv(before + done + piece, stream)
                computed += _stream_pairs(before + done, piece)
        return AttentionCounts(spanned, computed)
    # split_simple: ubatches of n_ubatch rows in batch order, the decode rows first; row j
    # takes cell held + j; chunk c holds rows starts[c]..starts[c + 1] − 1
    starts = list(itertools.accumulate((take for _, take in chunks), initial=decode_tokens))
    end = starts[-1]
    for u0 in range(decode_tokens - decode_tokens % nub, end, nub):
        u1 = min(u0 + nub, end)
        spanned += (u1 - max(u0, decode_tokens)) * n_kv(held + u1, stream)
        for q0 in range(u0, u1, FA_TILE):
            q1 = min(q0 + FA_TILE, u1)
            inside = [c for c in range(len(chunks)) if starts[c] < q1 and starts[c + 1] > q0]
            if u1 - u0 < FA_TILE:  # ..._one_chunk: each row its own open cells
                for c in inside:
                    lo, hi = max(q0, starts[c]), min(q1, starts[c + 1])
                    computed += _stream_pairs(chunks[c][0] + lo - starts[c], hi - lo)
            elif q0 < decode_tokens:  # the held tiles, and the step's cells of its rows
                tiles = _tile_count(0, held - 1) + _tile_count(held + q0, held + q1 - 1)
                shared = held > 0 and (held - 1) // FA_TILE == (held + q0) // FA_TILE
                computed += FA_TILE * FA_TILE * (tiles - shared)
            else:  # its chunks' cells in the step (adjacent), and their earlier blocks
                tiles = _tile_count(held + starts[inside[0]], held + q1 - 1)
                tiles += sum(-(-chunks[c][0] // FA_TILE) for c in inside)
                computed += FA_TILE * FA_TILE * tiles
    return AttentionCounts(spanned, computed)
