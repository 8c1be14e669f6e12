"""Fit files: ``calibrate`` writes one (YAML), a ``profile`` cost model reads it.

A fit file holds the coefficients, the profile it came from (path relative to the fit
file, SHA-256, row count), the profile's metadata, the measured grid and the fit report,
so a run's manifest can say where its calibration came from. Files are written to a
temporary sibling and renamed into place: an interrupted write leaves no partial file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import ValidationError

from lyra_simpy.calibration.fit import Loss, fit_profile
from lyra_simpy.calibration.fitmodel import FORMAT, STEP_TERMS, TERMS, UNITS, ProfileFit
from lyra_simpy.calibration.noisefit import NoiseFit
from lyra_simpy.calibration.profiles import read_profile
from lyra_simpy.errors import TraceError, from_validation_error
from lyra_simpy.metrics.io import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

HEADER = (
    "# Fitted by `lyra-simpy calibrate` (lyra_simpy.calibration.fit): coefficients of the\n"
    "# `profile` cost model in ms, the profile it came from and the fit report.\n"
)


CELL_UNIT = "ms per prompt token x KV cell its pass spans (llama.cpp n_kv)"
"""``per_prefill_attention_ms``'s unit in a fit made on cells (``ProfileFit.attention``)."""


def write_fit(fit: ProfileFit, path: Path) -> None:
    """Write *fit* as YAML to *path*, atomically."""
    # A profile-only fit has no runs: leave the key out, as fits made before runs existed.
    data = fit.model_dump(mode="json", exclude={"runs"} if fit.runs is None else None)
    text = HEADER + yaml.safe_dump(data, sort_keys=False)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def load_fit(path: Path) -> ProfileFit:
    """The fit at *path*: a fit YAML, or a profile CSV fitted now."""
    if path.suffix.lower() == ".csv":
        return fit_profile(read_profile(path))
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TraceError(
            f"{path}: cannot read profile fit ({exc.strerror}); make one with "
            "`lyra-simpy calibrate PROFILE.csv --out FIT.yaml`"
        ) from None
    except yaml.YAMLError as exc:
        raise TraceError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise TraceError(
            f"{path}: not a profile fit (must start with format: {FORMAT}); make one with "
            "`lyra-simpy calibrate PROFILE.csv --out FIT.yaml`"
        )
    try:
        return ProfileFit.model_validate(raw)
    except ValidationError as exc:
        raise TraceError(f"{path}: {from_validation_error(exc)}") from None


FIGURE_SUFFIXES = (".png", ".pdf", ".svg")


def calibrate(
    profile_path: Path, out: Path | None = None, figure: Path | None = None, loss: Loss = "nnls"
) -> ProfileFit:
    """Fit the profile CSV at *profile_path* (*loss*: ``nnls`` or the robust
    ``soft_l1``, :mod:`~lyra_simpy.calibration.fit`). With *out*, write the fit file there (the
    profile and its metadata are then named relative to it); with *figure*, the residual
    figure (:func:`save_residuals`). Nothing is written unless the fit and the figure
    both succeed."""
    if figure is not None and figure.suffix.lower() not in FIGURE_SUFFIXES:
        raise TraceError(f"--figure: got {str(figure)!r}, must end in .png, .pdf or .svg")
    profile = read_profile(profile_path)
    meta = profile.metadata_path
    if out is not None and meta is not None and out.resolve() == meta.resolve():
        raise TraceError(f"--out: got {out}, which is the profile's metadata file; choose another")
    fit = fit_profile(profile, loss)
    if out is not None and fit.profile is not None:
        here = out.resolve().parent
        source = fit.profile.model_copy(
            update={
                "path": os.path.relpath(profile_path.resolve(), here),
                "metadata_path": os.path.relpath(meta.resolve(), here) if meta else None,
            }
        )
        fit = fit.model_copy(update={"profile": source})
    if figure is not None:
        save_residuals(fit, profile_path, figure)
    if out is not None:
        write_fit(fit, out)
    return fit


LOSS_WORDS = {
    "nnls_relative": "non-negative least squares on relative error",
    "soft_l1_relative": "non-negative robust (soft L1) least squares on relative error",
    "soft_l1_log_ratio": "non-negative robust (soft L1) least squares on log(predicted/measured)",
}


WANDER_FROM = {"runs": "the runs' decode steps", "profile": "the profile's wander probe steps"}
"""How the report names where the wander was read (``WanderFit.source``)."""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_report(fit: ProfileFit, profile_label: str | None = None) -> str:
    """The fit report as text: coefficients with units, R² and relative errors per
    phase, the worst rows; *profile_label* names the profile (default: as the fit does)."""
    meta = fit.metadata
    lines = []
    if fit.profile is not None:
        lines.append(f"profile: {profile_label or fit.profile.path} ({fit.profile.rows} rows)")
    if fit.runs is not None:
        lines.append(
            f"runs: {', '.join(fit.runs.folders)} ({fit.runs.steps} rebuilt steps, "
            f"{fit.runs.dropped_steps} left out; "
            + (
                f"{fit.runs.approximated_requests} request(s) counted by usage, taken at "
                "one token a chunk; "
                if fit.runs.approximated_requests
                else ""
            )
            + ", ".join(f"{k}={v}" for k, v in fit.runs.rebuild.items())
            + ")"
        )
    lines += [
        "metadata: "
        + ", ".join(f"{k}={meta.get(k, 'unknown')}" for k in ("hardware", "model", "engine", "tp")),
        f"coefficients ({LOSS_WORDS.get(fit.method, fit.method)}):",
    ]
    # llama.cpp's terms where the fit had their columns (attention in KV cells, or any
    # of them fitted); the attention term in the units the fit used
    cells = fit.attention == "n_kv"
    steps = [t for t in STEP_TERMS if cells or getattr(fit.coefficients, t)]
    for term in (*TERMS, *steps):
        unit = CELL_UNIT if cells and term == "per_prefill_attention_ms" else UNITS[term]
        lines.append(f"  {term:<26} {getattr(fit.coefficients, term):>12.6g}  {unit}")
    r2 = fit.fit.r2
    lines.append(f"R² (all rows): {'n/a' if r2 is None else f'{r2:.4f}'}")
    width = max([8, *map(len, fit.fit.phases)])
    lines.append(f"  {'phase':<{width}} {'rows':>5} {'R²':>8} {'median |rel err|':>17} {'max':>8}")
    for phase, pf in fit.fit.phases.items():
        pr2 = "n/a" if pf.r2 is None else f"{pf.r2:.4f}"
        lines.append(
            f"  {phase:<{width}} {pf.rows:>5} {pr2:>8} {_pct(pf.median_rel_error):>17} "
            f"{_pct(pf.max_rel_error):>8}"
        )
    note = "; step: index of a step rebuilt from runs" if fit.runs is not None else ""
    lines.append(f"worst rows (line in the CSV{note}):")
    for w in fit.fit.worst_rows:
        where = f"step {w.row}" if w.phase.startswith("runs:") else f"line {w.row}"
        lines.append(
            f"  {where}: {w.phase} batch={w.batch_size} input={w.input_tokens} "
            f"context={w.context_len}: measured {w.measured_ms:.3f} ms, "
            f"predicted {w.predicted_ms:.3f} ms ({w.rel_error:+.1%})"
        )
    lines += _noise_lines(fit.noise)
    if fit.wake is not None:
        lines.append(
            f"the engine's wake after idle (cost.wake: fitted): {fit.wake.ms:.1f} ms on the "
            f"first step after {fit.wake.after_s:g} s idle (the wake probe's {fit.wake.prompts} "
            f"lone prompts; {fit.wake.back_to_back_ms:.4g} ms back to back)"
            + (
                "; by idle gap: "
                + ", ".join(f"{g:g} s {e:+.1f} ms" for g, e in fit.wake.excess_ms.items())
                if fit.wake.excess_ms
                else ""
            )
        )
    if fit.prompt_save is not None:
        save = fit.prompt_save
        lines.append(
            f"llama.cpp's prompt cache save (cost.prompt_save: fitted): {save.ms_per_token:.4f} "
            f"ms a token saved at a launch (the prompt-cache probe's {save.prompts} lone "
            "prompts; median wait by tokens saved: "
            + ", ".join(f"{n} {ms:.1f} ms" for n, ms in save.median_wait_ms.items())
            + ")"
        )
        if save.reused_ms_per_token is not None:
            lines.append(
                f"  into memory the cache held before: {save.reused_ms_per_token:.4f} ms a "
                f"token (the probe again on a full cache, {save.reused_prompts} lone prompts; "
                + ", ".join(f"{n} {ms:.1f} ms" for n, ms in save.reused_median_wait_ms.items())
                + ")"
            )
    if fit.fit.unmeasured_terms:
        lines.append(
            "not measured (no row exercises them; fitted as 0): "
            + ", ".join(fit.fit.unmeasured_terms)
        )
    return "\n".join(lines)


def residuals_figure(fit: ProfileFit, profile_path: Path, titled: bool = True) -> Figure:
    """*fit* against the profile at *profile_path* (see
    :func:`lyra_simpy.output.plots.profile_residuals`), titled with its hardware and model
    unless *titled* is false (a paper figure has its caption outside)."""
    import lyra_simpy.output.plots as plots
    from lyra_simpy.calibration.fit import predict_ms

    profile = read_profile(profile_path)
    title = " ".join(str(fit.metadata.get(k, "")) for k in ("hardware", "model")).strip()
    return plots.profile_residuals(
        profile.latency_ms, predict_ms(fit, profile), profile.phase, (titled and title) or None
    )


def save_residuals(fit: ProfileFit, profile_path: Path, out: Path) -> None:
    """Save :func:`residuals_figure` to *out*, atomically."""
    import lyra_simpy.output.plots as plots

    fig = residuals_figure(fit, profile_path)
    atomic_write(out, lambda tmp: plots.save(fig, tmp))


def _noise_lines(noise: NoiseFit | None) -> list[str]:
    """What the fit's ``noise`` holds, a line each (for ``cost.jitter``'s ``fitted``)."""
    if noise is None:
        return []
    out = [
        f"step-time noise (cost.jitter: fitted): sigma {noise.sigma:.4g} "
        f"(robust spread of ln(measured / fitted) over {noise.rows} rows)"
    ]
    if (spells := noise.spells) is not None:
        out.append(
            f"slow spells (cost.jitter.spells: fitted): {spells.share:.1%} of "
            f"{spells.decode_steps} decode steps at {spells.factor:.2f}x, "
            f"{spells.steps:.1f} steps a spell "
            f"(mean step x{spells.mean_factor:.3f})"
        )
    if (wander := noise.wander) is not None:
        out.append(
            f"the host's wander (cost.jitter.wander: fitted): sigma {wander.sigma:.3g} over "
            f"{wander.seconds:.3g} s ({WANDER_FROM[wander.source]}' autocovariance, "
            f"{wander.pairs} pairs)"
        )
    if (session := noise.session) is not None:
        out.append(
            f"the host's speed between minutes (cost.jitter.session_cv: fitted): cv "
            f"{session.cv:.3g} (the profile's {session.references} speed references in "
            f"{session.stretches} stretches)"
        )
    return out
