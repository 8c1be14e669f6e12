"""The ``profile`` cost model: fitted to measured engine steps (DESIGN §3, §4).

YAML: ``cost: {name: profile, path: fits/a100_llama2_7b.yaml}`` names a fit file written
by ``lyra-simpy calibrate PROFILE.csv --out ...``; ``path`` may also name a profile CSV,
which is then fitted when the scenario is loaded. Relative paths are read from the
scenario's folder. The terms and how they are fitted are in
:mod:`lyra_simpy.calibration.fit`::

    t_ms = fixed + per_decode_seq × rows + per_context_token × Σ context
         + per_prefill_token × prompt tokens + per_prefill_attention × Σ new × (cached + new)
         + per_extra_pass × (passes − 1) + per_checkpoint × checkpoints
         + per_output_pass × output passes + per_computed_attention × computed cells

where *rows* is the decode row count, padded (:mod:`~lyra_simpy.cost.padding`) in
decode-only iterations as for ``linear``. The last three terms are llama.cpp's: forward
passes beyond the first, context checkpoints, and passes that compute logits (a
decode-only step has as many as passes; ``BatchShape.passes``/``checkpoints``/
``output_passes``); they are 0 in fits of profiles that do not measure them. A
decode-only step of several passes whose rows per pass are known
(``BatchShape.pass_rows``) is priced pass by pass instead where the fit allows
(``decode_passes``). A fit of a
profile with the ``attention_cells`` column (llama.cpp: ``ProfileFit.attention`` is
``n_kv``) prices prompt attention per prompt token × KV cell attended, on
``BatchShape.prefill_attention_cells``, instead of Σ new × (cached + new); one with the
``attention_computed`` column also prices the attention llama.cpp's flash attention
computes (``BatchShape.prefill_computed_cells``: the tiles its mask leaves open, where
the cells count every cell a pass spans, which its mask scan reads). With a fit that
has ``prompt_save`` (llama.cpp's prompt cache in RAM, measured by the profile's probe)
each token the server copies into the cache before a step adds ``ms_per_token``
(``BatchShape.saved_tokens``, ``prompt_save``), or ``reused_ms_per_token`` where the fit
has it for a token copied into memory the cache held before
(``BatchShape.saved_reused_tokens``). Outside the
profile's measured grid each term extends linearly; with non-negative coefficients time
never falls as a batch grows. ``speed`` multiplies every time the fit prices (the host's
step time at the load over its step time when profiled; ``compare --steps`` gives it
from a real run), ``prompt_speed`` instead of it the steps that hold prompt tokens. The
file is read (and a CSV fitted) while the scenario is validated, so a missing or
malformed profile fails before anything is simulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lyra_simpy.config import Closed
from lyra_simpy.cost.base import BatchShape, affine_span_s, verify_rows_tokens
from lyra_simpy.cost.jitter import Jitter, refuse_fitted_lacking
from lyra_simpy.cost.padding import Padder, Padding, check_padding
from lyra_simpy.cost.wake import Wake
from lyra_simpy.errors import LyraError
from lyra_simpy.files import per_file_version

if TYPE_CHECKING:  # the fit's pydantic models load with the first profile scenario
    from lyra_simpy.calibration.fitmodel import ProfileFit


def _resolve(path: str, info: ValidationInfo) -> Path:
    """*path* read from the scenario's folder (the validation context's ``base_dir``)."""
    return Path((info.context or {}).get("base_dir") or Path.cwd()) / path


@per_file_version(maxsize=32)
def _load(path: Path) -> ProfileFit:
    """The fit at *path*, read once per file version (validation asks twice)."""
    from lyra_simpy.calibration.fitfile import load_fit

    return load_fit(path)


class ProfileCostConfig(Closed):
    """A cost model fitted to a profile; *path* is a fit YAML or a profile CSV."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["profile"] = "profile"
    path: str
    """Fit file from ``lyra-simpy calibrate`` (or a profile CSV, fitted on load),
    relative to the scenario's folder."""
    padding: Annotated[Padding, BeforeValidator(check_padding)] = Field(default="none")
    """CUDA-graph padding of decode-only batches (none, max_batch, or captured sizes)."""
    decode_table: bool = False
    """Add the fit's ``decode_batch_residual_ms`` to decode-only steps: the measured
    decode grid, interpolated in batch size between measured sizes and held at the
    nearest one outside them, over the linear terms (for an engine whose decode step
    is not linear in the batch, e.g. llama.cpp on a CPU: 1 → 2 sequences jumps)."""
    decode_passes: Literal["each", "together"] = "each"
    """How a decode-only step of several forward passes is priced (llama.cpp with
    per-slot KV runs one pass per run of consecutive slot ids, ``BatchShape.pass_rows``).
    ``each`` (default): every pass as a lone decode step of its own rows — the fixed
    terms, its rows and, with ``decode_table``, the table at its rows — plus the fit's
    ``decode_pass_gap_ms`` for each pass beyond one. llama.cpp computes each ubatch's
    graph on its own (``llama_context::decode``, ``src/llama-context.cpp``), and a CPU's
    decode step is not linear in its rows, so a pass of 2 beside a pass of 1 costs a lone
    2 plus a lone 1, not 3 rows plus a pass (docs/VALIDATION-llamacpp.md item 54).
    ``together``: the step's rows as one decode step plus ``per_extra_pass_ms`` and
    ``per_output_pass_ms`` for each pass beyond one (the model before item 54). Without
    ``decode_table``, without the step's ``pass_rows`` or with a fit lacking
    ``decode_pass_gap_ms`` (a profile with no decode row of several passes), a step is
    priced ``together``."""
    jitter: Jitter | None = None
    """Seeded step-time noise on every iteration (default none: exact times); see
    :mod:`~lyra_simpy.cost.jitter`."""
    wake: Wake | None = None
    """The first iteration after idle takes longer (default none); ``fitted``: the fit
    file's ``wake`` (the profile's wake probe); see :mod:`~lyra_simpy.cost.wake`."""
    prompt_save: Literal["fitted", "off"] = "fitted"
    """llama.cpp's prompt cache in RAM (``--cache-ram``, on by default): ``fitted``
    (default) charges the fit's ``prompt_save.ms_per_token`` (the profile's prompt-cache
    probe, :mod:`~lyra_simpy.calibration.savefit`) for every token the ``llamacpp``
    engine model says the server copies into the cache before a step
    (``BatchShape.saved_tokens``, :mod:`~lyra_simpy.policies.llamacpp_save`), and for
    those copied into memory the cache held before (``BatchShape.saved_reused_tokens``)
    its ``reused_ms_per_token`` where it has one (the probe again on a full cache,
    ``grid.save_fill_prompts``); nothing with a fit that has no ``prompt_save``.
    ``off``: never (the model before docs/VALIDATION-llamacpp.md item 63)."""
    speed: PositiveFloat = 1.0
    """Every time the fit prices × this — its terms, its decode residuals and a
    ``fitted`` wake: the host's step time when the load runs over its step time when it
    was profiled (1: as profiled). A shared or thermally limited host does not run at
    one speed; read it from a real run with ``compare --steps`` (its decode steps'
    *mean* measured / charged: a request's TPOT sums its steps, so a tail of slow
    steps counts), or before it with ``lyra-simpy speed`` (the median of a few lone
    decode steps over the profile's ``speed_reference``; :mod:`lyra_simpy.live.speed`) or
    from the full batch's step timed right before the load over the profile's row for it
    (``lyra-simpy speed --batch B``, the better of the two on the llama.cpp matrix,
    docs/VALIDATION-llamacpp.md items 42–43).
    On the llama.cpp matrix's 2-core host the runs' decode steps
    ran 0.91–1.06 × their profile, and every load priced at its own runs' mean step
    holds 201 of 210 cells against 177 at 1 (docs/VALIDATION-llamacpp.md item 37,
    ``validation/llamacpp_at_speed.py --ratio mean``; the ratios are ``--summary``'s
    last column of that item's kept set)."""

    prompt_speed: PositiveFloat | None = None
    """Every step that holds prompt tokens priced × this instead of ``speed`` (None, the
    default: ``speed``, one speed for every step); decode-only steps and the wake stay
    at ``speed``. A host whose memory bandwidth and arithmetic are shared with other
    tenants in different measure does not move a decode step (it reads the weights) and a
    prompt step (it computes on them) by the same factor: on the llama.cpp matrix's
    AMD EPYC VM four of one point's five loads took their decode steps at 0.86-0.90 ×
    what the profile charged and their prompt steps at 1.00-1.02 ×
    (docs/VALIDATION-llamacpp.md item 70).
    ``compare --steps`` gives both from a real run: ``cost.speed`` from the decode-only
    steps' mean measured / charged, ``cost.prompt_speed`` from the prompt steps'."""

    _fit: ProfileFit | None = PrivateAttr(default=None)
    _resolved: Path | None = PrivateAttr(default=None)

    @field_validator("path")
    @classmethod
    def _readable(cls, value: str, info: ValidationInfo) -> str:
        try:
            _load(_resolve(value, info))
        except LyraError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _keep(self, info: ValidationInfo) -> ProfileCostConfig:
        self._resolved = _resolve(self.path, info).resolve()
        self._fit = _load(self._resolved)
        if self.decode_table and not self._fit.decode_batch_residual_ms:
            raise ValueError(
                f"decode_table: got true, but the fit {self.path!r} has no decode rows' "
                "residuals (profile decode steps and run lyra-simpy calibrate again)"
            )
        refuse_fitted_lacking(self.jitter, self._fit.noise, self.path)
        if self.wake == "fitted" and self._fit.wake is None:
            raise ValueError(
                f"wake: got 'fitted', but the fit {self.path!r} has no wake (profile with "
                "grid.wake_gaps_s and run lyra-simpy calibrate again, or give {after_s: s, "
                "ms: ms})"
            )
        return self

    @property
    def fit(self) -> ProfileFit:
        """The fitted model (loaded while validating)."""
        assert self._fit is not None
        return self._fit

    def kv_blocks(
        self, block_size: int, mem_fraction: float, activation_reserve_gib: float, max_running: int
    ) -> int | None:
        """None: a profile names no device to size the KV pool from."""
        return None

    def calibration(self) -> dict[str, Any]:
        """Where the coefficients came from, for the run's manifest."""
        fit = self.fit
        return {
            "fit_file": str(self._resolved),
            "profile": fit.profile.model_dump(mode="json") if fit.profile else None,
            **({"runs": fit.runs.model_dump(mode="json")} if fit.runs else {}),
            "profile_metadata": fit.model_dump(mode="json")["metadata"],  # dates as text
            "method": fit.method,
            "coefficients": fit.coefficients.model_dump(mode="json"),
            "speed": self.speed,  # (every time above priced × it)
            **({"prompt_speed": self.prompt_speed} if self.prompt_speed is not None else {}),
            "fit_quality": {
                "r2": fit.fit.r2,
                "phases": {k: v.model_dump(mode="json") for k, v in fit.fit.phases.items()},
                "unmeasured_terms": fit.fit.unmeasured_terms,
            },
            "measured_grid": fit.grid,
        }


class ProfileCost:
    """Iteration time from a fitted profile; *max_batch* resolves ``max_batch`` padding
    to the scheduler's batch width."""

    def __init__(self, config: ProfileCostConfig, max_batch: int) -> None:
        self.config = config
        c, speed = config.fit.coefficients, config.speed
        self._fixed_ms = c.fixed_ms * speed
        self._per_seq = c.per_decode_seq_ms * speed
        self._per_ctx = c.per_context_token_ms * speed
        self._per_prefill = c.per_prefill_token_ms * speed
        self._per_attention = c.per_prefill_attention_ms * speed
        self._per_pass = c.per_extra_pass_ms * speed
        self._per_checkpoint = c.per_checkpoint_ms * speed
        self._per_output = c.per_output_pass_ms * speed
        self._per_computed = c.per_computed_attention_ms * speed
        self._prompt_scale = config.prompt_speed / speed if config.prompt_speed is not None else 1.0
        """A step with prompt tokens: its time at ``speed`` × this (``prompt_speed``)."""
        save = config.fit.prompt_save if config.prompt_save == "fitted" else None
        self._per_saved = save.ms_per_token * speed if save is not None else 0.0
        reused = save.reused_ms_per_token if save is not None else None
        self._per_reused = reused * speed if reused is not None else self._per_saved
        """A token saved into memory the cache held before (``saved_reused_tokens``)."""
        self._cells = config.fit.attention == "n_kv"
        """The attention term is per prompt token × cell attended (llama.cpp's ``n_kv``):
        charged on ``BatchShape.prefill_attention_cells`` where the scheduler gives it."""
        self._pad = Padder(config.padding, max_batch)
        table = config.fit.decode_batch_residual_ms if config.decode_table else {}
        self._sizes = np.array(sorted(table), dtype=np.float64)
        self._residuals = np.array([table[k] * speed for k in sorted(table)], dtype=np.float64)
        self._fixed: dict[int, float] = {}
        """Row count → fixed part of a decode-only iteration (ms), computed once."""
        gap = config.fit.decode_pass_gap_ms
        self._pass_gap = (
            gap * speed
            if gap is not None and config.decode_passes == "each" and config.decode_table
            else None
        )
        """Each pass beyond one of a decode-only step priced pass by pass (``decode_passes:
        each``; None: ``together``)."""

    def iteration_s(self, shape: BatchShape) -> float:
        passes, checkpoints, outputs = shape.passes, shape.checkpoints, shape.output_passes
        saved = shape.saved_tokens
        if saved:
            reused = shape.saved_reused_tokens
            saved_ms = self._per_saved * (saved - reused) + self._per_reused * reused
        else:
            saved_ms = 0.0
        extra = passes != 1 or checkpoints != 0 or outputs != 1 or saved != 0
        if not shape.prefill_seqs and not shape.verify_tokens:
            if extra:  # (never fused: see BatchShape.passes)
                if (
                    self._pass_gap is not None
                    and len(shape.pass_rows) == passes
                    and not checkpoints
                    and outputs == passes
                ):  # each pass a lone decode step of its rows (decode_passes: each)
                    ms = sum(self._decode_fixed_ms(n) for n in shape.pass_rows)
                    ms += self._per_ctx * shape.decode_context_tokens + saved_ms
                    return (ms + self._pass_gap * (passes - 1)) / 1000.0
                fixed = self.decode_span_s(shape.decode_rows, 0, 0, 1)[0] * 1000.0
                ms = fixed + self._per_ctx * shape.decode_context_tokens
                return (ms + self._extra_ms(passes, checkpoints, outputs, saved_ms)) / 1000.0
            return self.decode_span_s(shape.decode_rows, shape.decode_context_tokens, 0, 1)[0]
        rows = shape.decode_rows if shape.prefill_seqs else self._pad(shape.decode_rows)
        verify = verify_rows_tokens(shape, rows)
        ms = (
            self._fixed_ms
            + self._per_output
            + self._per_seq * rows
            + self._per_ctx * shape.decode_context_tokens
            + self._per_prefill * (shape.prefill_tokens + verify)
            + self._per_attention
            * (
                shape.prefill_attention_cells
                if self._cells and shape.prefill_attention_cells >= 0
                else shape.prefill_attention_tokens
            )
            + self._per_computed * shape.prefill_computed_cells
        )
        if verify:  # each draft token attends to its sequence's context, like a prompt token
            per_seq = shape.verify_tokens / shape.decode_seqs
            ms += self._per_attention * per_seq * shape.decode_context_tokens
            if not shape.prefill_seqs:
                ms += self._residual_ms(rows)
        if extra:
            ms += self._extra_ms(passes, checkpoints, outputs, saved_ms)
        if shape.prefill_seqs:
            ms *= self._prompt_scale
        return ms / 1000.0

    def _extra_ms(self, passes: int, checkpoints: int, outputs: int, saved_ms: float) -> float:
        """llama.cpp's forward passes beyond one, context checkpoints, passes computing
        logits other than one (the step's own one is in the fixed part) and *saved_ms*,
        the copy of states into its prompt cache (BatchShape)."""
        return (
            self._per_pass * (passes - 1)
            + self._per_checkpoint * checkpoints
            + self._per_output * (outputs - 1)
            + saved_ms
        )

    def _residual_ms(self, rows: int) -> float:
        """The decode table's correction at *rows* (0 without the table)."""
        if not len(self._sizes):
            return 0.0
        return float(np.interp(rows, self._sizes, self._residuals))

    def _decode_fixed_ms(self, rows: int) -> float:
        """A decode-only step of *rows* rows in one pass, less its context term (ms)."""
        fixed = self._fixed.get(rows)
        if fixed is None:
            padded = self._pad(rows)
            fixed = (
                self._fixed_ms + self._per_output + self._per_seq * padded
                + self._residual_ms(padded)
            )  # fmt: skip
            self._fixed[rows] = fixed
        return fixed

    def decode_span_s(self, rows: int, context_tokens: int, growth: int, k: int) -> list[float]:
        return affine_span_s(self._decode_fixed_ms(rows), self._per_ctx, context_tokens, growth, k)
