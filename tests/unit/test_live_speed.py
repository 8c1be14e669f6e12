"""speed: the host's step now over the one a profile was taken at (``cost.speed``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from live_server import StreamServer
from lyra_simpy.cli import main
from lyra_simpy.errors import LyraError
from lyra_simpy.live.profile import profile
from lyra_simpy.live.profile_grid import ProfileGrid

ROOT = Path(__file__).resolve().parents[2]

GRID = ProfileGrid(
    prefill_tokens=[8],
    decode_batch=[1, 2],
    decode_context=[8],
    decode_steps=8,
    mixed_batch=[],
    fragmented_decode_batch=[],
    repeats=1,
    speed_reference="record",
    speed_reference_context=16,
)


def _profiled(tmp_path: Path, itl_s: float) -> Path:
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.01, itl_s=itl_s, timings=True) as srv:
        profile(srv.url, "openai", GRID, out, "test box", "-np 4")
    return out


def test_speed_sends_the_profiles_reference_and_prints_the_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = _profiled(tmp_path, itl_s=0.02)
    ref = yaml.safe_load(csv.with_suffix(".yaml").read_text())["speed_reference"]
    # the reference request is kept as numbers, for speed to send it again
    assert (ref["context"], ref["outputs"]) == (16, 8)
    assert ref["median_ms"] == pytest.approx(20.0, rel=0.25)
    out = tmp_path / "speed.json"
    with StreamServer(ttft_s=0.01, itl_s=0.03) as srv:  # the host 1.5 x slower now
        # one probe of three runs twice as slow again: the median drops it
        srv.faults = {1: "slow"}
        argv = f"speed {csv} --endpoint {srv.url} --probes 3 --pause-s 0.01 --json {out}"
        rc = main(argv.split())
        bodies = srv.received
    assert rc == 0
    assert [len(b["prompt"]) for b in bodies] == [16, 16, 16]
    assert [b["max_tokens"] for b in bodies] == [8, 8, 8]
    got = json.loads(out.read_text())
    assert len(got["steps_ms"]) == 3
    # (timed against an in-process server: bounds that a busy test machine keeps)
    assert got["steps_ms"][1] > 1.6 * max(got["steps_ms"][0], got["steps_ms"][2])
    assert got["median_ms"] == sorted(got["steps_ms"])[1]
    assert got["median_ms"] == pytest.approx(30.0, rel=0.25)
    assert got["profile_ms"] == ref["median_ms"]
    assert got["request"] == {"batch": 1, "contexts": [16], "outputs": 8}
    assert got["speed"] == pytest.approx(got["median_ms"] / ref["median_ms"], rel=1e-3)
    assert got["speed"] == pytest.approx(1.5, rel=0.25)
    printed = capsys.readouterr().out
    assert f"--set cost.speed={got['speed']:.3f}" in printed
    assert "probe 3/3" in printed


def test_a_profile_without_a_speed_reference_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        profile(
            srv.url,
            "openai",
            GRID.model_copy(update={"speed_reference": "off"}),
            out,
            "box",
            "-np 4",
        )
        sent = len(srv.received)
        rc = main(["speed", str(out), "--endpoint", srv.url, "--pause-s", "0.01"])
        assert len(srv.received) == sent  # nothing sent
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0
    assert "speed_reference.median_ms: got None, must be a number > 0" in err


def test_a_profile_without_metadata_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "p.csv"
    csv.write_text("phase,batch_size,input_tokens,context_len,latency_ms\n")
    with StreamServer() as srv:
        assert main(["speed", str(csv), "--endpoint", srv.url]) == 2
    assert "no metadata YAML beside it" in capsys.readouterr().err


def test_an_older_profile_is_read_from_the_requests_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a profile written before context/outputs were kept: its request's words say them,
    # whatever the grid given says
    csv = _profiled(tmp_path, itl_s=0.01)
    meta_path = csv.with_suffix(".yaml")
    meta = yaml.safe_load(meta_path.read_text())
    del meta["speed_reference"]["context"], meta["speed_reference"]["outputs"]
    assert meta["speed_reference"]["request"].startswith("a lone prompt of 16 tokens, 8 outputs")
    meta_path.write_text(yaml.safe_dump(meta))
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"speed_reference_context": 12, "decode_steps": 5}))
    with StreamServer(ttft_s=0.01, itl_s=0.01) as srv:
        argv = f"speed {csv} --endpoint {srv.url} --grid {grid} --probes 1"
        assert main(argv.split()) == 0
        assert [(len(b["prompt"]), b["max_tokens"]) for b in srv.received] == [(16, 8)]
        # words it cannot read: refused, nothing sent
        meta["speed_reference"]["request"] = "a lone request"
        meta_path.write_text(yaml.safe_dump(meta))
        capsys.readouterr()
        assert main(argv.split()) == 2
        assert len(srv.received) == 1
    err = capsys.readouterr().err
    assert "speed_reference.context/outputs: got None/None and request 'a lone request'" in err


def test_probes_and_pause_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    for flag, value in (("--probes", "0"), ("--pause-s", "-1")):
        with pytest.raises(SystemExit):
            main(["speed", "p.csv", "--endpoint", "http://127.0.0.1:9", flag, value])
        assert f"got '{value}'" in capsys.readouterr().err


def test_speed_at_the_full_batch_reads_its_mean_step_against_the_profiles_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = _profiled(tmp_path, itl_s=0.01)  # decode rows of 1 and 2 at context 8 + 8 // 2
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"decode_context": [8], "decode_steps": 8}))
    out = tmp_path / "speed.json"
    with StreamServer(ttft_s=0.01, itl_s=0.02) as srv:  # twice as slow now
        argv = f"speed {csv} --endpoint {srv.url} --grid {grid} --batch 2 --probes 2"
        assert main([*argv.split(), "--pause-s", "0.01", "--json", str(out)]) == 0
        bodies = srv.received
    # two rounds of two sequences, pinned to slots 0 and 1 as the profile's row was
    assert [(len(b["prompt"]), b["max_tokens"]) for b in bodies] == [(8, 8)] * 4
    assert sorted(b["id_slot"] for b in bodies) == [0, 0, 1, 1]
    got = json.loads(out.read_text())
    assert got["request"] == {"batch": 2, "contexts": [8], "outputs": 8}
    assert got["mean_ms"] == pytest.approx(20.0, rel=0.15)
    assert got["profile_ms"] == pytest.approx(10.0, rel=0.15)
    assert got["speed"] == pytest.approx(2.0, rel=0.2)
    assert "the mean of 2 lock-step mean steps of 2 sequences" in capsys.readouterr().out


def test_speed_at_a_batch_the_profile_lacks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = _profiled(tmp_path, itl_s=0.01)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"decode_context": [8], "decode_steps": 8}))
    with StreamServer() as srv:
        assert main(f"speed {csv} --endpoint {srv.url} --grid {grid} --batch 3".split()) == 2
        assert srv.received == []
        # contexts the profile did not measure: refused the same way
        other = grid.with_name("other.yaml")
        other.write_text(yaml.safe_dump({"decode_context": [100], "decode_steps": 8}))
        assert main(f"speed {csv} --endpoint {srv.url} --grid {other} --batch 2".split()) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert "--batch: got 3" in err[0]
    assert "its decode batches: [1, 2]" in err[0]
    assert "at context [104]" in err[1]


def test_speed_at_a_lone_prompt_reads_its_time_against_the_profiles_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # item 70: the prompt steps' speed, cost.prompt_speed; the profile's lone prompt of 8
    # tokens took the server's 10 ms (llama.cpp's timings.prompt_ms), now 25
    csv = _profiled(tmp_path, itl_s=0.01)
    out = tmp_path / "speed.json"
    with StreamServer(ttft_s=0.025, itl_s=0.01, timings=True) as srv:
        argv = f"speed {csv} --endpoint {srv.url} --prompt 8 --probes 3 --pause-s 0.01"
        assert main([*argv.split(), "--json", str(out)]) == 0
        bodies = srv.received
    # three lone prompts of 8 fresh tokens, one output each, as the profile's rows were
    assert [(len(b["prompt"]), b["max_tokens"]) for b in bodies] == [(8, 1)] * 3
    assert len({tuple(b["prompt"]) for b in bodies}) == 3
    got = json.loads(out.read_text())
    assert got["phase"] == "prompt"
    assert got["request"] == {"batch": 1, "contexts": [8], "outputs": 1}
    assert got["steps_ms"] == [pytest.approx(25.0, rel=1e-6)] * 3  # (the server's own)
    assert got["profile_ms"] == pytest.approx(10.0, rel=1e-6)
    assert got["speed"] == 2.5
    printed = capsys.readouterr().out
    assert "the median of 3 lone prompts of 8 tokens" in printed
    assert "cost.prompt_speed: 2.500  (lyra-simpy run SCENARIO --set cost.prompt_speed=2.500)" in (
        printed
    )


def test_speed_at_a_prompt_the_profile_lacks_or_with_batch_too_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = _profiled(tmp_path, itl_s=0.01)
    with StreamServer() as srv:
        assert main(f"speed {csv} --endpoint {srv.url} --prompt 9".split()) == 2
        assert main(f"speed {csv} --endpoint {srv.url} --prompt 8 --batch 2".split()) == 2
        assert srv.received == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert "--prompt: got 9" in err[0]
    assert "its prompt sizes: [8]" in err[0]
    assert "got --batch 2 and --prompt 8, give one" in err[1]


def _profiled_mixed(tmp_path: Path, itl_s: float, ttft_s: float) -> tuple[Path, Path]:
    """A profile with mixed rows step by step: a prompt of 8 tokens beside 1 decoder of 8
    (the grid's sliding window: the prompt's last 4 tokens in a step of their own). Steps
    of tens of ms, and each first token *ttft_s* after its request (the decoder's steps
    before the prompt's first token show): a loaded test machine's few ms of scheduling
    stay small beside them."""
    mixed = {"mixed_batch": [1], "mixed_prompt_tokens": [8], "mixed_context": [8]}
    grid = GRID.model_copy(update={**mixed, "sliding_window": True})
    out = tmp_path / "m.csv"
    with StreamServer(ttft_s=ttft_s, itl_s=itl_s, timings=True) as srv:
        profile(srv.url, "openai", grid, out, "test box", "-np 4")
    kept = tmp_path / "m-grid.yaml"
    kept.write_text(yaml.safe_dump(grid.model_dump(mode="json")))
    return out, kept


def test_speed_beside_decoders_reads_the_prompts_steps_against_the_profiles_mixed_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # item 75: a prompt beside the decoders, the kind of step a load's prompts run in;
    # its steps read on the decoder's stream (one token a step: the server's 20 ms then,
    # 60 now), summed over the prompt's two steps, against the profile's two mixed rows
    csv, grid = _profiled_mixed(tmp_path, itl_s=0.02, ttft_s=0.1)
    mixed = [r.split(",") for r in csv.read_text().splitlines() if r.startswith("mixed,")]
    assert [(r[1], r[2]) for r in mixed] == [("1", "4"), ("1", "4")]  # 8 = 4 + the last 4
    out = tmp_path / "speed.json"
    # (the prompt's first token 250 ms after it was sent: the decoder's steps before it show)
    with StreamServer(ttft_s=0.25, itl_s=0.06, timings=True) as srv:
        argv = f"speed {csv} --endpoint {srv.url} --grid {grid} --prompt 8 --beside 1"
        assert main([*argv.split(), "--probes", "2", "--pause-s", "0.01", "--json", str(out)]) == 0
        bodies = srv.received
    # each round: the decoder (8 tokens, slot 0) then the prompt (8 tokens, one output, slot 1)
    assert [(len(b["prompt"]), b["max_tokens"], b["id_slot"]) for b in bodies] == [
        (8, 16, 0), (8, 1, 1)
    ] * 2  # fmt: skip
    got = json.loads(out.read_text())
    assert got["phase"] == "prompt"
    assert got["request"] == {"batch": 1, "contexts": [8], "outputs": 1, "beside": 1}
    # the profile's price is its two mixed rows summed; each row the server's 20 ms step,
    # which a loaded test machine (coverage, two workers on two cores) can only lengthen
    rows_ms = [float(r[4]) for r in mixed]
    assert got["profile_ms"] == pytest.approx(sum(rows_ms))
    assert all(20.0 * 0.9 <= ms <= 20.0 * 1.6 for ms in rows_ms), rows_ms
    assert got["median_ms"] == pytest.approx(120.0, rel=0.25)
    assert got["speed"] == pytest.approx(got["median_ms"] / got["profile_ms"], rel=1e-3)
    assert 2.0 <= got["speed"] <= 3.6
    printed = capsys.readouterr().out
    assert "the median of 2 prompts of 8 tokens beside 1 decoding" in printed
    assert "--set cost.prompt_speed=" in printed


def test_speed_beside_what_the_profile_or_server_lacks_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv, grid = _profiled_mixed(tmp_path, itl_s=0.02, ttft_s=0.1)
    other = tmp_path / "other.yaml"  # decoders of another prompt than the profile's rows
    other.write_text(yaml.safe_dump({"mixed_context": [100], "decode_steps": 8}))
    with StreamServer() as srv:
        for extra in ("--prompt 16 --beside 1", "--prompt 8 --beside 4", "--beside 1"):
            argv = f"speed {csv} --endpoint {srv.url} --grid {grid} {extra}"
            assert main(argv.split()) == 2
        assert main(f"speed {csv} --endpoint {srv.url} --prompt 8 --beside 1 --grid {other}"
                    .split()) == 2  # fmt: skip
        assert srv.received == []
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4
    assert "got 16 tokens beside 1" in err[0]
    assert "its (decoders, prompt) pairs: [(1, 8)]" in err[0]
    assert "got 8 tokens beside 4" in err[1]  # (the profile has no such row either)
    assert "got --beside 1 without --prompt" in err[2]
    assert "the grid's mixed_context [100]" in err[3]
    assert "give the profile's own grid (--grid)" in err[3]
    # a server with no slot left for the prompt: refused once the server says its slots
    # (its 4 against a profile given rows beside 4 decoders), before any request
    extra = [r.replace("mixed,1,", "mixed,4,", 1) for r in csv.read_text().splitlines()
             if r.startswith("mixed,")]  # fmt: skip
    csv.write_text(csv.read_text() + "\n".join(extra) + "\n")
    with StreamServer() as srv:
        argv = f"speed {csv} --endpoint {srv.url} --grid {grid} --prompt 8 --beside 4"
        assert main(argv.split()) == 2
        assert srv.received == []
    assert "--beside: got 4, must be < the server's 4 slots" in capsys.readouterr().err


def test_speed_beside_an_engine_timed_whole_reads_the_prompts_own_time(
    tmp_path: Path,
) -> None:
    # a profile whose mixed rows time the prompt whole (grid.mixed_timing: prompt, as for
    # an engine without llama.cpp's slots): the reading is the prompt's own time, the
    # engine's timings.prompt_ms, against that one row
    mixed = {"mixed_batch": [1], "mixed_prompt_tokens": [8], "mixed_context": [8]}
    grid = GRID.model_copy(update={**mixed, "mixed_timing": "prompt"})
    csv, kept = tmp_path / "w.csv", tmp_path / "w-grid.yaml"
    with StreamServer(ttft_s=0.04, itl_s=0.02, timings=True) as srv:
        profile(srv.url, "openai", grid, csv, "test box", "-np 4")
    kept.write_text(yaml.safe_dump(grid.model_dump(mode="json")))
    assert "prompt_step" not in csv.read_text().splitlines()[0]
    out = tmp_path / "speed.json"
    with StreamServer(ttft_s=0.1, itl_s=0.02, timings=True) as srv:
        argv = f"speed {csv} --endpoint {srv.url} --grid {kept} --prompt 8 --beside 1"
        assert main([*argv.split(), "--probes", "2", "--pause-s", "0.01", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["steps_ms"] == [pytest.approx(100.0, rel=1e-6)] * 2  # (the server's own)
    assert got["profile_ms"] == pytest.approx(40.0, rel=1e-6)
    assert got["speed"] == 2.5


def test_the_matrix_reads_lyra_simpy_speed_before_each_run_as_a_user_types_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from builders import validation_module

    matrix = validation_module("llamacpp_matrix")
    monkeypatch.setattr(matrix, "SPEED_PAUSE_S", 0.01)
    here = tmp_path / "default_short"
    here.mkdir()
    (here / "profile.csv").write_bytes(_profiled(tmp_path, itl_s=0.01).read_bytes())
    (here / "profile.yaml").write_bytes((tmp_path / "p.yaml").read_bytes())
    (here / "grid.yaml").write_text(yaml.safe_dump({"decode_context": [8], "decode_steps": 8}))
    run = here / "real" / "poisson_0.3" / "run1"
    log: list[str] = []
    # decode steps 1.5 x the profile's now, prompts as they were (llama.cpp's timings)
    with StreamServer(ttft_s=0.01, itl_s=0.015, timings=True) as srv:
        got = matrix.speed_before(srv.url, here, run, 2, log)
        bodies = srv.received
    assert set(got) == {"speed_lone", "speed_batch", "speed_prompt"}
    assert got["speed_lone"] == pytest.approx(1.5, rel=0.2)
    assert got["speed_batch"] == pytest.approx(1.5, rel=0.2)
    assert got["speed_prompt"] == 1.0
    # the lone reading's probes (the profile's 16-token reference), then two rounds of two
    # sequences pinned to slots 0 and 1 (the grid's context), then lone prompts of the
    # profile's middle prompt size (its only one here, 8 tokens)
    lone, batch = matrix.SPEED_PROBES, 2 * matrix.SPEED_BATCH_ROUNDS
    assert [len(b["prompt"]) for b in bodies] == [16] * lone + [8] * batch + [8] * lone
    assert sorted(b["id_slot"] for b in bodies[lone : lone + batch]) == [0, 0, 1, 1]
    assert [b["max_tokens"] for b in bodies[lone + batch :]] == [1] * lone
    kept = here / "speed" / "poisson_0.3"
    for name in ("lone", "batch", "prompt"):  # each reading's JSON under speed/LOAD/
        assert json.loads((kept / f"run1-{name}.json").read_text())["speed"] == got[f"speed_{name}"]
    # out of real/LOAD/, whose every run* the step rebuild reads as a run
    assert not run.parent.exists()
    # logged as a user types them, the server's port as $URL
    assert log[1].startswith("lyra-simpy speed ")
    assert "--endpoint $URL" in log[1]
    assert "--batch 2 --probes 2 --pause-s 0.01" in log[1]
    assert "--prompt 8 --probes 3 --pause-s 0.01" in log[2]
    # a server that does not answer: no reading, no stale file, and the matrix goes on
    got = matrix.speed_before("http://127.0.0.1:9", here, run, 2, log)
    assert got == {"speed_lone": None, "speed_batch": None, "speed_prompt": None}
    assert not list(kept.glob("*.json"))


def test_the_matrix_reads_a_prompt_beside_the_full_batchs_other_decoders_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from builders import validation_module

    # item 75: where the profile has a mixed row beside NP-1 decoders, the fourth reading
    matrix = validation_module("llamacpp_matrix")
    monkeypatch.setattr(matrix, "SPEED_PAUSE_S", 0.01)
    monkeypatch.setattr(matrix, "SPEED_BATCH_ROUNDS", 1)
    here = tmp_path / "default_short"
    here.mkdir()
    csv, grid = _profiled_mixed(tmp_path, itl_s=0.03, ttft_s=0.1)
    (here / "profile.csv").write_bytes(csv.read_bytes())
    (here / "profile.yaml").write_bytes(csv.with_suffix(".yaml").read_bytes())
    (here / "grid.yaml").write_bytes(grid.read_bytes())
    assert matrix.reading_beside_tokens(here / "profile.csv", 1) == 8
    assert matrix.reading_beside_tokens(here / "profile.csv", 3) is None
    run = here / "real" / "poisson_0.3" / "run1"
    log: list[str] = []
    with StreamServer(ttft_s=0.1, itl_s=0.03, timings=True) as srv:
        got = matrix.speed_before(srv.url, here, run, 2, log)
    assert set(got) == {"speed_lone", "speed_batch", "speed_prompt", "speed_beside"}
    assert got["speed_beside"] == pytest.approx(1.0, rel=0.25)  # the decodes as they were
    assert "--prompt 8 --beside 1 --probes 1 --pause-s 0.01" in log[-1]
    kept = json.loads((here / "speed" / "poisson_0.3" / "run1-beside.json").read_text())
    assert kept["request"]["beside"] == 1
    assert kept["speed"] == got["speed_beside"]
    # a server of one slot has no decoder to read beside: three readings
    assert matrix.reading_beside_tokens(here / "profile.csv", 0) is None


def test_the_matrix_takes_longer_readings_with_speed_probes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from builders import validation_module

    matrix = validation_module("llamacpp_matrix")
    for name in ("SPEED_PROBES", "SPEED_BATCH_ROUNDS", "SPEED_BEFORE", "SPEED_REFERENCE",
                 "BATCH_BEFORE", "GATE_AFTER", "DECODE_STEP"):  # fmt: skip
        monkeypatch.setattr(matrix, name, getattr(matrix, name))  # (restored after)
    monkeypatch.setattr(matrix.speed_gate, "GATE", matrix.speed_gate.GATE)
    for argv in (["--speed-probes", "6"], ["--speed-before", "--speed-probes", "0"]):
        with pytest.raises(SystemExit, match=r"^--speed-probes: got (6|0), must be 1 or more "
                           r"and given with --speed-before$"):  # fmt: skip
            matrix.main(argv)
    assert (matrix.SPEED_PROBES, matrix.SPEED_BATCH_ROUNDS) == (3, 2)  # (the defaults)
    summary = ["--summary", str(ROOT / "docs" / "validation" / "llamacpp-matrix.json")]
    assert matrix.main(["--speed-before", "--speed-probes", "6", *summary]) == 0
    assert (matrix.SPEED_PROBES, matrix.SPEED_BATCH_ROUNDS) == (6, 6)  # both readings
    capsys.readouterr()


@pytest.mark.parametrize("step_ms", [14.945, 14.9455, 10.0005, 12.3456])
def test_the_json_keeps_the_speed_the_command_prints(step_ms: float) -> None:
    from lyra_simpy.live.speed import SpeedReading

    # kept to 4 places and printed to 3, 1.49455 was stored 1.4945 (printed 1.494 from it)
    # beside a printed 1.495: the JSON now holds the printed figure
    reading = SpeedReading([step_ms], 10.0, (16,), 8)
    kept = reading.as_json()["speed"]
    assert f"{kept:.3f}" == f"{reading.speed:.3f}"
    assert kept == float(f"{reading.speed:.3f}")


def test_speed_beside_reads_against_the_profiles_own_beside_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # item 77: with grid.speed_reference_beside the profile times the reading's own probe
    # through its grid, and `speed --prompt N --beside B` reads the host against the median
    # of those instead of the pair's two mixed rows
    mixed = {"mixed_batch": [1], "mixed_prompt_tokens": [8], "mixed_context": [8]}
    grid = GRID.model_copy(update={**mixed, "sliding_window": True,
                                   "speed_reference_beside": (1, 8),
                                   "speed_reference_beside_every": 1})  # fmt: skip
    csv = tmp_path / "m.csv"
    with StreamServer(ttft_s=0.1, itl_s=0.02, timings=True) as srv:
        profile(srv.url, "openai", grid, csv, "test box", "-np 4")
    ref = yaml.safe_load(csv.with_suffix(".yaml").read_text())["speed_reference"]
    got = ref["beside"]
    # one before every measurement of the grid, as many as the lone references
    assert got["references"] == ref["references"] > 1
    assert (got["decoders"], got["tokens"], got["every"]) == (1, 8, 1)
    assert list(got["by_context"]) == [8]
    assert got["min_ms"] <= got["median_ms"] <= got["max_ms"]
    assert got["median_ms"] == pytest.approx(40.0, rel=0.25)  # two steps of 20 ms
    kept = tmp_path / "m-grid.yaml"
    kept.write_text(yaml.safe_dump(grid.model_dump(mode="json")))
    out = tmp_path / "speed.json"
    with StreamServer(ttft_s=0.25, itl_s=0.06, timings=True) as srv:
        argv = f"speed {csv} --endpoint {srv.url} --grid {kept} --prompt 8 --beside 1"
        assert main([*argv.split(), "--probes", "2", "--pause-s", "0.01", "--json", str(out)]) == 0
    reading = json.loads(out.read_text())
    assert reading["profile_ms"] == got["median_ms"]
    assert reading["against"] == "beside reference"
    assert reading["speed"] == pytest.approx(3.0, rel=0.25)
    assert (
        f"the profile's {got['median_ms']:.2f} ms (its beside reference)" in capsys.readouterr().out
    )
    # a pair the profile has no reference of reads against its rows, as before
    from lyra_simpy.live.speed_prompt import beside_reference

    assert beside_reference(csv, 1, 16) is None
    assert beside_reference(csv, 1, 8) == got["median_ms"]
    # a reference whose median is not a number is refused in one line naming the field
    meta = yaml.safe_load(csv.with_suffix(".yaml").read_text())
    meta["speed_reference"]["beside"]["median_ms"] = "fast"
    csv.with_suffix(".yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(LyraError, match=r"m.yaml: speed_reference.beside.median_ms: got 'fast', "
                       r"must be a number > 0$"):  # fmt: skip
        beside_reference(csv, 1, 8)
    # and `speed` refuses it before it sends a probe: nothing listens at the endpoint here,
    # and the line names the field, not the connection
    capsys.readouterr()
    argv = f"speed {csv} --endpoint http://127.0.0.1:9 --grid {kept} --prompt 8 --beside 1"
    assert main(argv.split()) != 0
    assert "speed_reference.beside.median_ms: got 'fast'" in capsys.readouterr().err


def test_a_beside_reference_the_grid_cannot_take_is_refused(tmp_path: Path) -> None:
    mixed = {"mixed_batch": [1], "mixed_prompt_tokens": [8], "mixed_context": [8]}
    for update, words in (
        ({"speed_reference_beside": (3, 8)}, r"got \[3, 8\], needs speed_reference record or "
         r"scale \(got 'record'\) and its decoders among mixed_batch \[1\]"),
        ({"speed_reference_beside": (1, 16)}, r"got \[1, 16\], its prompt must be one of "
         r"mixed_prompt_tokens \[8\]"),
        ({"speed_reference_beside": (1, 8), "speed_reference": "off"},
         r"got \[1, 8\], needs speed_reference record or scale \(got 'off'\)"),
    ):  # fmt: skip
        grid = GRID.model_copy(update={**mixed, **update})
        with StreamServer(ttft_s=0.01, itl_s=0.005, timings=True) as srv:
            with pytest.raises(LyraError, match=r"grid.speed_reference_beside: " + words):
                profile(srv.url, "openai", grid, tmp_path / "x.csv", "test box", "-np 4")
            assert srv.received == []  # refused before any request
    assert not (tmp_path / "x.csv").exists()
