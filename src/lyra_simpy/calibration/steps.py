"""Engine steps rebuilt from replayed runs, as columns (:mod:`~lyra_simpy.calibration.runs`
builds them; :mod:`~lyra_simpy.calibration.fitruns` fits them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Steps:
    """Rebuilt steps as columns (one entry per step); the row-like columns make them
    readable by the fit report like profile rows."""

    latency_ms: Floats
    steps: Ints
    """Engine steps inside the rebuilt one: 1, or more when a prompt's earlier chunks
    ran in steps that emitted no token (``StepRebuild.prompt_stops``)."""
    decode_seqs: Ints
    decode_context_tokens: Ints
    prefill_seqs: Ints
    prefill_tokens: Ints
    prefill_attention_tokens: Ints
    prefill_attention_cells: Ints
    """Σ over a step's prompt tokens of the KV cells each attends over
    (``StepRebuild.llamacpp``; 0 without it)."""
    prefill_computed_cells: Ints
    """The (query row, KV cell) pairs of attention computed for its prompt tokens
    (:func:`~lyra_simpy.policies.llamacpp_attention.step_attention`; ``StepRebuild.llamacpp``;
    0 without it)."""
    passes: Ints
    """Forward passes of the engine steps in the rebuilt one (``StepRebuild.llamacpp``;
    one per engine step without it)."""
    checkpoints: Ints
    """Context checkpoints copied in it (``StepRebuild.llamacpp``; 0 without it)."""
    output_passes: Ints
    """Forward passes in it that computed logits: its decodes' and the passes holding a
    prompt's last token (``StepRebuild.llamacpp``; 1 without it: the step that emitted
    its tokens)."""
    pass_rows: Ints
    """Two-dimensional (steps × slots): the decoding sequences of each forward pass of a
    decode-only step of several passes, zero-padded (``StepRebuild.llamacpp``: each run of
    consecutive slot ids; all zeros for any other step, and no columns without it). The
    ``BatchShape.pass_rows`` that ``compare --steps`` prices the step with."""
    arrivals: Ints
    """Requests sent while it ran (their ``arrival_s`` in [its start, its end)): not a
    cost term, the evidence of what a request's arrival costs the steps it lands in
    (``validation/llamacpp_steps.py --arrivals``)."""
    run: npt.NDArray[np.str_]
    """The run folder each step came from."""
    end_s: Floats
    """When it ended, on its run's clock (the replay's ``arrival_s`` and token times, s):
    the steps' order in time, which the host's wander is read from
    (:func:`~lyra_simpy.cost.hostnoise.fitted_wander`)."""
    dropped: int = 0
    """Steps found but left out: begun idle under ``idle_start: drop``, or the first of
    a run without a prompt in it (no known start)."""
    gap_ms: tuple[float, ...] = ()
    """The gap each run's steps were cut at (``StepRebuild.gap_ms``, resolved)."""
    approximated: int = 0
    """Requests taken at one token a chunk (``StreamedRequest.approximate``)."""
    llamacpp: bool = False
    """Rebuilt as llama-server runs (``StepRebuild.llamacpp``): attention in cells, and
    the pass and checkpoint terms."""

    def __len__(self) -> int:
        return len(self.latency_ms)

    @property
    def phase(self) -> npt.NDArray[np.str_]:
        """``runs:prefill``, ``runs:decode`` or ``runs:mixed`` per step."""
        kind = np.where(
            self.prefill_seqs == 0,
            "runs:decode",
            np.where(self.decode_seqs == 0, "runs:prefill", "runs:mixed"),
        )
        return np.asarray(kind, dtype=np.str_)

    @property
    def batch_size(self) -> Ints:
        return np.asarray(self.decode_seqs + self.prefill_seqs, dtype=np.int64)

    @property
    def input_tokens(self) -> Ints:
        return self.prefill_tokens

    @property
    def context_len(self) -> Ints:
        """Mean decode context per decoding sequence (0 without decodes), rounded."""
        seqs = np.maximum(self.decode_seqs, 1)
        return np.asarray(np.rint(self.decode_context_tokens / seqs), dtype=np.int64)

    def design_matrix(self) -> Floats:
        """One column per term of :data:`~lyra_simpy.calibration.fitmodel.TERMS` (and, rebuilt
        as llama-server runs, of ``ALL_TERMS``: extra passes, checkpoints, passes computing
        logits, attention computed)."""
        columns = [
            self.steps,
            self.decode_seqs,
            self.decode_context_tokens,
            self.prefill_tokens,
            self.prefill_attention_cells if self.llamacpp else self.prefill_attention_tokens,
        ]
        if self.llamacpp:
            columns += [
                self.passes - self.steps,
                self.checkpoints,
                self.output_passes,
                self.prefill_computed_cells,
            ]
        return np.column_stack([c.astype(np.float64) for c in columns])


COLUMNS = tuple(
    k
    for k in Steps.__dataclass_fields__
    if k not in ("dropped", "gap_ms", "approximated", "llamacpp")
)
"""The per-step columns (the rest of :class:`Steps` describes the whole table)."""


def join_steps(parts: list[Steps], llamacpp: bool) -> Steps:
    """The steps of several runs as one table, run after run."""
    return Steps(
        **{name: np.concatenate([getattr(p, name) for p in parts]) for name in COLUMNS},
        dropped=sum(p.dropped for p in parts),
        gap_ms=tuple(g for p in parts for g in p.gap_ms),
        approximated=sum(p.approximated for p in parts),
        llamacpp=llamacpp,
    )
