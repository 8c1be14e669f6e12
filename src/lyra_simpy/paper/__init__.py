"""Paper figures: one registry, ``PAPER_FIGURES``, of every figure in ``figures/``.

Each entry names the scenarios whose results it needs and a function of those results
(and of the repository's profiles and validation runs) that returns a matplotlib
``Figure``. A figure a scenario declares in its ``figures:`` list is drawn by the same
function :mod:`lyra_simpy.output.figures` uses for ``lyra-simpy run`` (the entry's name is the
file stem ``run`` gives it), so one figure has one drawing path. :func:`build`
(``lyra-simpy figures``, ``tox -e figures``) runs the scenarios whose results are missing
or stale and writes ``<name>.pdf`` and ``<name>.png`` for every entry, plus the
``README.md`` that lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from matplotlib.figure import Figure

from lyra_simpy.errors import LyraError
from lyra_simpy.scenario import Scenario


class MissingInputError(LyraError):
    """A figure whose inputs are absent (e.g. no real-engine runs): skipped, not failed."""


@dataclass(frozen=True, slots=True)
class FigureInputs:
    """What a figure function may read."""

    name: str
    """The figure's registry name (its file stem)."""
    results_dir: Path
    """Results root: ``<results_dir>/<scenario>/<variant>/`` (:mod:`lyra_simpy.output.writer`)."""
    scenarios: Mapping[str, Scenario]
    """The loaded scenarios the figure needs, by name."""
    root: Path
    """The repository root: ``profiles/``, ``docs/validation/``."""


@dataclass(frozen=True, slots=True)
class PaperFigure:
    """One figure: what it shows, what it needs, how it is drawn."""

    caption: str
    draw: Callable[[FigureInputs], Figure]
    scenarios: tuple[str, ...] = ()
    """Scenario names (``scenarios/<name>.yaml``) whose results *draw* reads."""
    before: str | None = None
    """A command to run first, for inputs no scenario makes (shown in the README)."""
    extra: tuple[str, ...] = field(default=())
    """Other inputs, repository-relative (shown in the README)."""


def draw_declared(inputs: FigureInputs, scenario: str) -> Figure:
    """The figure *scenario* declares under the file stem ``inputs.name``."""
    from lyra_simpy.output.figures import FIGURES

    sc = inputs.scenarios[scenario]
    for spec in sc.figures:
        if spec.file_stem(sc.name) == inputs.name:
            return FIGURES[spec.name](inputs.results_dir / scenario, spec)
    raise LyraError(f"{inputs.name}: scenario {scenario} declares no figure of that name")


def declared(scenario: str, caption: str) -> PaperFigure:
    """An entry for a figure in *scenario*'s ``figures:`` list."""
    return PaperFigure(caption, partial(draw_declared, scenario=scenario), (scenario,))


PROFILE = Path("profiles/a100_llama2_7b_vidur.csv")
"""The profile whose fit residuals the paper shows (the fit behind profile_fitted_cost)."""
VALIDATION = Path("docs/validation")
"""Where the validation job writes ``sim/<workload>/`` and ``real/<workload>/run*/``."""


def calibration_residuals(inputs: FigureInputs) -> Figure:
    from lyra_simpy.calibration.fitfile import calibrate, residuals_figure

    path = inputs.root / PROFILE
    return residuals_figure(calibrate(path), path, titled=False)


def sim_vs_real(inputs: FigureInputs) -> Figure:
    from lyra_simpy.paper.validation import find_validation_runs, sim_vs_real_figure

    workloads = find_validation_runs(inputs.root / VALIDATION)
    if not workloads:
        raise MissingInputError(f"no real results in {VALIDATION} (run tox -e validate-cpu)")
    return sim_vs_real_figure(workloads)


# fmt: off
PAPER_FIGURES: dict[str, PaperFigure] = {
    "lab02_static_vs_continuous_ttft_cdf": declared("lab02_static_vs_continuous",
        "TTFT CDF (log x) of static vs continuous batching on the classroom engine "
        "(15 ms + 1 ms/seq, padded to 16) at 2.75 req/s."),
    "lab02_static_vs_continuous_timeline_static": declared("lab02_static_vs_continuous",
        "Per-iteration timeline of one run (static batching): batch size, tokens per "
        "iteration, KV blocks in use, queue length."),
    "lab02_goodput_vs_batch_vs_max_num_seqs": declared("lab02_goodput_vs_batch",
        "Output throughput and goodput (TTFT < 300 ms, TPOT < 40 ms) vs max batch depth."),
    "engine_presets_pareto_p99_tpot": declared("engine_presets",
        "Latency-throughput Pareto front over the launch-line x load sweep: output "
        "throughput vs p99 TPOT of every run, non-dominated runs connected."),
    "engine_presets_vs_rate_per_s": declared("engine_presets",
        "Goodput, p99 TPOT and p99 ITL vs offered load, one line per SGLang/vLLM launch "
        "line (Llama-3-8B, one H100, roofline)."),
    "chunked_prefill_bimodal_itl_cdf": declared("chunked_prefill_bimodal",
        "Chunked prefill: ITL tail (fraction of token gaps >= x) with and without chunking "
        "on a bimodal prompt mix."),
    "chunked_prefill_bimodal_tpot_cdf": declared("chunked_prefill_bimodal",
        "Chunked prefill: TPOT tail with and without chunking."),
    "chunked_prefill_bimodal_ttft_cdf": declared("chunked_prefill_bimodal",
        "Chunked prefill: TTFT CDF, what chunking costs the long prompts."),
    "chunked_prefill_bimodal_iterations": declared("chunked_prefill_bimodal",
        "Iteration durations over a 15 s window, iterations that stalled the decodes in red."),
    "prefix_cache_system_prompt_vs_num_blocks": declared("prefix_cache_system_prompt",
        "Prefix-cache hit rate and p50 TTFT vs KV cache size: off, vLLM block hash, SGLang "
        "radix (shared system prompts)."),
    "prefix_cache_mooncake_vs_num_blocks": declared("prefix_cache_mooncake",
        "Prefix-cache hit rate and p50 TTFT vs KV cache size on the Mooncake trace, dashed: "
        "the unlimited-cache bound."),
    "routing_prefix_bars_prefix_cache_hit_rate": declared("routing_prefix",
        "Hit rate, p50 and p99 TTFT per router (4 replicas, Mooncake trace)."),
    "slo_admission_overload_vs_rate_per_s": declared("slo_admission_overload",
        "SLO admission: goodput and rejection rate vs offered load, admit-all vs SLO-aware."),
    "disagg_vs_chunked_vs_rate_per_s": declared("disagg_vs_chunked",
        "SLO attainment and goodput vs load at 4 GPUs: colocated chunked prefill vs "
        "prefill/decode disaggregation (1P3D, 2P2D, 2P2D on a slow link)."),
    "profile_fitted_cost_vs_max_num_seqs": declared("profile_fitted_cost",
        "Throughput and goodput vs batch depth on the profile-fitted A100 Llama-2-7B model."),
    "accelerators_vs_rate_per_s": declared("accelerators",
        "Throughput, goodput and SLO attainment vs load for Llama-3-8B on every catalog "
        "device (roofline)."),
    "tail_latency_arrivals_bars_fairness_jain_slowdown": declared("tail_latency_arrivals",
        "Jain's fairness index of slowdown per arrival process, FCFS vs shortest prompt first."),
    "tail_latency_arrivals_bars_mean_slowdown": declared("tail_latency_arrivals",
        "Mean and p99 slowdown per arrival process and queue policy."),
    "tail_latency_arrivals_bars_p99_ttft": declared("tail_latency_arrivals",
        "p99 TTFT and p99 end-to-end latency per arrival process and queue policy."),
    "sglang_qwen35_4b_b200_speedups": declared("sglang_qwen35_4b_b200",
        "What-if for SGLang + Qwen3.5-4B on one B200: speedup of each launch change on "
        "every workload of the 5 sequential + 2 concurrent benchmark, class geomeans, score."),
    "failures_n_plus_one_vs_replicas": declared("failures_n_plus_one",
        "Goodput and p99 TTFT against replicas at 9 req/s, without failures and with each "
        "replica failing every 3 h (MTBF) for 10 min (MTTR): 3 replicas without, 4 (N+1) "
        "with."),
    "autoscaling_burst_over_time": declared("autoscaling_burst",
        "A 2.5x burst under an autoscaler (concurrency target 14): arrival rate, replicas "
        "serving, requests waiting for a first token and p99 TTFT over time, for cold "
        "starts of 0, 90 and 180 s."),
    "autoscaling_burst_vs_startup_s": declared("autoscaling_burst",
        "p99 TTFT and replica-hours against the autoscaler's cold start, for concurrency "
        "targets of 14 and 8 requests per replica."),
    "calibration_residuals": PaperFigure(
        "Fit of the profile cost model to the A100 Llama-2-7B profile: predicted vs "
        "measured step time and relative error per profile row.",
        calibration_residuals, extra=(str(PROFILE),)),
    "sim_vs_real": PaperFigure(
        "Simulated vs real-engine TTFT and TPOT CDFs of the same workload (one row per "
        "workload; dashed: each real run).",
        sim_vs_real, before="tox -e validate-cpu", extra=(str(VALIDATION),)),
}
# fmt: on
