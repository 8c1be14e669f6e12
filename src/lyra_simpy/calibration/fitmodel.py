"""The fit file's model: the ``profile`` cost model's terms and the records ``lyra-simpy
calibrate`` writes (:class:`ProfileFit` and its parts). How they are fitted is
:mod:`lyra_simpy.calibration.fit`; reading and writing the file,
:mod:`lyra_simpy.calibration.fitfile`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, NonNegativeFloat

from lyra_simpy.calibration.noisefit import NoiseFit
from lyra_simpy.calibration.savefit import SaveFit
from lyra_simpy.calibration.wakefit import WakeFit
from lyra_simpy.config import Closed

TERMS = (
    "fixed_ms",
    "per_decode_seq_ms",
    "per_context_token_ms",
    "per_prefill_token_ms",
    "per_prefill_attention_ms",
)
STEP_TERMS = (
    "per_extra_pass_ms",
    "per_checkpoint_ms",
    "per_output_pass_ms",
    "per_computed_attention_ms",
)
"""llama.cpp's terms, fitted only from a profile with ``passes``/``checkpoints`` columns
(:data:`~lyra_simpy.calibration.profiles.STEP_COLUMNS`); otherwise absent from the fit's
columns and 0 in its coefficients."""
ALL_TERMS = TERMS + STEP_TERMS
UNITS = {
    "fixed_ms": "ms per step",
    "per_decode_seq_ms": "ms per decode sequence",
    "per_context_token_ms": "ms per context token read by decode attention",
    "per_prefill_token_ms": "ms per prompt token computed",
    "per_prefill_attention_ms": "ms per (new x (cached + new)) prompt token pair",
    "per_extra_pass_ms": "ms per forward pass beyond a step's first (llama.cpp ubatch)",
    "per_checkpoint_ms": "ms per context checkpoint copied (llama.cpp)",
    "per_output_pass_ms": "ms per forward pass computing logits (llama.cpp output projection)",
    "per_computed_attention_ms": "ms per (query row, KV cell) pair of flash attention computed",
}
FORMAT = "lyra-simpy/profile-fit/1"


class _Closed(Closed):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Coefficients(_Closed):
    """The fitted terms, in milliseconds (see the module docstring)."""

    fixed_ms: NonNegativeFloat = 0.0
    per_decode_seq_ms: NonNegativeFloat = 0.0
    per_context_token_ms: NonNegativeFloat = 0.0
    per_prefill_token_ms: NonNegativeFloat = 0.0
    per_prefill_attention_ms: NonNegativeFloat = 0.0
    per_extra_pass_ms: NonNegativeFloat = 0.0
    per_checkpoint_ms: NonNegativeFloat = 0.0
    per_output_pass_ms: NonNegativeFloat = 0.0
    per_computed_attention_ms: NonNegativeFloat = 0.0


class PhaseFit(_Closed):
    """Fit quality over the rows of one phase."""

    rows: int
    r2: float | None
    """Coefficient of determination of latency_ms (None with fewer than two distinct rows)."""
    median_rel_error: float
    """Median of |predicted − measured| / measured."""
    max_rel_error: float


class RowError(_Closed):
    """One row of the profile (or one step rebuilt from runs) with its prediction."""

    row: int
    """Line in the CSV (the header is line 1); for a ``runs:`` phase, the step's index
    among the rebuilt steps (from 0)."""
    phase: str
    batch_size: int
    input_tokens: int
    context_len: int
    measured_ms: float
    predicted_ms: float
    rel_error: float
    """(predicted − measured) / measured."""


class FitReport(_Closed):
    r2: float | None
    phases: dict[str, PhaseFit]
    worst_rows: list[RowError]
    unmeasured_terms: list[str]


class ProfileSource(_Closed):
    path: str
    """The profile CSV, relative to the fit file when written by ``calibrate``."""
    sha256: str
    rows: int
    metadata_path: str | None = None


class RunsSource(_Closed):
    """The replayed runs a fit's rebuilt steps came from (``calibrate --from-runs``)."""

    folders: list[str]
    """Run folders, relative to the fit file when written by ``calibrate``."""
    rebuild: dict[str, Any]
    """The :class:`~lyra_simpy.calibration.runs.StepRebuild` settings."""
    steps: int
    """Rebuilt steps fitted."""
    dropped_steps: int = 0
    """Rebuilt steps left out (``idle_start: drop``, or no known start)."""
    approximated_requests: int = 0
    """Requests whose stream held fewer chunks than tokens (counted by ``usage``): taken
    at one token a chunk, so the steps in which they decoded silently miss them."""


class ProfileFit(_Closed):
    """What ``lyra-simpy calibrate`` writes and a ``profile`` cost model reads."""

    format: str = FORMAT
    method: str = "nnls_relative"
    coefficients: Coefficients
    profile: ProfileSource | None
    """The profile CSV fitted (None: fitted on runs alone)."""
    runs: RunsSource | None = None
    """Replayed runs whose rebuilt steps were fitted too (None: a profile alone)."""
    metadata: dict[str, Any]
    """The profile's metadata YAML (hardware, model, engine, version, tp, date, ...)."""
    grid: dict[str, dict[str, int]]
    """Per phase, min and max of batch_size, input_tokens and context_len measured."""
    fit: FitReport
    noise: NoiseFit | None = None
    """Step-time noise fitted from the residuals (None in fits made before it existed)."""
    wake: WakeFit | None = None
    """The engine's wake after idle, from the profile's wake probe (None without one)."""
    prompt_save: SaveFit | None = None
    """llama.cpp's prompt cache in RAM: ms per token its main loop copies into the cache
    at a request's launch, from the profile's prompt-cache probe (None without one;
    :mod:`~lyra_simpy.calibration.savefit`)."""
    attention: Literal["own", "n_kv"] = "own"
    """What ``per_prefill_attention_ms`` is per: ``own``, a prompt token × its own
    sequence's cached and new tokens (Σ new × (cached + new)); ``n_kv``, a prompt token ×
    the KV cells its pass attends over (a profile with the ``attention_cells`` column:
    llama.cpp, :mod:`~lyra_simpy.policies.llamacpp`)."""
    decode_batch_residual_ms: dict[int, float] = Field(default_factory=dict)
    """Per measured decode batch size, the median of measured − fitted over its decode
    rows: what the linear terms miss at that size (e.g. a CPU engine's single-sequence
    matrix-vector fast path). A ``profile`` cost with ``decode_table: true`` adds it."""
    decode_pass_gap_ms: float | None = None
    """What a decode step of several forward passes costs beyond its passes priced as
    lone decode steps of their rows (fixed terms, the rows, the decode table at them)
    and its context, per pass beyond one: the median over the decode rows (and rebuilt
    decode steps) whose rows per pass are known (a profile's probes: a sequence a pass,
    or B − 1 beside 1, :func:`~lyra_simpy.calibration.fit.profile_pass_rows`). A
    ``profile`` cost with ``decode_passes: each`` prices every pass of a decode step at
    its own rows and adds this per pass beyond one. None: no such row (or a fit made
    before it)."""
