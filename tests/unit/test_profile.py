"""The profile cost model: reading profiles, fitting, the cost model, calibrate, Vidur."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from lyra_simpy import ScenarioError, scenario_from_dict
from lyra_simpy.calibration.fit import fit_profile, r_squared, report
from lyra_simpy.calibration.fitfile import calibrate, format_report, load_fit
from lyra_simpy.calibration.fitmodel import TERMS
from lyra_simpy.calibration.profiles import read_profile, write_profile
from lyra_simpy.calibration.roofline_check import PACKAGE_PROFILES
from lyra_simpy.cli import main
from lyra_simpy.cost import BatchShape, ProfileCost, ProfileCostConfig
from lyra_simpy.errors import TraceError
from lyra_simpy.output.provenance import cost_provenance

DATA = Path(__file__).resolve().parents[1] / "data"
FIT = DATA / "synthetic_fit.yaml"
VIDUR = PACKAGE_PROFILES / "vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
TRUE = {
    "fixed_ms": 7.0,
    "per_decode_seq_ms": 0.05,
    "per_context_token_ms": 0.0003,
    "per_prefill_token_ms": 0.09,
    "per_prefill_attention_ms": 2e-5,
}


def synthetic_rows(rng: np.random.Generator, noise: float) -> list[dict[str, object]]:
    """Steps of a model with :data:`TRUE` coefficients, times lognormal noise."""
    c = TRUE
    rows: list[dict[str, object]] = []

    def add(phase: str, b: int, i: int, ctx: int, ms: float) -> None:
        rows.append(
            {
                "phase": phase,
                "batch_size": b,
                "input_tokens": i,
                "context_len": ctx,
                "latency_ms": ms * float(rng.lognormal(0.0, noise)),
            }
        )

    for _ in range(3):  # three repeats of every step, as a profiler takes
        for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            for ctx in (128, 512, 2048, 4096):
                ms = (
                    c["fixed_ms"] + c["per_decode_seq_ms"] * b + c["per_context_token_ms"] * b * ctx
                )
                add("decode", b, 0, ctx, ms)
        for b in (1, 2, 4):
            for i in (64, 256, 1024, 2048, 4096):
                for ctx in (0, 1024):
                    pairs = b * i * (ctx + i)
                    ms = (
                        c["fixed_ms"]
                        + c["per_prefill_token_ms"] * b * i
                        + c["per_prefill_attention_ms"] * pairs
                    )
                    add("prefill", b, i, ctx, ms)
    return rows


def write(tmp_path: Path, rows: list[dict[str, object]], name: str = "p.csv") -> Path:
    path = tmp_path / name
    write_profile(path, rows)
    return path


# -- fitting ---------------------------------------------------------------------------


def test_fit_recovers_known_coefficients_under_2pct_noise(tmp_path):
    rng = np.random.default_rng(11)
    fit = fit_profile(read_profile(write(tmp_path, synthetic_rows(rng, 0.02))))
    got = fit.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=0.05), term
    assert fit.fit.r2 is not None
    assert fit.fit.r2 > 0.99
    for phase in ("prefill", "decode"):
        assert fit.fit.phases[phase].median_rel_error < 0.03  # noise is 2 %
    assert fit.fit.unmeasured_terms == []


def test_fit_is_exact_without_noise(tmp_path):
    fit = fit_profile(read_profile(write(tmp_path, synthetic_rows(np.random.default_rng(0), 0))))
    got = fit.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=1e-6), term
    assert fit.fit.phases["decode"].max_rel_error < 1e-6


def slowed(rows: list[dict[str, object]], every: int, factor: float) -> list[dict[str, object]]:
    """*rows* with every *every*-th row's latency times *factor* (a host slow-down)."""
    return [
        {**r, "latency_ms": float(r["latency_ms"]) * factor} if k % every == 0 else r  # type: ignore[arg-type]
        for k, r in enumerate(rows)
    ]


def test_soft_l1_resists_slowed_rows_that_move_nnls(tmp_path):
    # one row in seven 1.8x slower, as a shared host slows a profile now and then
    rows = slowed(synthetic_rows(np.random.default_rng(5), 0.01), 7, 1.8)
    prof = read_profile(write(tmp_path, rows))
    plain, robust = fit_profile(prof), fit_profile(prof, "soft_l1")
    assert plain.method == "nnls_relative"
    assert robust.method == "soft_l1_relative"

    def worst(fit) -> float:
        got = fit.coefficients.model_dump()
        return max(abs(got[t] / TRUE[t] - 1) for t in TERMS)

    assert worst(robust) < 0.03  # the noise is 1 %
    assert worst(plain) > 2 * worst(robust)
    assert all(v >= 0 for v in robust.coefficients.model_dump().values())


def shortened_prefill(rows: list[dict[str, object]], factor: float) -> list[dict[str, object]]:
    """*rows* with their first 256-token prefill measured *factor* times too short: a
    step the stream rebuild split, its prompt left in a few ms (calibration.runs)."""
    out, done = [], False
    for r in rows:
        if not done and r["phase"] == "prefill" and r["input_tokens"] == 256:
            r, done = {**r, "latency_ms": float(r["latency_ms"]) / factor}, True  # type: ignore[arg-type]
        out.append(r)
    assert done
    return out


def test_soft_l1_log_is_exact_without_noise(tmp_path):
    fit = fit_profile(read_profile(write(tmp_path, synthetic_rows(np.random.default_rng(0), 0))),
                      "soft_l1_log")  # fmt: skip
    assert fit.method == "soft_l1_log_ratio"
    got = fit.coefficients.model_dump()
    for term in TERMS:
        assert got[term] == pytest.approx(TRUE[term], rel=1e-4), term


def test_one_row_measured_far_too_short_moves_soft_l1_not_soft_l1_log(tmp_path):
    # of 192 rows at 1 % noise, one prefill row 40x too short: under soft_l1 its relative
    # error (predicted/measured - 1 = 39) outweighs the rest; in logs it is ln 40
    rows = shortened_prefill(synthetic_rows(np.random.default_rng(5), 0.01), 40.0)
    prof = read_profile(write(tmp_path, rows))
    relative, log = fit_profile(prof, "soft_l1"), fit_profile(prof, "soft_l1_log")

    def off(fit, term: str) -> float:
        return abs(fit.coefficients.model_dump()[term] / TRUE[term] - 1)

    prompt_terms = ("per_prefill_token_ms", "per_prefill_attention_ms")
    assert max(off(log, t) for t in prompt_terms) < 0.03  # the noise is 1 %
    assert max(off(relative, t) for t in prompt_terms) > 0.2
    # the other rows: the log fit's median error stays at the noise
    assert log.fit.phases["prefill"].median_rel_error < 0.02


def test_calibrate_loss_flag(tmp_path, capsys):
    prof = write(tmp_path, synthetic_rows(np.random.default_rng(1), 0.01))
    out = tmp_path / "fit.yaml"
    assert main(["calibrate", str(prof), "--out", str(out), "--loss", "soft_l1"]) == 0
    assert "robust (soft L1)" in capsys.readouterr().out
    assert load_fit(out).method == "soft_l1_relative"
    assert main(["calibrate", str(prof), "--out", str(out), "--loss", "soft_l1_log"]) == 0
    head = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("coefficients"))
    assert head == (
        "coefficients (non-negative robust (soft L1) least squares on log(predicted/measured)):"
    )
    assert load_fit(out).method == "soft_l1_log_ratio"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", str(prof), "--loss", "huber"])
    assert exc.value.code == 2
    assert "invalid choice: 'huber'" in capsys.readouterr().err


def test_decode_residual_is_the_median_not_the_mean(tmp_path):
    # batch 4 measured five times; one of them during a 2x host slow-down
    def ms(b: int) -> float:
        return 10.0 + 5.0 * b

    rows = [
        {"phase": "decode", "batch_size": b, "input_tokens": 0, "context_len": 64,
         "latency_ms": ms(b) * (2.0 if (b, k) == (4, 0) else 1.0) + (3.0 if b == 1 else 0.0)}
        for b in (1, 2, 4, 8) for k in range(5)
    ]  # fmt: skip
    fit = fit_profile(read_profile(write(tmp_path, rows)))
    c = fit.coefficients
    r = fit.decode_batch_residual_ms
    for b in (1, 2, 4, 8):
        rows_b = [float(x["latency_ms"]) for x in rows if x["batch_size"] == b]  # type: ignore[arg-type]
        fitted = c.fixed_ms + c.per_decode_seq_ms * b + c.per_context_token_ms * b * 64
        assert r[b] == pytest.approx(float(np.median(rows_b)) - fitted, abs=1e-9)
    # the slow episode moves a mean by 30/5 = 6 ms; the median does not see it
    rows_4 = [float(x["latency_ms"]) for x in rows if x["batch_size"] == 4]  # type: ignore[arg-type]
    assert np.mean(rows_4) - np.median(rows_4) == pytest.approx(6.0)


def test_r2_and_relative_error_by_hand(tmp_path):
    # measured 10, 20, 30 ms, predicted 11, 20, 27: SS_res = 1 + 0 + 9 = 10,
    # SS_tot = 100 + 0 + 100 = 200 → R² = 0.95; |rel| = 0.1, 0, 0.1 → median 0.1, max 0.1
    measured = np.array([10.0, 20.0, 30.0])
    predicted = np.array([11.0, 20.0, 27.0])
    assert r_squared(measured, predicted) == pytest.approx(0.95)
    assert r_squared(np.array([5.0]), np.array([4.0])) is None
    rows = [
        {"phase": "decode", "batch_size": b, "input_tokens": 0, "context_len": 8, "latency_ms": m}
        for b, m in zip((1, 2, 3), measured, strict=True)
    ]
    rep = report(read_profile(write(tmp_path, rows)), predicted, [])
    dec = rep.phases["decode"]
    assert dec.rows == 3
    assert dec.r2 == pytest.approx(0.95)
    assert dec.median_rel_error == pytest.approx(0.1)
    assert dec.max_rel_error == pytest.approx(0.1)
    assert rep.worst_rows[0].row in (2, 4)  # the header is line 1
    assert abs(rep.worst_rows[0].rel_error) == pytest.approx(0.1)


def test_unmeasured_terms_are_zero_and_reported(tmp_path):
    rows = [
        {"phase": "decode", "batch_size": b, "input_tokens": 0, "context_len": c,
         "latency_ms": 5 + 0.5 * b + 0.001 * b * c}
        for b in (1, 4, 16) for c in (100, 1000)
    ]  # fmt: skip
    fit = fit_profile(read_profile(write(tmp_path, rows)))
    assert fit.fit.unmeasured_terms == ["per_prefill_token_ms", "per_prefill_attention_ms"]
    assert fit.coefficients.per_prefill_token_ms == 0.0
    assert "not measured" in format_report(fit)


# -- reading profiles --------------------------------------------------------------------

GOOD = "phase,batch_size,input_tokens,context_len,latency_ms\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("phase,batch_size,input_tokens,latency_ms\n", "missing column(s) context_len"),
        (GOOD, "no rows after the header"),
        (GOOD + "warmup,1,0,8,5.0\n", "row 2: phase: got 'warmup', must be one of"),
        (GOOD + "decode,1,0,8,5\ndecode,x,0,8,5\n", "row 3: batch_size: got 'x', must be an int"),
        (GOOD + "decode,1,0,-3,5\n", "row 2: context_len: got '-3', must be an integer >= 0"),
        (GOOD + "decode,1,0,8,0\n", "row 2: latency_ms: got '0', must be a number > 0"),
        (GOOD + "decode,1,0,8,nan\n", "row 2: latency_ms: got 'nan'"),
        (GOOD + "decode,1,5,8,3\n", "row 2: input_tokens: got 5, must be 0 in a decode row"),
        (GOOD + "prefill,1,0,0,3\n", "row 2: input_tokens: got 0, must be > 0 in a prefill row"),
        (GOOD + "decode,0,0,8,3\n", "row 2: batch_size: got 0, must be > 0 in a decode row"),
        (GOOD + "decode,1,0\n", "row 2: got 3 fields, must have 5"),
        (GOOD + "mixed,0,0,8,3\n", "row 2: batch_size: got 0 with input_tokens 0"),
    ],
)
def test_bad_profile_rows_are_one_clear_line(tmp_path, text, expected):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        read_profile(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(str(path))
    assert expected in msg


def test_extra_columns_and_metadata_are_read(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("note,latency_ms,phase,batch_size,input_tokens,context_len\nx,5,decode,1,0,8\n")
    (tmp_path / "p.yaml").write_text("hardware: H100\ntp: 2\n")
    prof = read_profile(path)
    assert prof.latency_ms.tolist() == [5.0]
    assert prof.metadata == {"hardware": "H100", "tp": 2}


# -- the cost model ----------------------------------------------------------------------


def cost(padding: object = "none", max_batch: int = 8) -> ProfileCost:
    return ProfileCost(ProfileCostConfig(path=str(FIT), padding=padding), max_batch)


def test_cost_matches_the_fitted_terms():
    model = cost()
    # 5 + 0.5 × 3 + 0.002 × 300 = 7.1 ms
    assert model.iteration_s(BatchShape(0, 0, 0, 3, 3, 300)) == pytest.approx(7.1e-3)
    # mixed: 5 + 0.5 × 2 + 0.002 × 100 + 0.05 × 40 + 1e-4 × 1600 = 8.36 ms
    assert model.iteration_s(BatchShape(1, 40, 1600, 2, 2, 100)) == pytest.approx(8.36e-3)


@pytest.mark.parametrize("padding", ["none", "max_batch", [1, 2, 4]])
def test_decode_span_equals_single_steps_bit_for_bit(padding):
    model = cost(padding)
    for rows, ctx, growth, k in [(1, 0, 1, 1), (3, 100, 3, 40), (5, 7, 5, 33), (8, 10**6, 8, 3)]:
        span = model.decode_span_s(rows, ctx, growth, k)
        assert len(span) == k
        for j, t in enumerate(span):
            single = model.decode_span_s(rows, ctx + j * growth, growth, 1)[0]
            assert t == single  # bit for bit
            assert model.iteration_s(BatchShape(0, 0, 0, rows, rows, ctx + j * growth)) == t


def test_padding_charges_the_captured_size():
    model = cost([4, 8])
    assert model.decode_span_s(3, 0, 3, 1) == model.decode_span_s(4, 0, 4, 1)
    assert model.decode_span_s(9, 0, 9, 1)[0] > model.decode_span_s(8, 0, 8, 1)[0]


def test_extrapolation_beyond_the_grid_is_finite_and_monotone():
    model = cost()
    grid = load_fit(FIT).grid
    assert grid["decode"]["max_batch_size"] == 8  # the test profile's grid
    last = 0.0
    for rows in (1, 8, 64, 1024, 100_000):  # far beyond the measured 8
        t = model.decode_span_s(rows, rows * 10**5, rows, 1)[0]
        assert math.isfinite(t)
        assert t > last
        last = t
    last = 0.0
    for tokens in (1, 128, 4096, 10**6):  # prompts beyond the measured 128
        t = model.iteration_s(BatchShape(1, tokens, tokens * tokens, 0, 0, 0))
        assert math.isfinite(t)
        assert t > last
        last = t


# -- scenarios and the manifest ------------------------------------------------------------


def raw_scenario(cost_cfg: dict[str, object]) -> dict[str, object]:
    return {
        "workload": {
            "num_requests": 20,
            "arrival": {"name": "poisson", "rate_per_s": 5},
            "input_tokens": {"name": "fixed", "tokens": 64},
            "output_tokens": {"name": "fixed", "tokens": 16},
        },
        "kv_cache": {"block_size": 16, "num_blocks": 400},
        "cost": cost_cfg,
    }


def test_scenario_reads_the_fit_relative_to_its_folder_and_the_manifest_names_it():
    sc = scenario_from_dict(
        raw_scenario({"name": "profile", "path": "synthetic_fit.yaml"}), base_dir=DATA
    )
    prov = cost_provenance(sc)
    assert prov["name"] == "profile"
    cal = prov["calibration"]
    assert cal["profile"]["path"] == "synthetic_profile.csv"
    assert cal["profile_metadata"]["hardware"] == "synthetic"
    assert cal["fit_quality"]["r2"] == pytest.approx(1.0)
    assert cal["coefficients"]["fixed_ms"] == pytest.approx(5.0)
    json.dumps(prov)  # the manifest is JSON


def test_scenario_may_name_a_profile_csv_directly():
    sc = scenario_from_dict(
        raw_scenario({"name": "profile", "path": "synthetic_profile.csv"}), base_dir=DATA
    )
    assert sc.cost.fit.coefficients.per_decode_seq_ms == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("nope.yaml", "cost.profile.path: got 'nope.yaml', "),
        ("synthetic_profile.yaml", "not a profile fit"),  # metadata, not a fit
    ],
)
def test_bad_fit_file_fails_validation_in_one_line(path, expected):
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(raw_scenario({"name": "profile", "path": path}), base_dir=DATA)
    msg = str(err.value)
    assert "\n" not in msg
    assert expected in msg


# -- command line ------------------------------------------------------------------------


def test_cli_calibrate_writes_fit_and_figure(tmp_path, capsys):
    prof = write(tmp_path, synthetic_rows(np.random.default_rng(3), 0.02))
    out, fig = tmp_path / "fits" / "x.yaml", tmp_path / "res.png"
    assert main(["calibrate", str(prof), "--out", str(out), "--figure", str(fig)]) == 0
    text = capsys.readouterr().out
    assert "R² (all rows)" in text
    assert "median |rel err|" in text
    fit = load_fit(out)
    assert fit.profile.path == "../p.csv"
    assert fig.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.rglob("*") if p.name.startswith(".")) == []


def test_cli_calibrate_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(GOOD + "decode,1,0,8,-1\n")
    out = tmp_path / "fit.yaml"
    assert main(["calibrate", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "latency_ms" in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [bad]


def test_cli_calibrate_refuses_to_overwrite_the_metadata(tmp_path, capsys):
    prof = write(tmp_path, synthetic_rows(np.random.default_rng(3), 0.0))
    meta = tmp_path / "p.yaml"
    meta.write_text("hardware: x\n")
    assert main(["calibrate", str(prof), "--out", str(meta)]) == 2
    assert meta.read_text() == "hardware: x\n"


# -- Vidur converter -----------------------------------------------------------------------


def test_vidur_converter_on_the_shipped_file(tmp_path, capsys):
    out = tmp_path / "v.csv"
    args = ["vidur-profile", str(VIDUR), "--layers", "32", "--out", str(out)]
    assert main([*args, "--decode-attention-ms-per-context-token", "0.00036"]) == 0
    prof = read_profile(out)  # the contract holds
    assert set(prof.phase.tolist()) == {"prefill", "decode", "mixed"}
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["tp"] == 1
    assert meta["assumed"]["decode_attention_ms_per_context_token"] == 0.00036
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    decode1 = next(r for r in rows if r["phase"] == "decode" and r["batch_size"] == "1")
    # 32 layers of Llama-2-7B's non-attention ops at 1 token on an A100: ≈ 9.3 ms
    # (shared/profiles/hardware-figures.md §3a)
    assert float(decode1["measured_ms"]) == pytest.approx(9.34, rel=0.05)
    total = float(decode1["measured_ms"]) + float(decode1["assumed_attention_ms"])
    assert float(decode1["latency_ms"]) == pytest.approx(total)
    fit = calibrate(out)
    assert fit.fit.r2 is not None
    assert fit.fit.r2 > 0.95


def test_vidur_converter_rejects_bad_arguments(tmp_path, capsys):
    out = tmp_path / "v.csv"
    assert (
        main(["vidur-profile", str(VIDUR), "--layers", "32", "--tp", "3", "--out", str(out)]) == 2
    )
    assert "num_tensor_parallel_workers = 3" in capsys.readouterr().err
    assert not out.exists()


def test_vidur_converter_missing_file_names_where_to_get_it(tmp_path, capsys):
    args = ["vidur-profile", str(tmp_path / "mlp.csv"), "--layers", "32", "--out", "x.csv"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "github.com/microsoft/vidur" in err
    assert len(err.strip().splitlines()) == 1


def test_manifest_is_json_with_yaml_dates_in_the_metadata(tmp_path):
    prof = write(tmp_path, synthetic_rows(np.random.default_rng(5), 0.0))
    (tmp_path / "p.yaml").write_text("hardware: A100\ndate: 2026-11-29\n")  # a YAML date
    sc = scenario_from_dict(raw_scenario({"name": "profile", "path": "p.csv"}), base_dir=tmp_path)
    prov = json.loads(json.dumps(cost_provenance(sc)))
    assert prov["calibration"]["profile_metadata"]["date"] == "2026-11-29"
    assert prof.is_file()


def test_profile_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(("\ufeff" + GOOD + "decode,1,0,8,5\n").encode())
    assert read_profile(path).batch_size.tolist() == [1]


def test_cli_calibrate_bad_figure_suffix_writes_nothing(tmp_path, capsys):
    prof = write(tmp_path, synthetic_rows(np.random.default_rng(3), 0.0))
    out = tmp_path / "fit.yaml"
    assert main(["calibrate", str(prof), "--out", str(out), "--figure", "x.gif"]) == 2
    assert "--figure: got 'x.gif', must end in .png, .pdf or .svg" in capsys.readouterr().err
    assert not out.exists()


# -- the shipped example is what its documented commands produce --------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "profiles"


def test_shipped_fit_is_what_calibrate_gives_for_the_shipped_profile():
    shipped = load_fit(EXAMPLE / "fits" / "a100_llama2_7b_vidur.yaml")
    fresh = calibrate(EXAMPLE / "a100_llama2_7b_vidur.csv")
    for term in TERMS:
        got, want = getattr(fresh.coefficients, term), getattr(shipped.coefficients, term)
        assert got == pytest.approx(want, rel=1e-9), term
    assert fresh.profile.sha256 == shipped.profile.sha256
    assert fresh.fit.phases == shipped.fit.phases
    for size, value in shipped.decode_batch_residual_ms.items():  # medians since issue 12
        assert fresh.decode_batch_residual_ms[size] == pytest.approx(value, rel=1e-9, abs=1e-12)


def test_shipped_profile_is_what_vidur_profile_gives(tmp_path):
    out = tmp_path / "a100_llama2_7b_vidur.csv"
    command = (  # the command in docs/calibration.md §4
        f"vidur-profile {VIDUR} --layers 32 --decode-attention-ms-per-context-token 0.00036 "
        f"--prefill-attention-ms-per-pair 0.0000017 --out {out}"
    )
    assert main(command.split()) == 0
    assert out.read_text() == (EXAMPLE / "a100_llama2_7b_vidur.csv").read_text()
    got = yaml.safe_load(out.with_suffix(".yaml").read_text())
    want = yaml.safe_load((EXAMPLE / "a100_llama2_7b_vidur.yaml").read_text())
    got["source"].pop("file")
    want["source"].pop("file")
    assert got == want


def test_verified_drafts_cost_like_prompt_tokens_attending_to_their_context():
    model = cost()
    # 3 decodes at 100 tokens each (300) verify 2 drafts each: 6 tokens at 0.05 ms and
    # 2 x 300 attention pairs at 1e-4 ms on top of the decode's 7.1 ms
    got = model.iteration_s(BatchShape(0, 0, 0, 3, 3, 300, verify_tokens=6))
    assert got == pytest.approx((7.1 + 0.05 * 6 + 1e-4 * 600) / 1000)
    # padded to the captured 4 rows, every row verifies its 2 drafts
    padded = cost([4, 8]).iteration_s(BatchShape(0, 0, 0, 3, 3, 300, verify_tokens=6))
    assert padded == pytest.approx((5 + 0.5 * 4 + 0.002 * 300 + 0.05 * 8 + 1e-4 * 600) / 1000)


def test_decode_table_follows_a_batch_that_is_not_linear(tmp_path):
    # a CPU engine: one sequence 4 ms, then 10 + 5 ms per sequence (+0.01 ms per context
    # token read); the linear terms alone cannot follow the jump from 1 to 2
    def step_ms(b: int, ctx: int) -> float:
        return (4.0 if b == 1 else 10.0 + 5.0 * b) + 0.01 * b * ctx

    rows = [
        {"phase": "decode", "batch_size": b, "input_tokens": 0, "context_len": ctx,
         "latency_ms": step_ms(b, ctx)}
        for b in (1, 2, 4, 8) for ctx in (0, 100)
    ] + [
        {"phase": "prefill", "batch_size": 1, "input_tokens": n, "context_len": 0,
         "latency_ms": 10.0 + 0.5 * n}
        for n in (16, 64, 256)
    ]  # fmt: skip
    out = tmp_path / "fit.yaml"
    fit = calibrate(write(tmp_path, rows), out)
    assert sorted(fit.decode_batch_residual_ms) == [1, 2, 4, 8]
    assert load_fit(out).decode_batch_residual_ms == fit.decode_batch_residual_ms

    def cost(table: bool) -> ProfileCost:
        return ProfileCost(ProfileCostConfig(path=str(out), decode_table=table), 8)

    plain, table = cost(False), cost(True)
    for b in (1, 2, 4, 8):
        for ctx in (0, 100):
            want = step_ms(b, ctx) / 1000
            assert table.decode_span_s(b, b * ctx, b, 1)[0] == pytest.approx(want, rel=0.03)
    one = plain.decode_span_s(1, 0, 1, 1)[0]
    assert abs(one - step_ms(1, 0) / 1000) > 0.3 * step_ms(1, 0) / 1000  # what it fixes
    # between measured sizes: interpolated; beyond them: held at the nearest one
    r = fit.decode_batch_residual_ms
    three = table.decode_span_s(3, 0, 3, 1)[0] - plain.decode_span_s(3, 0, 3, 1)[0]
    assert three * 1000 == pytest.approx((r[2] + r[4]) / 2)
    sixteen = table.decode_span_s(16, 0, 16, 1)[0] - plain.decode_span_s(16, 0, 16, 1)[0]
    assert sixteen * 1000 == pytest.approx(r[8])
    # prefill and mixed steps are the linear terms' alone
    shape = BatchShape(1, 64, 64 * 64, 2, 2, 200)
    assert table.iteration_s(shape) == plain.iteration_s(shape)
    # spans stay bit for bit equal to single steps
    span = table.decode_span_s(3, 50, 3, 40)
    assert span == [table.decode_span_s(3, 50 + 3 * j, 3, 1)[0] for j in range(40)]


def test_decode_table_needs_decode_rows(tmp_path):
    rows = [
        {"phase": "prefill", "batch_size": 1, "input_tokens": n, "context_len": 0,
         "latency_ms": 10.0 + 0.5 * n}
        for n in (16, 64, 256)
    ]  # fmt: skip
    out = tmp_path / "fit.yaml"
    calibrate(write(tmp_path, rows), out)
    with pytest.raises(ValueError, match="decode_table: got true, but the fit"):
        ProfileCostConfig(path=str(out), decode_table=True)


def test_request_path_comes_from_the_profiles_metadata(tmp_path):
    from lyra_simpy.calibration.profiles import request_path_ms

    path = write(tmp_path, [{"phase": "decode", "batch_size": 1, "input_tokens": 0,
                             "context_len": 8, "latency_ms": 5.0}])  # fmt: skip
    assert request_path_ms(path) == 0.0  # no metadata
    (tmp_path / "p.yaml").write_text("engine: vllm\n")
    assert request_path_ms(path) == 0.0  # timed by the client: no path measured
    (tmp_path / "p.yaml").write_text("engine: vllm\nrequest_path_ms: 8.36\n")
    assert request_path_ms(path) == 8.36


def test_soft_l1_log_refuses_a_row_with_no_positive_term() -> None:
    # a row whose every term is 0 predicts 0, whose log the loss cannot take
    from lyra_simpy.calibration.fit import fit_coefficients

    x = np.array([[1.0, 2.0], [0.0, 0.0], [1.0, 4.0]])
    with pytest.raises(ValueError, match="no positive term"):
        fit_coefficients(x, np.array([3.0, 1.0, 5.0]), "soft_l1_log")
    coef, unmeasured = fit_coefficients(x[[0, 2]], np.array([3.0, 5.0]), "soft_l1_log")
    assert coef.tolist() == pytest.approx([1.0, 1.0], rel=1e-6)
    assert unmeasured == []
