"""Fitting the ``profile`` cost model to a profile CSV, and its fit report.

The model has one non-negative coefficient per physical term (milliseconds)::

    t_ms = fixed_ms                                  weights read, launches, scheduling
         + per_decode_seq_ms × decode rows           per-sequence work of a decode
         + per_context_token_ms × Σ context tokens   KV read by decode attention
         + per_prefill_token_ms × prompt tokens      GEMMs over the new prompt tokens
         + per_prefill_attention_ms × Σ new × (cached + new)   prefill attention (quadratic)
         + per_extra_pass_ms × (passes − steps)      llama.cpp: ubatches beyond one a step
         + per_checkpoint_ms × checkpoints           llama.cpp: context checkpoint copies
         + per_output_pass_ms × output passes        llama.cpp: passes computing logits
         + per_computed_attention_ms × computed cells   llama.cpp: flash-attention tiles

The first term is charged once per engine step the row covers (``steps``, 1 unless the
profile says otherwise); the last four only for a profile with step columns
(:data:`~lyra_simpy.calibration.profiles.STEP_COLUMNS`), the very last only where it also
has the ``attention_computed`` column. The output-pass term is llama.cpp's output
projection: a forward pass computes logits only when it holds an output row (a decode,
or a prompt's last token; :func:`~lyra_simpy.policies.ubatch.pass_counts`), over the
whole vocabulary — on Gemma 3 270M (262k × 640) more weight than all its layers. A
decode step has one such pass (or one per run of slots), a prompt's last step one, and a
step of prompt chunks that end no prompt (the first step of a prompt cut for a context
checkpoint, or by ``n_batch``) none; ``fixed_ms`` is then a step's cost without logits.
Without the term it was one average of both kinds of step: the probe rows of the
llama.cpp matrix's six profiles fit 1–7 % rms with it, 6–11 % without
(docs/calibration.md §9).
Fits of other engines' profiles (no step columns) leave it 0: a step's logits are in
``fixed_ms``, as vLLM and SGLang compute them in every step. A profile with the
``attention_cells`` column (llama.cpp) gives the attention term its own units: prompt
tokens × the KV cells each attends over (``ProfileFit.attention: n_kv``; the engine's
padded ``n_kv``, :mod:`~lyra_simpy.policies.llamacpp`). Its CPU flash attention reads
the mask of every such cell but computes only the 64 × 64 (query row, cell) tiles the
mask leaves open — a prompt's own cells, causal — so with the ``attention_computed``
column (:func:`~lyra_simpy.policies.llamacpp_attention.step_attention`) the attention is two
terms: ``per_prefill_attention_ms`` per cell spanned (the mask scan) and
``per_computed_attention_ms`` per pair computed. Four prompts of 290 tokens sent
together cost 13 % less than one of 1 160 on the same passes and cells
(``validation/llamacpp_masked.py``, docs/calibration.md §9).

A profile row maps onto the terms as DESIGN §4 defines the phases: a ``prefill`` row is
``batch_size`` prompts of ``input_tokens`` new tokens after ``context_len`` cached ones;
a ``decode`` row is ``batch_size`` decodes at ``context_len`` each; a ``mixed`` row is
``batch_size`` decodes at ``context_len`` plus ``input_tokens`` prompt tokens, taken as
*one* prompt chunk with nothing cached (the contract does not say how they split).

The fit is non-negative least squares (Lawson–Hanson, ``scipy.optimize.nnls``) on the
*relative* error: each row is divided by its measured latency, so a 10 ms decode step
counts as much as a 2 s prefill (an absolute fit would ignore short steps). Columns are
scaled to unit maximum before solving (the terms differ by ten orders of magnitude).
A term no row exercises (e.g. no decode rows) is fitted as 0 and listed in the report's
``unmeasured_terms``: the model then knows nothing about it.

``loss: soft_l1`` (``calibrate --loss soft_l1``) fits the same relative errors with a
robust loss instead (``scipy.optimize.least_squares``, ``loss="soft_l1"``, coefficients
bounded at 0, started from the NNLS solution): an error *e* costs
``2 × ((1 + (e/s)²)^½ − 1)`` with *s* = :data:`ROBUST_SCALE`, quadratic below *s* and
linear above, so a few rows slowed by the host (VALIDATION-NOTES: a whole run now and
then 1.3–2× slower) pull the coefficients less than under squares. NNLS stays the
default: on the committed profiles the robust fit is not better (docs/calibration.md §2).

``loss: soft_l1_log`` (``calibrate --loss soft_l1_log``) takes the same robust loss of
the *log* of predicted ÷ measured instead of predicted ÷ measured − 1. The relative error
is lopsided: a row measured 40× too short costs 40 / *s* under ``soft_l1`` and dominates
a fit of thousands, while one measured 40× too long costs under 1 / *s*. The log is
symmetric (×40 either way costs ln 40 / *s*). Steps rebuilt from streams
(:mod:`~lyra_simpy.calibration.runs`) have such short rows: where the client got one
step's tokens further apart than the rebuild's gap, a step splits in two and the second
part, with the prompt in it, lasts a few ms. On the llama.cpp matrix's ``-np 4`` long
runs one such row of 2 986 (216 prompt tokens in 7.4 ms) put all the prompt's cost on
the attention term under ``soft_l1`` and charged 200-token prompts half their time; the
log fit charges every range of prompt sizes within 1 % of its median (``compare --steps``)
(docs/VALIDATION-llamacpp.md item 26). Same start (the NNLS solution), same bounds, same *s* (a log
ratio of 0.05 is a 5 % error).

Beside the terms the fit records, per measured decode batch size, the *median* residual
of its decode rows (``decode_batch_residual_ms``; a median, so one slow episode while
profiling does not move it as it moves a mean); a ``profile`` cost model with
``decode_table: true`` adds it to decode-only steps, interpolated linearly between the
measured sizes and held at the nearest measured size outside them (so a batch never
costs less than the linear terms say beyond the grid, nor jumps there). Where the rows
say how many forward passes they took, the table takes the one-pass rows, and the rows of
several passes whose rows per pass are known give ``decode_pass_gap_ms``
(:func:`decode_pass_gap`): what a pass costs beyond a lone decode step of its rows, for a
cost that prices a llama.cpp decode step pass by pass (``cost.decode_passes: each``).

Outside the measured grid the model extends each term linearly (it is linear in the
terms), so a larger batch or context never crashes and never costs less: the
coefficients are non-negative, so time is monotone in every term. The grid is recorded
in the fit file so that a reader sees how far a scenario extrapolates.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from lyra_simpy.calibration.fitmodel import (
    ALL_TERMS,
    Coefficients,
    FitReport,
    PhaseFit,
    ProfileFit,
    ProfileSource,
    RowError,
)
from lyra_simpy.calibration.noisefit import SessionFit, WanderFit, noise_fit
from lyra_simpy.calibration.profiles import (
    PHASES,
    Profile,
    decode_slots,
    read_speed_references,
    read_wander,
)
from lyra_simpy.calibration.savefit import with_profile_save
from lyra_simpy.calibration.wakefit import with_profile_wake
from lyra_simpy.cost.hostnoise import fitted_session, fitted_wander
from lyra_simpy.policies.ubatch import pass_counts

Loss = Literal["nnls", "soft_l1", "soft_l1_log"]
METHODS: dict[str, str] = {
    "nnls": "nnls_relative",
    "soft_l1": "soft_l1_relative",
    "soft_l1_log": "soft_l1_log_ratio",
}
"""``ProfileFit.method`` for each ``loss``."""
ROBUST_SCALE = 0.05
"""Relative error at which ``soft_l1`` turns from quadratic to linear (5 %: about the
real engine's own run-to-run band on p50 latencies, VALIDATION-NOTES "Noise floor";
an error inside it counts as noise, one far outside as an outlier)."""
LOG_START = 1e-9
"""Where ``soft_l1_log`` starts a coefficient that NNLS put at 0 (in the fit's scaled
units, each column's largest entry 1): a prediction of 0 has no log."""
WORST_ROWS = 5
Floats = npt.NDArray[np.float64]


def design_matrix(profile: Profile, cells: bool = True) -> npt.NDArray[np.float64]:
    """One column per term of :data:`TERMS`, one row per profile row (*cells*: the
    attention column from the profile's ``attention_cells`` where it has one)."""
    b = profile.batch_size.astype(np.float64)
    i = profile.input_tokens.astype(np.float64)
    c = profile.context_len.astype(np.float64)
    pre = profile.phase == "prefill"
    dec = ~pre  # decode and mixed rows both decode batch_size sequences
    mixed = profile.phase == "mixed"
    prompt_tokens = np.where(pre, b * i, np.where(mixed, i, 0.0))
    if cells and profile.attention_cells is not None:
        attention = np.where(pre | mixed, profile.attention_cells.astype(np.float64), 0.0)
    else:
        attention = np.where(pre, b * i * (c + i), np.where(mixed, i * i, 0.0))
    steps = np.ones_like(b) if profile.steps is None else profile.steps.astype(np.float64)
    # A row over several steps (llama.cpp's checkpoint split) decodes its batch in each.
    columns = [
        steps,
        np.where(dec, b * steps, 0.0),
        np.where(dec, b * c * steps, 0.0),
        prompt_tokens,
        attention,
    ]
    step_columns = (profile.passes, profile.checkpoints, profile.output_passes)
    if any(x is not None for x in step_columns):
        passes = steps if profile.passes is None else profile.passes.astype(np.float64)
        checkpoints = (
            np.zeros_like(b) if profile.checkpoints is None else profile.checkpoints.astype(float)
        )
        if profile.output_passes is not None:
            outputs = profile.output_passes.astype(np.float64)
        else:  # (Profile.output_passes)
            outputs = np.where(pre, 1.0, np.where(mixed, steps, passes))
        computed = (
            np.zeros_like(b)
            if profile.attention_computed is None or not cells
            else np.where(pre | mixed, profile.attention_computed.astype(np.float64), 0.0)
        )
        columns += [passes - steps, checkpoints, outputs, computed]
    return np.column_stack(columns)


def r_squared(
    measured: npt.NDArray[np.float64], predicted: npt.NDArray[np.float64]
) -> float | None:
    """1 − SS_res / SS_tot, or None when the measurements do not vary."""
    ss_tot = float(np.sum((measured - measured.mean()) ** 2))
    if len(measured) < 2 or ss_tot == 0.0:
        return None
    return 1.0 - float(np.sum((predicted - measured) ** 2)) / ss_tot


def fit_coefficients(
    x: npt.NDArray[np.float64], latency_ms: npt.NDArray[np.float64], loss: Loss = "nnls"
) -> tuple[npt.NDArray[np.float64], list[str]]:
    """Non-negative coefficients minimising the squared relative error (``nnls``) or
    its robust ``soft_l1`` loss, and the terms no row exercises (fitted as 0)."""
    from scipy.optimize import least_squares, nnls  # here: importing costs ~0.4 s

    weighted = x / latency_ms[:, None]
    scale = np.abs(weighted).max(axis=0)
    used = scale > 0
    coef = np.zeros(x.shape[1])
    a = weighted[:, used] / scale[used]
    ones = np.ones(len(latency_ms))
    solution, _ = nnls(a, ones, maxiter=5000)
    if loss != "nnls":
        # the robust losses, from the NNLS solution: soft L1 of a row's predicted ÷
        # measured − 1, or of its log (which needs a @ b > 0: every row has a positive
        # column, fixed_ms its steps, and trf keeps b inside the bounds)
        log = loss == "soft_l1_log"
        if log and not np.all(np.any(a > 0, axis=1)):
            raise ValueError("soft_l1_log: a row with no positive term has no log")

        def fun(b: Floats) -> Any:
            return np.log(a @ b) if log else np.sum(a * b, axis=1) - ones

        def jac(b: Floats) -> Any:
            return a / (a @ b)[:, None] if log else a

        start = np.maximum(solution, LOG_START) if log else solution
        robust = least_squares(
            fun, start, jac=jac, bounds=(0.0, np.inf), loss="soft_l1",
            f_scale=ROBUST_SCALE, method="trf",
        )  # fmt: skip
        solution = np.maximum(robust.x, 0.0)
    coef[used] = solution / scale[used]
    return coef, [t for t, u in zip(ALL_TERMS[: x.shape[1]], used, strict=True) if not u]


RUN_PHASES = tuple(f"runs:{p}" for p in PHASES)
"""Phases of steps rebuilt from runs, reported apart from the profile's rows."""


def report(
    profile: Any,
    predicted: npt.NDArray[np.float64],
    unmeasured: list[str],
    lines: npt.NDArray[np.int64] | None = None,
) -> FitReport:
    """R², median and max relative error per phase, and the worst rows. *profile* is a
    :class:`Profile` or anything with its columns (rebuilt steps); *lines* numbers the
    rows (default: their CSV lines)."""
    measured = profile.latency_ms
    rel = (predicted - measured) / measured
    if lines is None:
        lines = np.arange(len(measured), dtype=np.int64) + 2
    phases = {}
    for phase in PHASES + RUN_PHASES:
        sel = profile.phase == phase
        if sel.any():
            phases[phase] = PhaseFit(
                rows=int(sel.sum()),
                r2=r_squared(measured[sel], predicted[sel]),
                median_rel_error=float(np.median(np.abs(rel[sel]))),
                max_rel_error=float(np.abs(rel[sel]).max()),
            )
    worst = np.argsort(-np.abs(rel), kind="stable")[:WORST_ROWS]
    return FitReport(
        r2=r_squared(measured, predicted),
        phases=phases,
        worst_rows=[
            RowError(
                row=int(lines[k]),
                phase=str(profile.phase[k]),
                batch_size=int(profile.batch_size[k]),
                input_tokens=int(profile.input_tokens[k]),
                context_len=int(profile.context_len[k]),
                measured_ms=float(measured[k]),
                predicted_ms=float(predicted[k]),
                rel_error=float(rel[k]),
            )
            for k in worst
        ],
        unmeasured_terms=unmeasured,
    )


def _grid(profile: Any) -> dict[str, dict[str, int]]:
    out = {}
    for phase in PHASES + RUN_PHASES:
        sel = profile.phase == phase
        if sel.any():
            out[phase] = {
                f"{bound}_{col}": int(getattr(np, bound)(getattr(profile, col)[sel]))
                for col in ("batch_size", "input_tokens", "context_len")
                for bound in ("min", "max")
            }
    return out


def fit_profile(profile: Profile, loss: Loss = "nnls") -> ProfileFit:
    """Fit the ``profile`` cost model to *profile* (*loss*: see the module docstring)."""
    x = design_matrix(profile)
    coef, unmeasured = fit_coefficients(x, profile.latency_ms, loss)
    predicted = rowwise_dot(x, coef)
    fit = ProfileFit(
        method=METHODS[loss],
        coefficients=coefficients_of(coef),
        profile=ProfileSource(
            path=str(profile.path),
            sha256=hashlib.sha256(profile.path.read_bytes()).hexdigest(),
            rows=len(profile),
            metadata_path=str(profile.metadata_path) if profile.metadata_path else None,
        ),
        metadata=profile.metadata,
        grid=_grid(profile),
        fit=report(profile, predicted, unmeasured),
        noise=noise_fit(profile.latency_ms, predicted),
        attention="n_kv" if profile.attention_cells is not None else "own",
        decode_batch_residual_ms=(residuals := decode_residuals(profile, predicted, x)),
        decode_pass_gap_ms=decode_pass_gap(profile, x, coef, residuals),
    )
    return with_profile_probes(fit, profile)


def with_profile_probes(fit: ProfileFit, profile: Profile | None) -> ProfileFit:
    """*fit* with what *profile*'s own probes show beside its rows, where it has them: the
    host's wander (:func:`with_profile_wander`), its speed between stretches
    (:func:`with_profile_session`), the engine's wake after idle
    (:func:`~lyra_simpy.calibration.wakefit.with_profile_wake`) and llama.cpp's prompt
    cache save (:func:`~lyra_simpy.calibration.savefit.with_profile_save`)."""
    fit = with_profile_session(with_profile_wander(fit, profile), profile)
    return with_profile_save(with_profile_wake(fit, profile), profile)


def with_profile_session(fit: ProfileFit, profile: Profile | None) -> ProfileFit:
    """*fit* with the host's speed between stretches of *profile* as long as a load run,
    from its speed references (``PROFILE.speed.csv``,
    :func:`~lyra_simpy.calibration.profiles.read_speed_references`;
    :func:`~lyra_simpy.cost.hostnoise.fitted_session`), where it has them and *fit* has
    noise."""
    if profile is None or fit.noise is None or fit.noise.session is not None:
        return fit
    refs = read_speed_references(profile.path)
    got = fitted_session(refs) if refs is not None else None
    if refs is None or got is None:
        return fit
    session = SessionFit(cv=got[0], references=len(refs), stretches=got[1])
    return fit.model_copy(update={"noise": fit.noise.model_copy(update={"session": session})})


def with_profile_wander(fit: ProfileFit, profile: Profile | None) -> ProfileFit:
    """*fit* with the host's wander of *profile*'s wander probe (``PROFILE.wander.csv``,
    :func:`~lyra_simpy.calibration.profiles.read_wander`) where it has one and *fit* has
    noise but no wander yet: the probe's steps over what *fit* charges them,
    :func:`~lyra_simpy.cost.hostnoise.fitted_wander`."""
    if profile is None or fit.noise is None or fit.noise.wander is not None:
        return fit
    probe = read_wander(profile.path)
    if probe is None:
        return fit
    steps, ends = probe
    predicted = predict_ms(fit, steps)
    if not (predicted > 0).all():
        return fit
    got = fitted_wander([(ends, steps.latency_ms / predicted)])
    if got is None:
        return fit
    wander = WanderFit(**got[0].model_dump(), pairs=got[1], source="profile")
    return fit.model_copy(update={"noise": fit.noise.model_copy(update={"wander": wander})})


def coefficients_of(coef: Floats) -> Coefficients:
    """:class:`Coefficients` of a fitted vector (the base terms, then the llama.cpp terms
    when the design matrix had their columns)."""
    return Coefficients(**dict(zip(ALL_TERMS, coef.tolist(), strict=False)))


_EXTRA = ALL_TERMS.index("per_extra_pass_ms")
_CHECKPOINT = ALL_TERMS.index("per_checkpoint_ms")
_OUTPUT = ALL_TERMS.index("per_output_pass_ms")


def _decode_rows(profile: Any) -> npt.NDArray[np.bool_]:
    return np.asarray((profile.phase == "decode") | (profile.phase == "runs:decode"))


def decode_residuals(profile: Any, predicted: Floats, x: Floats | None = None
                     ) -> dict[int, float]:  # fmt: skip
    """Median measured − predicted latency of the decode rows (and decode steps rebuilt
    from runs) of each batch size; with *x* (their design matrix) of those in one
    forward pass where the size has any (several passes are priced pass by pass,
    :func:`decode_pass_gap`)."""
    decode = _decode_rows(profile)
    one_pass = x[:, _EXTRA] == 0 if x is not None and x.shape[1] > _EXTRA else decode
    out = {}
    for size in sorted(set(profile.batch_size[decode].tolist())):
        rows = decode & (profile.batch_size == size)
        if (rows & one_pass).any():
            rows &= one_pass
        out[int(size)] = float(np.median(profile.latency_ms[rows] - predicted[rows]))
    return out


def profile_pass_rows(batch: int, passes: int) -> tuple[int, ...] | None:
    """The decode rows of each pass of a profile's decode row of *batch* sequences in
    *passes* passes: the runs of consecutive slots ``lyra-simpy profile`` pins them to
    (:func:`~lyra_simpy.calibration.profiles.decode_slots`: a pass each, or B − 1 beside
    1); None for a shape it does not lay out."""
    try:
        slots = decode_slots(batch, passes)
    except ValueError:
        return None
    # cut as the engine model cuts a decode step: a pass per run of consecutive slots
    return pass_counts([(s, 1) for s in slots], [True] * batch, batch, batch, False).rows


def profile_rows_by_pass(profile: Profile) -> list[tuple[int, ...] | None]:
    """:func:`profile_pass_rows` of each of *profile*'s rows (one pass a row where it does
    not say)."""
    passes = profile.passes if profile.passes is not None else np.ones_like(profile.batch_size)
    return [profile_pass_rows(int(b), int(n))
            for b, n in zip(profile.batch_size, passes, strict=True)]  # fmt: skip


def decode_pass_gap(
    profile: Any,
    x: Floats,
    coef: Floats,
    residuals: dict[int, float],
    pass_rows: list[tuple[int, ...] | None] | None = None,
) -> float | None:
    """``ProfileFit.decode_pass_gap_ms``: over the decode rows (and rebuilt decode steps)
    of several forward passes whose rows per pass are known — *pass_rows*, one entry per
    row (None: unknown); by default a profile's (:func:`profile_rows_by_pass`) — the median
    of what a row took beyond its passes priced as lone decode steps of their rows (the
    fit's fixed, output-pass and sequence terms and the decode table as the cost model
    interpolates it) and its context term, per pass beyond one. None where there is no
    such row."""
    if x.shape[1] <= _OUTPUT:
        return None
    b = profile.batch_size.astype(np.int64)
    passes = np.rint(x[:, _EXTRA] + x[:, 0]).astype(np.int64)
    hit = _decode_rows(profile) & (passes >= 2) & (x[:, 0] == 1) & (x[:, _CHECKPOINT] == 0)
    if pass_rows is None:
        pass_rows = profile_rows_by_pass(profile)
    sizes = sorted(residuals)
    table = [residuals[k] for k in sizes]

    def lone(n: int) -> float:
        extra = float(np.interp(n, sizes, table)) if sizes else 0.0
        return float(coef[0] + coef[_OUTPUT] + coef[1] * n + extra)

    gaps = []
    for i in np.flatnonzero(hit):
        split = pass_rows[i]
        if split is None or len(split) != passes[i] or sum(split) != b[i]:
            continue
        took = profile.latency_ms[i] - sum(lone(n) for n in split) - coef[2] * x[i, 2]
        gaps.append(took / (passes[i] - 1))
    return float(np.median(gaps)) if gaps else None


def predict_ms(fit: ProfileFit, profile: Profile) -> npt.NDArray[np.float64]:
    """The fitted model's latency for every row of *profile*."""
    c = fit.coefficients
    x = design_matrix(profile, cells=fit.attention == "n_kv")
    return rowwise_dot(x, np.array([getattr(c, t) for t in ALL_TERMS[: x.shape[1]]]))


def rowwise_dot(x: Floats, coef: Floats) -> Floats:
    """``x @ coef`` summed in a fixed order (NumPy's sum over each row), not by BLAS,
    whose order moves with its thread count: predictions and residuals that end up in
    fit files and results must not depend on ``OPENBLAS_NUM_THREADS``."""
    out: Floats = np.sum(x * coef, axis=1)
    return out
