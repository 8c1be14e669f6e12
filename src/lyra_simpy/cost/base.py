"""What a cost model sees of one engine iteration, and the protocol it implements.

One engine iteration is one forward pass over a batch (DESIGN §3). Its time depends on
the prefill tokens in it, the decoding sequences (padded when CUDA graphs are used) and
the context those decodes read. Cost models are pure: shape in, seconds out.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np


class BatchShape(NamedTuple):
    """The batch of one iteration, as the cost model needs it.

    A named tuple rather than a frozen dataclass: the engine makes one per iteration
    that prefills, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per
    field) costs about four times as much to build; read-only either way."""

    prefill_seqs: int
    """Sequences computing prompt tokens (a whole prompt, or a chunk of one)."""
    prefill_tokens: int
    """Prompt tokens computed in this iteration (cache hits excluded)."""
    prefill_attention_tokens: int
    """Sum over prefill sequences of new × (cached + new) tokens: the attention work."""
    decode_seqs: int
    """Sequences emitting one token each."""
    decode_rows: int
    """Rows the decode runs over: ``decode_seqs`` plus rows held by finished members of
    a static batch. Padding (CUDA graphs) is applied to this by the cost model."""
    decode_context_tokens: int
    """Sum of the decoding sequences' context lengths (KV read by attention)."""
    verify_tokens: int = 0
    """Speculative decoding: draft tokens the target verifies in this iteration, the
    same number for every decoding sequence (``num_steps`` each). They run through the
    model like prompt tokens and attend to their sequence's context; a decode-only
    iteration with them is still a decode iteration (a CUDA graph in SGLang and vLLM)."""
    passes: int = 1
    """Forward passes the iteration runs: llama.cpp splits a batch into ubatches, one
    pass each (:mod:`~lyra_simpy.policies.ubatch`); 1 for every other engine. Only the
    ``profile`` cost model charges extra passes (``per_extra_pass_ms``)."""
    checkpoints: int = 0
    """Context checkpoints copied before the iteration (llama.cpp on a sliding-window
    model, :mod:`~lyra_simpy.policies.llamacpp`); charged by ``profile`` only
    (``per_checkpoint_ms``)."""
    prefill_attention_cells: int = -1
    """Σ over the prompt tokens of the KV cells each attends over (llama.cpp's padded
    ``n_kv``, :mod:`~lyra_simpy.policies.llamacpp`); -1: not known, the same as
    ``prefill_attention_tokens``. Read only by a ``profile`` cost fitted on a profile
    that measured it (``ProfileFit.attention == "n_kv"``)."""
    output_passes: int = 1
    """Forward passes that compute logits (llama.cpp runs the output projection only in
    a pass with an output row: a decode, or a prompt's last token,
    :func:`~lyra_simpy.policies.ubatch.pass_counts`); 1 for every other engine. Charged by
    ``profile`` only (``per_output_pass_ms``; the fixed cost holds one)."""
    prefill_computed_cells: int = 0
    """(query row, KV cell) pairs of prompt attention computed (llama.cpp's CPU flash
    attention: the 64 × 64 tiles its mask leaves open, where ``prefill_attention_cells``
    counts every cell its passes span; :mod:`~lyra_simpy.policies.llamacpp`). Charged by
    ``profile`` only (``per_computed_attention_ms``)."""
    pass_rows: tuple[int, ...] = ()
    """The decode rows of each forward pass of a decode-only iteration of several passes
    (llama.cpp with per-slot KV: one pass per run of consecutive slot ids); empty when
    not known or the iteration is one pass. A ``profile`` cost whose fit has
    ``decode_pass_gap_ms`` prices each pass at its own rows (``decode_passes: each``)."""
    saved_tokens: int = 0
    """Tokens copied into llama.cpp's prompt cache in RAM before the iteration, on the
    server's main loop (:mod:`~lyra_simpy.policies.llamacpp_save`). Charged by
    ``profile`` only, with a fit that has ``prompt_save`` (``cost.prompt_save``)."""
    saved_reused_tokens: int = 0
    """Of ``saved_tokens``, those copied into memory the cache held before (a page the
    process has, not a fresh one): charged at ``prompt_save.reused_ms_per_token`` where
    the fit has it, else as the others."""


def verify_rows_tokens(shape: BatchShape, rows: int) -> int:
    """Draft tokens verified over *rows* rows (the decode rows, padded where a CUDA
    graph pads them: a padded row verifies as many drafts as a real one)."""
    if not shape.verify_tokens:
        return 0
    return shape.verify_tokens // shape.decode_seqs * rows


class CostModel(Protocol):
    """Iteration time of a batch, in seconds."""

    def iteration_s(self, shape: BatchShape) -> float:
        """Time of one iteration of *shape*."""
        ...

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        """Times of *k* consecutive decode-only iterations over *rows* rows whose total
        context is ``context_tokens + j * growth`` at iteration *j*. Element *j* must
        equal ``decode_span_s(rows, context_tokens + j * growth, growth, 1)[0]`` bit for
        bit: the engine uses this for every decode-only iteration, fused or not."""
        ...


SHORT_SPAN = 32
"""Spans up to this many iterations are costed in plain Python: the same float
operations, element by element, cost less than NumPy's per-call overhead (and give
the same doubles)."""


def affine_span_s(
    fixed_ms: float, per_context_ms: float, context_tokens: int, growth: int, k: int
) -> list[float]:
    """``decode_span_s`` of a model whose decode step is ``fixed_ms + per_context_ms ×
    context`` (linear, profile): element *j* is bit for bit the single-step value."""
    if k <= SHORT_SPAN:
        if not growth:  # (every element the same expression of the same numbers)
            return [(fixed_ms + per_context_ms * context_tokens) / 1000.0] * k
        # context_tokens + growth * j, j = 0 … k-1, as range() counts it (the same ints)
        stop = context_tokens + growth * k
        return [
            (fixed_ms + per_context_ms * c) / 1000.0 for c in range(context_tokens, stop, growth)
        ]
    context = context_tokens + growth * np.arange(k, dtype=np.int64)
    out: list[float] = ((fixed_ms + per_context_ms * context) / 1000.0).tolist()
    return out
