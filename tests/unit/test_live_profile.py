"""profile: a profile CSV (DESIGN §4) and its metadata from a live endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from live_server import StreamServer
from lyra_simpy.calibration.profiles import Profile, read_profile
from lyra_simpy.cli import main
from lyra_simpy.errors import LyraError
from lyra_simpy.live.profile import profile
from lyra_simpy.live.profile_grid import ProfileGrid

GRID = ProfileGrid(
    prefill_tokens=[8, 16],
    decode_batch=[1, 2],
    decode_context=[8],
    decode_steps=4,
    mixed_batch=[1],
    mixed_prompt_tokens=[8],
    repeats=1,
    save_prompt_tokens=[],  # (the prompt-cache probe: its own test)
)


def _profiled(out: Path, grid: ProfileGrid, flags: str = "-np 4") -> tuple[Profile, list[dict]]:
    """*grid* profiled into *out* against a fake llama-server launched with *flags*: the
    profile read back, and the request bodies the server received."""
    with StreamServer(ttft_s=0.02, itl_s=0.01) as srv:
        profile(srv.url, "openai", grid, out, "test box", flags)
        bodies = srv.received
    return read_profile(out), bodies


def test_profile_writes_the_contract_and_says_how_it_timed(tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.02, itl_s=0.01) as srv:
        rows, source = profile(srv.url, "openai", GRID, out, "test box", "-np 4")
        bodies = srv.received
    # llama.cpp: the decode batch of 2 again in slots 0 and 2 (two passes per step)
    assert rows == 6
    assert source == "client"
    prof = read_profile(out)
    assert prof.phase.tolist() == ["prefill", "prefill", "decode", "decode", "decode", "mixed"]
    assert prof.context_len.tolist()[2:5] == [10, 10, 10]
    assert prof.passes is not None
    assert prof.passes.tolist() == [1, 1, 1, 1, 2, 2]  # the mixed probe shares slot 0's pass
    # logits: each decode pass, each prompt's last token (the mixed probe's: its own pass)
    assert prof.output_passes is not None
    assert prof.output_passes.tolist() == [1, 1, 1, 1, 2, 2]
    # per-slot KV: a prompt attends over its own stream, padded to 256 cells
    assert prof.attention_cells is not None
    assert prof.attention_cells.tolist() == [8 * 256, 16 * 256, 0, 0, 0, 8 * 256]
    assert {b.get("id_slot") for b in bodies} == {0, 1, 2}  # every probe pinned
    decode_ms = prof.latency_ms[2:4]
    assert all(8.0 < ms < 60.0 for ms in decode_ms)  # the server's 10 ms per token
    assert prof.latency_ms[0] >= 20.0  # client TTFT
    # the decode rows' median gap (their latency) and mean step, both kept
    lines = [line.split(",") for line in out.read_text().splitlines()]
    gap, mean = lines[0].index("median_gap_ms"), lines[0].index("mean_step_ms")
    assert [bool(row[gap]) for row in lines[1:]] == [False, False, True, True, True, False]
    assert [bool(row[mean]) for row in lines[1:]] == [False, False, True, True, True, False]
    assert all(row[gap] == row[lines[0].index("latency_ms")] for row in lines[3:6])
    assert all(8.0 < float(row[mean]) < 60.0 for row in lines[3:6])
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["engine"] == "llama.cpp"
    assert meta["version"] == "test-1"
    assert meta["hardware"] == "test box"
    assert meta["flags"] == "-np 4"
    assert meta["timing_source"]["prefill"] == "client TTFT"
    assert meta["timing_source"]["decode"].startswith("client median inter-chunk gap")


def test_profile_flags_must_match_the_servers_slots(tmp_path: Path) -> None:
    with StreamServer(ttft_s=0.02, itl_s=0.01) as srv, pytest.raises(LyraError, match="-np 2"):
        profile(srv.url, "openai", GRID, tmp_path / "p.csv", "test box", "-np 2")


def test_profile_against_a_vllm_stream_sends_the_served_name(tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.02, itl_s=0.01, style="vllm", props=False) as srv:
        rows, source = profile(srv.url, "openai", GRID, out, "test box", "", 32000)
        bodies = srv.received
    assert (rows, source) == (5, "client")
    assert {b["model"] for b in bodies} == {"tiny"}  # vLLM 404s any other name
    # the stand-in sleeps 10 ms per token: a step can't be shorter (a loaded machine can
    # make it longer, so the upper bound only catches a gross error)
    assert all(8.0 < ms < 1000.0 for ms in read_profile(out).latency_ms[2:4])
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())  # /v1/models, /version
    assert (meta["engine"], meta["version"], meta["model"]) == ("vllm", "0.32.0", "tiny-llama")
    assert meta["timing_source"]["prefill"] == "client TTFT"  # no /metrics here
    assert "request_path_ms" not in meta


def test_a_vllm_profile_times_prompts_by_the_engine_and_measures_the_path(
    tmp_path: Path,
) -> None:
    # the stand-in's engine takes 30 ms a prompt, after 40 ms on the way in; its /metrics
    # says 30 ms, which the prompt rows take, and the rest of the client's TTFT is path
    # (the mixed probe's decoders stream 40 tokens: they finish after the probe, which
    # /metrics then counts alone)
    out = tmp_path / "p.csv"
    grid = GRID.model_copy(update={"decode_steps": 20})
    with StreamServer(ttft_s=0.03, itl_s=0.01, style="vllm", props=False, path_s=0.04) as srv:
        profile(srv.url, "openai", grid, out, "test box", "", 32000)
    prof = read_profile(out)
    prompts = prof.latency_ms[prof.phase != "decode"]
    assert prompts.tolist() == pytest.approx([30.0] * 3)  # 2 prefill rows and the mixed one
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["timing_source"]["prefill"] == "engine /metrics vllm:request_prefill_time_seconds"
    assert meta["timing_source"]["mixed"].startswith("engine /metrics")
    assert 40.0 <= meta["request_path_ms"] < 200.0  # 40 ms, and HTTP on a loaded machine
    assert list(meta["request_path_ms_by_prompt"]) == [8, 16]


def test_profile_bad_grid_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("decode_batch: [0]\n")
    code = main(
        ["profile", "--endpoint", "http://127.0.0.1:9", "--out", "x.csv", "--grid", str(grid)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "decode_batch[0]" in err


def test_profile_unreachable_endpoint_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["profile", "--endpoint", "http://127.0.0.1:9", "--out", str(tmp_path / "p.csv")])
    assert code == 2
    assert "unreachable" in capsys.readouterr().err
    assert not (tmp_path / "p.csv").exists()


def test_mixed_probes_need_a_free_slot(tmp_path: Path) -> None:
    # 4 decoders fill a 4-slot server: the probe would wait for a slot and run alone
    grid = GRID.model_copy(update={"mixed_batch": [1, 4]})
    out = tmp_path / "p.csv"
    with (
        StreamServer(ttft_s=0.02, itl_s=0.01) as srv,
        pytest.raises(LyraError, match=r"grid.mixed_batch: got 4, must be < the server's 4 slots"),
    ):
        profile(srv.url, "openai", grid, out)
    assert not out.exists()


def test_each_profile_sends_fresh_prompts_unless_a_seed_is_given(tmp_path: Path) -> None:
    # an engine's prefix cache keeps the last profile's prompts: the same ids again would
    # be served from it and price prompts far too cheap
    grid = ProfileGrid(prefill_tokens=[8], decode_batch=[1], decode_context=[8], decode_steps=2,
                       mixed_batch=[], repeats=1)  # fmt: skip
    prompts, seeds = [], []
    with StreamServer(ttft_s=0.0, itl_s=0.001, style="vllm", props=False) as srv:
        for k, g in enumerate([grid, grid, grid.model_copy(update={"prompt_seed": 7}),
                               grid.model_copy(update={"prompt_seed": 7})]):  # fmt: skip
            out = tmp_path / f"p{k}.csv"
            srv.received.clear()
            profile(srv.url, "openai", g, out, "test box", "", 32000)
            prompts.append([b["prompt"] for b in srv.received if "prompt" in b])
            seeds.append(yaml.safe_load(out.with_suffix(".yaml").read_text())["prompt_seed"])
    assert prompts[0] != prompts[1]
    assert seeds[0] != seeds[1]
    assert prompts[2] == prompts[3]
    assert seeds[2:] == [7, 7]


def test_each_round_walks_the_whole_grid_once(tmp_path: Path) -> None:
    # repeats are rounds over the grid (a slow spell of the host moves one measurement of
    # a row, not all of its repeats): the lone prefills come 8, 16, ..., 8, 16, ...
    grid = GRID.model_copy(update={"repeats": 2, "mixed_batch": []})
    with StreamServer(ttft_s=0.005, itl_s=0.002) as srv:
        rows, _ = profile(srv.url, "openai", grid, tmp_path / "p.csv", "test box", "-np 4")
        bodies = srv.received
    lone = [len(b["prompt"]) for b in bodies if b["max_tokens"] == 1]
    assert lone == [8, 8, 16, 8, 16]  # the warm-up, then one prefill of each size a round
    assert rows == 5


def test_prompts_sent_together_are_a_prefill_row_of_their_batch(tmp_path: Path) -> None:
    # llama.cpp: grid.prefill_together sends B prompts at once, pinned to slots 0..B-1;
    # the row is timed from the first prompt's start (its first token less its
    # timings.prompt_ms) to the last one's end
    grid = GRID.model_copy(update={"prefill_together": [2], "mixed_batch": []})
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.05, itl_s=0.01, timings=True) as srv:
        profile(srv.url, "openai", grid, out, "test box", "-np 4 -kvu")
        bodies = srv.received
    prof = read_profile(out)
    pre = prof.phase == "prefill"
    assert prof.batch_size[pre].tolist() == [1, 1, 2, 2]
    assert prof.input_tokens[pre].tolist() == [8, 16, 8, 16]
    # each prompt took 50 ms by its timings; sent together they overlap
    together = prof.latency_ms[pre][2:]
    assert all(50.0 <= ms < 90.0 for ms in together)
    # the engine model's counts for two prompts in one -kvu step: one pass of 16 (32)
    # rows, below a flash-attention tile: each row its own causal cells
    assert prof.passes is not None
    assert prof.passes[pre].tolist() == [1, 1, 1, 1]
    assert prof.attention_computed is not None
    assert prof.attention_computed[pre].tolist() == [36, 136, 72, 272]  # Σ 1..8, Σ 1..16
    assert prof.attention_cells is not None
    assert prof.attention_cells[pre].tolist() == [8 * 256, 16 * 256, 16 * 256, 32 * 256]
    pairs = [b.get("id_slot") for b in bodies if len(b["prompt"]) in (8, 16)]
    assert {0, 1} <= set(pairs)


def test_prompts_together_need_llamacpp_and_slots(tmp_path: Path) -> None:
    grid = GRID.model_copy(update={"prefill_together": [2]})
    with StreamServer(props=False) as srv, pytest.raises(LyraError) as err:
        profile(srv.url, "openai", grid, tmp_path / "p.csv", "test box")
    assert str(err.value).startswith("grid.prefill_together: got [2], allowed only for llama.cpp")
    many = GRID.model_copy(update={"prefill_together": [5], "mixed_batch": []})
    with StreamServer() as srv, pytest.raises(LyraError, match="need 5 slots"):
        profile(srv.url, "openai", many, tmp_path / "p.csv", "test box", "-np 4")
    assert not (tmp_path / "p.csv").exists()


def test_mixed_rows_at_each_decoder_context(tmp_path: Path) -> None:
    grid = GRID.model_copy(update={"mixed_context": [8, 24], "decode_batch": [1]})
    prof, bodies = _profiled(tmp_path / "p.csv", grid)
    mixed = prof.phase == "mixed"
    # the decoders' prompt of 8 then of 24 tokens, plus what they decoded before the probe
    contexts = prof.context_len[mixed].tolist()
    assert len(contexts) == 2
    assert 8 <= contexts[0] < 24 <= contexts[1]
    assert {len(b["prompt"]) for b in bodies if b.get("id_slot") == 0} >= {8, 24}


def test_a_speed_reference_beside_each_measurement_prices_rows_at_the_typical_speed(
    tmp_path: Path,
) -> None:
    # grid.speed_reference: a lone decode before every measurement. The host runs three
    # times as slow for the prefill row and its reference in two rounds of three: the rounds'
    # median alone keeps the slow value; scaled by the references it reads at the
    # typical speed
    grid = GRID.model_copy(
        update={
            "prefill_tokens": [8],
            "decode_batch": [1],
            "mixed_batch": [],
            "fragmented_decode_batch": [],
            "repeats": 3,
            "speed_reference": "scale",
            "speed_reference_context": 16,
            "decode_steps": 8,
        }
    )
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.05, itl_s=0.02, timings=True) as srv:
        # 0 the warm-up; a round: reference, prefill, reference, decode
        srv.faults = dict.fromkeys([1, 2, 5, 6], "slow")
        srv.slow_factor = 3.0
        rows, _ = profile(srv.url, "openai", grid, out, "test box", "-np 4")
        bodies = srv.received
    assert rows == 2
    assert [len(b["prompt"]) for b in bodies] == [8, *[16, 8, 16, 8] * 3]
    lines = [line.split(",") for line in out.read_text().splitlines()]
    col = {name: k for k, name in enumerate(lines[0])}
    prefill, decode = lines[1], lines[2]
    assert float(prefill[col["raw_latency_ms"]]) == pytest.approx(150.0, rel=0.05)
    assert float(prefill[col["latency_ms"]]) == pytest.approx(50.0, rel=0.15)
    assert float(prefill[col["speed_factor"]]) == pytest.approx(3.0, rel=0.15)
    assert float(decode[col["latency_ms"]]) == pytest.approx(20.0, rel=0.2)
    assert float(decode[col["speed_factor"]]) == pytest.approx(1.0, rel=0.1)
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    speed = meta["speed_reference"]
    assert speed["references"] == 6
    assert speed["median_ms"] == pytest.approx(20.0, rel=0.2)
    assert speed["max_ms"] == pytest.approx(60.0, rel=0.2)
    # the contract's reader takes the scaled latency and ignores the extra columns
    assert read_profile(out).latency_ms.tolist()[0] == pytest.approx(50.0, rel=0.15)
    # every measurement beside its reference, in the order taken
    pairs = [line.split(",") for line in out.with_suffix(".speed.csv").read_text().splitlines()]
    assert pairs[0][-2:] == ["reference_ms", "latency_ms"]
    assert [(r[0], r[1], r[2]) for r in pairs[1:]] == [
        (str(n), str(k), phase) for n in (1, 2, 3) for k, phase in ((1, "prefill"), (2, "decode"))
    ]
    prefills = [float(r[-1]) for r in pairs[1:] if r[2] == "prefill"]
    assert prefills == pytest.approx([150.0, 150.0, 50.0], rel=0.05)
    references = [float(r[-2]) for r in pairs[1:] if r[2] == "prefill"]
    assert references == pytest.approx([60.0, 60.0, 20.0], rel=0.2)


def test_a_recorded_speed_reference_leaves_the_rows_as_measured(tmp_path: Path) -> None:
    grid = GRID.model_copy(
        update={"mixed_batch": [], "fragmented_decode_batch": [], "speed_reference": "record"}
    )
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.02, itl_s=0.005, timings=True) as srv:
        srv.faults = {1: "slow"}  # the first reference, and no measurement, ran slow
        profile(srv.url, "openai", grid, out, "test box", "-np 4")
    lines = [line.split(",") for line in out.read_text().splitlines()]
    col = {name: k for k, name in enumerate(lines[0])}
    assert all(row[col["latency_ms"]] == row[col["raw_latency_ms"]] for row in lines[1:])
    assert float(lines[1][col["speed_factor"]]) == pytest.approx(2.0, rel=0.3)
    assert float(lines[1][col["latency_ms"]]) == pytest.approx(20.0, rel=0.1)
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["speed_reference"]["mode"] == "record"
    assert meta["speed_reference"]["references"] == 4  # 4 rows, 1 round
    assert len(out.with_suffix(".speed.csv").read_text().splitlines()) == 5


def test_without_a_speed_reference_the_profile_has_no_such_columns(tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        profile(srv.url, "openai", GRID, out, "test box", "-np 4")
    head = out.read_text().splitlines()[0].split(",")
    assert "speed_factor" not in head
    assert "raw_latency_ms" not in head
    assert "speed_reference" not in yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert not out.with_suffix(".speed.csv").exists()


def test_mixed_rows_are_one_per_step_of_the_prompt(tmp_path: Path) -> None:
    # with context checkpoints (a sliding-window model) a 16-token prompt runs in two
    # steps, 12 tokens then 4 with a checkpoint: two mixed rows (DESIGN §4: a row is a
    # step), each timed by its decoders' gap around it, whose counts add up to the
    # whole prompt's
    from lyra_simpy.live.llamacpp_probes import COUNT_COLUMNS, llamacpp_config, row_counts

    grid = GRID.model_copy(
        update={"sliding_window": True, "mixed_prompt_tokens": [16], "decode_batch": [1]}
    )
    out = tmp_path / "p.csv"
    prof, _ = _profiled(out, grid)
    mixed = prof.phase == "mixed"
    assert prof.input_tokens[mixed].tolist() == [12, 4]
    assert prof.checkpoints is not None
    assert prof.checkpoints[mixed].tolist() == [0, 1]
    assert prof.steps is not None
    assert prof.steps[mixed].tolist() == [1, 1]
    # a step: 10 ms a token (one decoder's gap, read by the client: on a loaded 2-core
    # host a late chunk and the next one arrive closer, 7.4 ms seen under CI's load)
    assert all(5.0 < ms < 60.0 for ms in prof.latency_ms[mixed])
    lines = [line.split(",") for line in out.read_text().splitlines()]
    head = lines[0]
    step_rows = [row for row in lines[1:] if row[0] == "mixed"]
    assert [(r[head.index("prompt_tokens")], r[head.index("prompt_step")]) for r in step_rows] == [
        ("16", "0"),
        ("16", "1"),
    ]
    assert all(r[head.index("prompt_step")] == "" for r in lines[1:] if r[0] != "mixed")
    llama = llamacpp_config("-np 4", grid)
    assert llama is not None
    context = int(step_rows[0][3])
    whole = row_counts(llama, "mixed", 1, 16, context)
    cols = [head.index(c) for c in COUNT_COLUMNS]
    summed = [sum(int(r[c]) for r in step_rows) for c in cols]
    assert summed == list(whole)
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["timing_source"]["mixed"].startswith("client: each step of the probe's prompt")


def test_mixed_timing_prompt_keeps_one_row_per_prompt(tmp_path: Path) -> None:
    grid = GRID.model_copy(
        update={"sliding_window": True, "mixed_prompt_tokens": [16], "decode_batch": [1],
                "mixed_timing": "prompt"}
    )  # fmt: skip
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.02, itl_s=0.01, timings=True) as srv:
        profile(srv.url, "openai", grid, out, "test box", "-np 4")
    prof = read_profile(out)
    mixed = prof.phase == "mixed"
    assert prof.input_tokens[mixed].tolist() == [16]
    assert prof.steps is not None
    assert prof.steps[mixed].tolist() == [2]
    assert prof.latency_ms[mixed][0] == pytest.approx(20.0, abs=0.5)  # the engine's prompt_ms
    assert "prompt_step" not in out.read_text().splitlines()[0]


def test_mixed_timing_steps_needs_llamacpp(tmp_path: Path) -> None:
    grid = GRID.model_copy(update={"mixed_timing": "steps"})
    with (
        StreamServer(props=False) as srv,
        pytest.raises(LyraError, match=r"grid.mixed_timing: got 'steps', allowed only for llama"),
    ):
        profile(srv.url, "openai", grid, tmp_path / "p.csv")
    assert not (tmp_path / "p.csv").exists()


def test_the_wander_probe_times_every_decode_step_of_its_streams(tmp_path: Path) -> None:
    # grid.wander_s: lock-step streams of wander_batch decoders, sent again until the
    # time is up; each decode step a row (context: the prompt and the tokens out before it)
    grid = GRID.model_copy(
        update={"mixed_batch": [], "wander_s": 0.3, "wander_batch": 2, "wander_outputs": 12}
    )
    out = tmp_path / "p.csv"
    _, bodies = _profiled(out, grid)
    probe = [b for b in bodies if b.get("n_predict", b.get("max_tokens")) == 12]
    assert len(probe) >= 4
    assert len(probe) % 2 == 0
    steps = read_profile(out.with_suffix(".wander.csv"))
    assert set(steps.phase.tolist()) == {"decode"}
    assert set(steps.batch_size.tolist()) == {2}
    # each round's steps: 8 prompt + j out, j = 1..11, read on the stream whose first
    # token came last up to the step the other one ended in (this server's two streams
    # are threads of their own, not in lock step: under load that drops the last step)
    rounds: list[list[int]] = []
    for ctx in steps.context_len.tolist():
        if ctx == 9:
            rounds.append([])
        rounds[-1].append(ctx)
    assert len(rounds) == len(probe) // 2
    assert all(r == list(range(9, 9 + len(r))) and len(r) in (10, 11) for r in rounds)
    assert all(5.0 < ms < 60.0 for ms in steps.latency_ms)  # the server's 10 ms a token
    assert steps.passes is not None
    assert set(steps.passes.tolist()) == {1}
    lines = [line.split(",") for line in out.with_suffix(".wander.csv").read_text().splitlines()]
    ends = [float(row[lines[0].index("end_s")]) for row in lines[1:]]
    assert ends == sorted(ends)
    # sent again until 0.3 s had passed: the last round started before then and ran a
    # stream's length (ttft 20 ms + 11 steps of 10 ms), its last step inside it
    assert ends[-1] >= 0.3 - 0.15
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["wander_probe"] == {
        "batch": 2, "context": 8, "outputs": 12, "seconds": 0.3, "steps": len(steps)
    }  # fmt: skip
    # off by default: no probe, no file
    plain = tmp_path / "q.csv"
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        profile(srv.url, "openai", GRID, plain, "test box", "-np 4")
    assert not plain.with_suffix(".wander.csv").exists()
    assert "wander_probe" not in yaml.safe_load(plain.with_suffix(".yaml").read_text())


def test_the_wander_steps_are_read_on_the_stream_whose_prompt_came_last() -> None:
    # two streams, 10 ms a step: the first's prompt ran a step before the second's, and
    # it ends a step earlier; the steps are the second's, from its first token to the
    # step the first ended in
    import asyncio

    from lyra_simpy.live.client import Outcome
    from lyra_simpy.live.prober import Prober

    early = Outcome(sent_s=0.0, chunk_s=[0.050 + 0.010 * k for k in range(8)])  # to 0.120
    late = Outcome(sent_s=0.0, chunk_s=[0.0602 + 0.010 * k for k in range(9)])  # to 0.1402
    prober = Prober.__new__(Prober)
    outs = iter([early, late])

    async def send(*args: object, **kwargs: object) -> Outcome:
        return next(outs)

    prober._send = send  # type: ignore[method-assign]
    ends = asyncio.run(prober.lockstep_ends(2, 8, 9, 0.0))
    assert ends == pytest.approx([0.0602 + 0.010 * k for k in range(7)])


def test_the_wake_probe_times_lone_prompts_after_idle_and_calibrate_reads_it(
    tmp_path: Path,
) -> None:
    # grid.wake_gaps_s: lone prompts after each gap of idle and back to back, every round;
    # the server here takes 30 ms more for a request after >= 0.1 s of idle
    from lyra_simpy.calibration.fit import fit_profile

    grid = GRID.model_copy(
        update={"mixed_batch": [], "wake_gaps_s": [0.02, 0.25], "wake_repeats": 3}
    )
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.02, itl_s=0.005, timings=True, wake_s=0.03) as srv:
        profile(srv.url, "openai", grid, out, "test box", "-np 4")
        bodies = srv.received
    # each round: 2 lone decodes of the probe's prompt (grid.decode_steps outputs), not
    # recorded, then the gaps
    warm = [b for b in bodies if b.get("max_tokens") == 4 and len(b["prompt"]) == 8]
    assert len(warm) >= 2 * 3
    # the probe is the last thing sent, one request at a time: per round 2 decodes of 4
    # outputs, then 3 prompts of 1 output (back to back, 0.02 s, 0.25 s)
    tail = bodies[-3 * 5 :]
    rounds = [(4, 8), (4, 8), (1, 8), (1, 8), (1, 8)] * 3
    assert [(b["max_tokens"], len(b["prompt"])) for b in tail] == rounds
    lines = out.with_suffix(".wake.csv").read_text().splitlines()
    assert lines[0] == "gap_s,latency_ms"
    rows = [tuple(map(float, line.split(","))) for line in lines[1:]]
    assert [g for g, _ in rows] == [0.0, 0.02, 0.25] * 3
    # the engine's own prompt_ms: 20 ms, 50 ms after the long gap
    assert all(ms == pytest.approx(20.0) for g, ms in rows if g < 0.1)
    assert all(ms == pytest.approx(50.0) for g, ms in rows if g > 0.1)
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["wake_probe"] == {
        "prompt_tokens": 8, "gaps_s": [0.0, 0.02, 0.25], "repeats": 3, "warmup": 2,
        "timed_by": "engine timings.prompt_ms",
    }  # fmt: skip
    fit = fit_profile(read_profile(out))
    assert fit.wake is not None
    assert (fit.wake.after_s, fit.wake.prompts) == (0.25, 9)
    assert fit.wake.ms == pytest.approx(30.0)
    # off by default: no probe, no file
    plain = tmp_path / "q.csv"
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        profile(srv.url, "openai", GRID, plain, "test box", "-np 4")
    assert not plain.with_suffix(".wake.csv").exists()
    assert fit_profile(read_profile(plain)).wake is None


def test_a_split_decode_row_runs_a_pass_of_two_beside_a_pass_of_one(tmp_path: Path) -> None:
    # llama.cpp with per-slot KV: grid.split_decode_batch [3] pins 3 decoders to slots 0,
    # 1 and 3: two passes (slots 0-1, then 3), each computing logits
    grid = GRID.model_copy(update={"split_decode_batch": [3], "decode_batch": [1]})
    prof, bodies = _profiled(tmp_path / "p.csv", grid)
    dec = prof.phase == "decode"
    assert prof.batch_size[dec].tolist() == [1, 2, 3]  # lone, fragmented 2, split 3
    assert prof.passes is not None
    assert prof.output_passes is not None
    assert prof.passes[dec].tolist() == [1, 2, 2]
    assert prof.output_passes[dec].tolist() == [1, 2, 2]
    assert {b.get("id_slot") for b in bodies} == {0, 1, 2, 3}
    # it needs B + 1 slots; with -kvu (one pass whatever the slots) it is not measured
    four = grid.model_copy(update={"split_decode_batch": [4]})
    with StreamServer() as srv, pytest.raises(LyraError, match="need 5 slots"):
        profile(srv.url, "openai", four, tmp_path / "q.csv", "test box", "-np 4")
    unified, _ = _profiled(tmp_path / "u.csv", grid, "-np 4 -kvu")
    assert unified.batch_size[unified.phase == "decode"].tolist() == [1]


def test_a_mixed_probe_whose_steps_the_streams_hide_is_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # grid.mixed_step_tries: a mixed probe timed by step whose decoders' streams do not
    # show its prompt's steps before its first token (item 60: once on a slow host) is run
    # again; after the last try the profile stops with one line and writes nothing
    import lyra_simpy.live.prober as prober

    real, calls = prober.prompt_step_gaps, []

    def hidden_once(decoders: list, first_s: float, steps: int) -> list[float]:
        calls.append(steps)
        if len(calls) == 1:
            raise prober.StepsNotSeenError("profile: a mixed probe's decoder had 1 steps")
        return real(decoders, first_s, steps)

    grid = GRID.model_copy(
        update={"sliding_window": True, "mixed_prompt_tokens": [16], "decode_batch": [1]}
    )
    monkeypatch.setattr(prober, "prompt_step_gaps", hidden_once)
    prof, _ = _profiled(tmp_path / "p.csv", grid)
    assert calls == [2, 2]  # one probe (its prompt in 2 steps), tried twice
    assert prof.input_tokens[prof.phase == "mixed"].tolist() == [12, 4]
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["mixed_step_retries"] == 1
    monkeypatch.setattr(prober, "prompt_step_gaps", real)  # none run again: no key
    _profiled(tmp_path / "r.csv", grid)
    assert "mixed_step_retries" not in yaml.safe_load((tmp_path / "r.yaml").read_text())

    def hidden(decoders: list, first_s: float, steps: int) -> list[float]:
        calls.append(steps)
        raise prober.StepsNotSeenError(f"profile: a decoder had 1 steps, {steps} needed")

    monkeypatch.setattr(prober, "prompt_step_gaps", hidden)
    calls.clear()
    twice = grid.model_copy(update={"mixed_step_tries": 2})
    tried = r"^profile: .* 2 needed \(grid.mixed_step_tries: 2 tries\)$"
    with pytest.raises(LyraError, match=tried):
        _profiled(tmp_path / "q.csv", twice)
    assert calls == [2, 2]
    assert not (tmp_path / "q.csv").exists()


def test_the_prompt_cache_probe_times_the_save_of_an_idle_slot_and_calibrate_fits_it(
    tmp_path: Path,
) -> None:
    # llama.cpp's default: after the grid, a prompt of N tokens in slot 1, then a lone
    # prompt in slot 0, whose launch saves slot 1's N tokens; this server waits 0.4 ms a
    # token saved before the lone prompt starts, outside its prompt_ms (ten times the
    # host's dear price, so that a loaded host's few ms of scheduling stay small beside it)
    from lyra_simpy.calibration.fit import fit_profile

    assert ProfileGrid().save_prompt_tokens == [32, 256, 512, 768]  # on by default
    grid = GRID.model_copy(
        update={"mixed_batch": [], "save_prompt_tokens": [32, 256, 512, 100_000],
                "save_repeats": 3}
    )  # fmt: skip
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.01, itl_s=0.002, timings=True, save_s_per_token=4e-4) as srv:
        profile(srv.url, "openai", grid, out, "test box", "-np 4 -c 4096")
        bodies = srv.received
    # the last 3 rounds x 3 sizes (100 000 does not fit a slot of 1 024): N in slot 1,
    # then the smallest prefill_tokens (8) in slot 0
    tail = [(len(b["prompt"]), b["max_tokens"], b["id_slot"]) for b in bodies[-18:]]
    assert tail == [(n, 1, 1) if k % 2 == 0 else (8, 1, 0)
                    for n in (32, 256, 512) * 3 for k in range(2)]  # fmt: skip
    lines = out.with_suffix(".save.csv").read_text().splitlines()
    assert lines[0] == "saved_tokens,wait_ms"
    rows = [tuple(map(float, line.split(","))) for line in lines[1:]]
    assert [n for n, _ in rows] == [32, 256, 512] * 3
    # the wait grows by the save: 0.4 ms a token, never less (the server sleeps it); a
    # loaded host may stretch one prompt, so the ceiling holds each size's median of 3
    assert all(ms >= 0.4 * n for n, ms in rows)
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["save_probe"] == {"sizes": [32, 256, 512], "prompt_tokens": 8, "repeats": 3}
    fit = fit_profile(read_profile(out)).prompt_save
    assert fit is not None
    assert fit.prompts == 9
    assert sorted(fit.median_wait_ms) == [32, 256, 512]
    # each size's median wait: the save and the host's scheduling (a 2-core CI host with
    # both test workers busy has added 26 ms to one); the slope is the save's price
    for n, ms in fit.median_wait_ms.items():
        assert 0.4 * n <= ms < 0.4 * n + 60.0
    assert fit.ms_per_token == pytest.approx(0.4, rel=0.1)
    # off: no file, no fit; --cache-ram 0 or --no-cache-idle-slots: no probe
    for flags, update in (("-np 4", {"save_prompt_tokens": []}), ("-np 4 --cache-ram 0", {}),
                          ("-np 4 --no-cache-idle-slots", {})):  # fmt: skip
        plain = tmp_path / "q.csv"
        with StreamServer(ttft_s=0.01, itl_s=0.002, timings=True) as srv:
            profile(srv.url, "openai", GRID.model_copy(update={"mixed_batch": [], **update}),
                    plain, "test box", flags)  # fmt: skip
        assert not plain.with_suffix(".save.csv").exists()
        assert fit_profile(read_profile(plain)).prompt_save is None
    # a server without timings.prompt_ms: the probe is skipped, and the metadata says so
    with StreamServer(ttft_s=0.01, itl_s=0.002) as srv:
        profile(srv.url, "openai", grid, plain, "test box", "-np 4")
    assert not plain.with_suffix(".save.csv").exists()
    meta = yaml.safe_load(plain.with_suffix(".yaml").read_text())
    assert meta["save_probe"] == {"skipped": "the endpoint gave no timings.prompt_ms"}


def test_the_fill_takes_the_probe_again_on_a_full_cache_and_calibrate_fits_its_price(
    tmp_path: Path,
) -> None:
    # grid.save_fill_prompts (item 87): after the probe, lone prompts in slot 1 until
    # the server's cache is full, then the probe again; this server's cache is full
    # once it has saved 2 000 tokens (the profile and its first probe save 1 759), and
    # its saves then cost a tenth; 3 rounds of 32 and 512, so that the host's
    # scheduling on one prompt (a loaded CI host: 26 ms) moves neither Theil-Sen slope
    from lyra_simpy.calibration.fit import fit_profile

    grid = GRID.model_copy(
        update={"mixed_batch": [], "save_prompt_tokens": [32, 512], "save_repeats": 3,
                "save_fill_prompts": 4}
    )  # fmt: skip
    out = tmp_path / "p.csv"
    with StreamServer(ttft_s=0.01, itl_s=0.002, timings=True, save_s_per_token=4e-4,
                      save_full_tokens=2000, save_reused_s_per_token=4e-5) as srv:  # fmt: skip
        profile(srv.url, "openai", grid, out, "test box", "-np 4 -c 4096")
        bodies = srv.received
    # the probe (3 rounds x 2 sizes, a pair each), the fill (4 of the largest size, 512,
    # in slot 1), the probe again
    shapes = [(len(b["prompt"]), b["id_slot"]) for b in bodies[-28:]]
    probe = [(n, 1) if k % 2 == 0 else (8, 0) for n in (32, 512) * 3 for k in range(2)]
    assert shapes == probe + [(512, 1)] * 4 + probe
    meta = yaml.safe_load(out.with_suffix(".yaml").read_text())
    assert meta["save_probe"]["fill"] == {"prompts": 4, "prompt_tokens": 512}
    fit = fit_profile(read_profile(out)).prompt_save
    assert fit is not None
    assert fit.ms_per_token == pytest.approx(0.4, rel=0.1)
    assert fit.reused_ms_per_token == pytest.approx(0.04, abs=0.02)
    assert fit.reused_prompts == 6
    # profiled again at the same path without the fill: the old second probe goes
    with StreamServer(ttft_s=0.01, itl_s=0.002, timings=True, save_s_per_token=4e-4) as srv:
        profile(srv.url, "openai", grid.model_copy(update={"save_fill_prompts": 0}), out,
                "test box", "-np 4 -c 4096")  # fmt: skip
    assert not out.with_suffix(".save_full.csv").exists()
    assert fit_profile(read_profile(out)).prompt_save.reused_ms_per_token is None  # type: ignore[union-attr]
