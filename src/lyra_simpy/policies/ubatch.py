"""How llama.cpp cuts one engine step into forward passes (ubatches), as pure functions.

llama.cpp commit 0c1e570 (the one ``tox -e validate-cpu`` builds), read for this module:

* ``tools/server/server-context.cpp``, ``update_slots``: the step's batch holds first the
  sampled token of every generating slot, in slot order, then prompt tokens of the slots
  still processing their prompt, in slot order, up to ``n_batch`` tokens (``-b``); the
  batch is handed to ``llama_decode`` in views of ``n_batch`` tokens (``decode``).
* ``src/llama-kv-cache-iswa.cpp`` (and ``llama-kv-cache.cpp``), ``init_batch``: with one
  unified KV buffer (``-kvu``) a view is split by ``split_simple`` into ubatches of
  ``n_ubatch`` (``-ub``) consecutive tokens whatever their sequences; with a KV stream
  per sequence (per-slot KV, the default when ``-np`` is given) by ``split_equal(n_ubatch,
  sequential=true)``.
* ``src/llama-batch.cpp``, ``llama_batch_allocr::split_equal``: scanning the unused tokens
  in batch order, a ubatch takes the sequence of the first one and then every sequence
  whose id is one more than the last taken (``sequential``: a run of consecutive slot
  ids), and the same number of tokens from each: ``min(fewest left, max(1, n_ubatch //
  sequences))``. Every ubatch is one graph computation (``llama_context::decode``,
  ``process_ubatch``): a forward pass that reads all the weights again.

So decoding slots {0, 1, 2, 3} is one pass, slots {0, 2, 3} two ({0}, {2, 3}), and a
prompt beside the decode of the slot before it shares a pass with it one token each.
A batch is given as *segments*: (slot id, tokens) in batch order, each slot at most once
(a slot either generates or processes its prompt in a step).

* ``tools/server/server-context.cpp``, ``update_slots``: a token gets logits (an *output
  row*) when it is a generating slot's sampled token, or the last token of a prompt
  (``batch.set_output(batch.size() - 1, true)`` once the slot's whole prompt is in the
  batch: "extract the logits only for the last token"); a prompt chunk that does not
  end its prompt has none. ``src/models/gemma3.cpp``: the last layer keeps only the output
  rows (``ggml_get_rows(cur, inp_out_ids)``) before the output projection (the hidden
  states × the vocabulary matrix, 262k rows on Gemma 3), so a pass without one computes
  none of it. :func:`pass_counts` counts the passes that carry one
  (``per_output_pass_ms`` in :mod:`~lyra_simpy.calibration.fit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

Segments = Sequence[tuple[int, int]]
"""(slot id, tokens) in batch order."""


class PassCounts(NamedTuple):
    """One step's batch as forward passes (:func:`pass_counts`)."""

    passes: int
    """Forward passes (ubatches)."""
    with_output: int
    """Passes that carry an output row (compute logits)."""
    rows: tuple[int, ...]
    """The tokens of each pass, in order."""


def views(segments: Segments, n_batch: int) -> list[list[tuple[int, int]]]:
    """The batch cut into the ``n_batch``-token views ``update_slots`` decodes one by one
    (a slot's tokens may straddle two views)."""
    return _cut(segments, n_batch)


def split_simple(view: Segments, n_ubatch: int) -> list[list[tuple[int, int]]]:
    """``split_simple``: ubatches of ``n_ubatch`` consecutive tokens (unified KV)."""
    return _cut(view, n_ubatch)


def _cut(segments: Segments, size: int) -> list[list[tuple[int, int]]]:
    """*segments* (slot, tokens) in order, cut into pieces of *size* tokens (the last may
    be shorter; a slot's tokens may straddle two pieces)."""
    out: list[list[tuple[int, int]]] = []
    room = 0
    for slot, tokens in segments:
        while tokens > 0:
            if room == 0:
                out.append([])
                room = size
            take = min(tokens, room)
            out[-1].append((slot, take))
            tokens -= take
            room -= take
    return out


def split_equal(view: Segments, n_ubatch: int) -> list[list[tuple[int, int]]]:
    """``split_equal(n_ubatch, sequential=true)``: per-sequence KV (see the module
    docstring); each ubatch lists (slot, tokens), the same tokens for every slot."""
    slots = [s for s, _ in view]
    left = [t for _, t in view]
    out: list[list[tuple[int, int]]] = []
    while True:
        first = next((i for i, n in enumerate(left) if n > 0), None)
        if first is None:
            return out
        chain = [first]
        last = slots[first]
        for j in range(first + 1, len(view)):
            if left[j] > 0 and slots[j] == last + 1:
                chain.append(j)
                last = slots[j]
                if len(chain) > n_ubatch:  # (llama.cpp stops the scan here, one past)
                    break
        each = min(min(left[j] for j in chain), max(1, n_ubatch // len(chain)))
        for j in chain:
            left[j] -= each
        out.append([(slots[j], each) for j in chain])


def ubatches(
    segments: Segments, n_batch: int, n_ubatch: int, unified: bool
) -> list[list[tuple[int, int]]]:
    """The forward passes of one step's batch: views of ``n_batch`` tokens, each split
    as the KV layout requires (module docstring)."""
    split = split_simple if unified else split_equal
    return [u for view in views(segments, n_batch) for u in split(view, n_ubatch)]


def pass_counts(
    segments: Segments, outputs: Sequence[bool], n_batch: int, n_ubatch: int, unified: bool
) -> PassCounts:
    """The forward passes of one step's batch, those with an output row, and each one's
    tokens, the batch cut once; *outputs* says, per segment, whether its last token gets
    logits (a generating slot's token, or a chunk that ends its prompt: module
    docstring)."""
    if unified:
        ends, at = set(), 0
        for (_, tokens), out in zip(segments, outputs, strict=True):
            at += tokens
            if out:  # the pass of its last token: (view, ubatch in the view)
                view, offset = divmod(at - 1, n_batch)
                ends.add((view, offset // n_ubatch))
        rows = tuple(
            size
            for view in _view_sizes(sum(t for _, t in segments), n_batch)
            for size in _view_sizes(view, n_ubatch)
        )
        return PassCounts(len(rows), len(ends), rows)
    left = dict(segments)
    emits = {slot for (slot, _), out in zip(segments, outputs, strict=True) if out}
    all_passes = ubatches(segments, n_batch, n_ubatch, unified)
    with_output = 0
    for ubatch in all_passes:
        last = False
        for slot, take in ubatch:
            left[slot] -= take
            last = last or (not left[slot] and slot in emits)
        with_output += last
    rows = tuple(sum(t for _, t in u) for u in all_passes)
    return PassCounts(len(all_passes), with_output, rows)


def _view_sizes(total: int, n_batch: int) -> list[int]:
    full, rest = divmod(total, n_batch)
    return [n_batch] * full + ([rest] if rest else [])
