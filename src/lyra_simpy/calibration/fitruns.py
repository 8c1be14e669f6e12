"""Fit the ``profile`` cost model on steps rebuilt from replayed runs, alone or together
with a profile CSV (``lyra-simpy calibrate --from-runs DIR... [--profile CSV]``).

Both kinds of row enter one fit (:func:`~lyra_simpy.calibration.fit.fit_coefficients`,
same terms, same relative-error loss): a profile row as
:func:`~lyra_simpy.calibration.fit.design_matrix` reads it, a rebuilt step with its own
exact composition (:meth:`~lyra_simpy.calibration.steps.Steps.design_matrix`). The report
gives the profile's phases and the runs' (``runs:decode``, ...) apart, so one sees how well
the one explains the other; the decode table (``decode_batch_residual_ms``) takes the
median over both.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from lyra_simpy.calibration.fit import (
    METHODS,
    Loss,
    _grid,
    coefficients_of,
    decode_pass_gap,
    decode_residuals,
    design_matrix,
    fit_coefficients,
    profile_rows_by_pass,
    report,
    rowwise_dot,
    with_profile_probes,
)
from lyra_simpy.calibration.fitmodel import ALL_TERMS, ProfileFit, ProfileSource, RunsSource
from lyra_simpy.calibration.noisefit import (
    NoiseFit,
    SpellsFit,
    WanderFit,
    noise_fit,
)
from lyra_simpy.calibration.profiles import Profile, read_profile
from lyra_simpy.calibration.runs import StepRebuild, steps_of_runs
from lyra_simpy.calibration.steps import Steps
from lyra_simpy.errors import TraceError

RUNS_LOSS: Loss = "soft_l1_log"
"""The default loss of a fit on rebuilt steps (``calibrate --from-runs``): the robust loss
on log(predicted/measured) (:mod:`~lyra_simpy.calibration.fit`). A step the rebuild split
in two (a chunk later than the gap, docs/calibration.md §7) leaves a part of a few ms that
under a relative error outweighs thousands of good rows; a profile's rows (medians of
repeats) have no such rows and keep NNLS."""


@dataclass(frozen=True)
class _Rows:
    """Profile rows and rebuilt steps as one table (the columns the report reads)."""

    phase: npt.NDArray[np.str_]
    batch_size: npt.NDArray[np.int64]
    input_tokens: npt.NDArray[np.int64]
    context_len: npt.NDArray[np.int64]
    latency_ms: npt.NDArray[np.float64]


def _join(profile: Profile | None, steps: Steps) -> tuple[_Rows, np.ndarray, np.ndarray]:
    parts = ([profile] if profile is not None else []) + [steps]
    rows = _Rows(
        **{
            name: np.concatenate([np.asarray(getattr(p, name)) for p in parts])
            for name in _Rows.__dataclass_fields__
        }
    )
    # The profile's rows in the units of the rebuilt steps: the engine's cells where the
    # steps counted them (StepRebuild.llamacpp), a prompt's own tokens otherwise (the
    # profile's attention_cells column then left unread).
    if steps.llamacpp and profile is not None:
        lacks = [
            name
            for name in ("attention_cells", "attention_computed")
            if getattr(profile, name) is None
        ]
        if lacks:
            raise TraceError(
                f"{profile.path}: no {' or '.join(lacks)} column, and the runs' prompts are "
                "counted in KV cells (--scenario with a llamacpp engine): profile the "
                "server again with this version of lyra-simpy, or fit the runs alone"
            )
    xs = [design_matrix(profile, cells=steps.llamacpp)] if profile is not None else []
    xs.append(steps.design_matrix())
    # (a profile without the step columns, or steps not rebuilt as llama-server runs: one
    # pass a step, no checkpoint, logits in each step)
    width = max(x.shape[1] for x in xs)
    xs = [_widen(x, width) for x in xs]
    lines = [np.arange(len(profile), dtype=np.int64) + 2] if profile is not None else []
    lines.append(np.arange(len(steps), dtype=np.int64))
    return rows, np.vstack(xs), np.concatenate(lines)


def _pass_rows(profile: Profile | None, steps: Steps) -> list[tuple[int, ...] | None]:
    """The decode rows of each pass of every row of :func:`_join`'s table: a profile row's
    by its probe's layout (:func:`~lyra_simpy.calibration.fit.profile_rows_by_pass`), a
    rebuilt step's as the rebuild cut it (``Steps.pass_rows``; None where it did not)."""
    out = profile_rows_by_pass(profile) if profile is not None else []
    return out + [tuple(int(r) for r in row if r) or None for row in steps.pass_rows]


def _widen(x: npt.NDArray[np.float64], width: int) -> npt.NDArray[np.float64]:
    """*x* with the step terms it lacks (:data:`~lyra_simpy.calibration.fitmodel.STEP_TERMS`):
    no extra pass, no checkpoint, one pass computing logits a step (its first column)."""
    if x.shape[1] >= width:
        return x
    out = np.pad(x, ((0, 0), (0, width - x.shape[1])))
    out[:, ALL_TERMS.index("per_output_pass_ms")] = x[:, 0]
    return out


def fit_runs(
    folders: list[Path],
    profile_path: Path | None = None,
    rebuild: StepRebuild | None = None,
    loss: Loss = RUNS_LOSS,
    out: Path | None = None,
) -> ProfileFit:
    """Fit on the steps rebuilt from the runs in *folders* (and the profile CSV at
    *profile_path*). With *out*, paths in the fit are relative to *out*'s folder."""
    rebuild = rebuild or StepRebuild()
    steps = steps_of_runs(folders, rebuild)
    if not len(steps):
        raise TraceError(
            "--from-runs: no engine step could be rebuilt from "
            + ", ".join(map(str, folders))
            + " (no tokens, or every step dropped by idle_start: drop)"
        )
    profile = read_profile(profile_path) if profile_path is not None else None
    rows, x, lines = _join(profile, steps)
    coef, unmeasured = fit_coefficients(x, rows.latency_ms, loss)
    predicted = rowwise_dot(x, coef)
    here = out.resolve().parent if out is not None else None

    def rel(path: Path) -> str:
        return os.path.relpath(path.resolve(), here) if here is not None else str(path)

    source = None
    if profile is not None and profile_path is not None:
        meta = profile.metadata_path
        source = ProfileSource(
            path=rel(profile_path),
            sha256=hashlib.sha256(profile_path.read_bytes()).hexdigest(),
            rows=len(profile),
            metadata_path=rel(meta) if meta is not None else None,
        )
    fit = ProfileFit(
        method=METHODS[loss],
        coefficients=coefficients_of(coef),
        profile=source,
        runs=RunsSource(
            folders=[rel(f) for f in folders],
            rebuild={
                **rebuild.model_dump(mode="json"),
                "gap_ms_used": [round(g, 3) for g in steps.gap_ms],
            },
            steps=len(steps),
            dropped_steps=steps.dropped,
            approximated_requests=steps.approximated,
        ),
        metadata=profile.metadata if profile is not None else {},
        grid=_grid(rows),
        fit=report(rows, predicted, unmeasured, lines),
        noise=_with_spells(noise_fit(rows.latency_ms, predicted), steps, predicted),
        decode_batch_residual_ms=(residuals := decode_residuals(rows, predicted, x)),
        decode_pass_gap_ms=decode_pass_gap(rows, x, coef, residuals, _pass_rows(profile, steps)),
        attention="n_kv" if steps.llamacpp else "own",
    )
    return with_profile_probes(fit, profile)  # the wander where the runs show none


def _with_spells(noise: NoiseFit | None, steps: Steps, predicted: npt.NDArray[np.float64]
                 ) -> NoiseFit | None:  # fmt: skip
    """*noise* with the slow spells and the wander of the rebuilt decode-only steps, each
    run's in its order (:func:`~lyra_simpy.cost.hostnoise.fitted_spells`,
    :func:`~lyra_simpy.cost.hostnoise.fitted_wander`); *predicted*: every row's fitted
    time, the steps' last."""
    if noise is None:
        return None
    from lyra_simpy.cost.hostnoise import fitted_spells, fitted_wander

    ratio = steps.latency_ms / predicted[len(predicted) - len(steps) :]
    decode = steps.prefill_seqs == 0
    each = [(steps.run == run) & decode for run in dict.fromkeys(steps.run.tolist())]
    update: dict[str, Any] = {}
    spells = fitted_spells([ratio[m] for m in each])
    if spells is not None:
        update["spells"] = SpellsFit(**spells.model_dump(), decode_steps=int(decode.sum()))
    wander = fitted_wander([(steps.end_s[m], ratio[m]) for m in each])
    if wander is not None:
        update["wander"] = WanderFit(**wander[0].model_dump(), pairs=wander[1])
    return noise.model_copy(update=update)
