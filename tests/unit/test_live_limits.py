"""Prompt ids and lengths the endpoint accepts, checked before a replay sends anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from live_server import StreamServer
from lyra_simpy import scenario_from_dict
from lyra_simpy.cli import main
from lyra_simpy.errors import LyraError
from lyra_simpy.live.limits import Limits, endpoint_limits, token_range, with_vocab
from lyra_simpy.live.replay import ReplayConfig, replay
from lyra_simpy.live.workload import TokenIds


def test_limits_come_from_v1_models() -> None:
    with StreamServer(vocab_size=5000, max_model_len=64) as srv:
        got = endpoint_limits(srv.url)
    assert got == Limits(5000, 64, "/v1/models meta.n_vocab", "tiny")
    assert with_vocab(got, 700) == Limits(700, 64, "--vocab-size", "tiny")
    assert got.body({"x": 1}) == {"model": "tiny", "x": 1}
    assert got.body({"model": "other"}) == {"model": "other"}  # the caller's name wins
    assert Limits().body({"x": 1}) == {"x": 1}
    with StreamServer() as srv:
        assert endpoint_limits(srv.url) == Limits(model="tiny")
    assert endpoint_limits("http://127.0.0.1:9") == Limits()


@pytest.mark.parametrize(
    ("ids", "vocab", "want"),
    [
        (None, None, (1000, 30000)),
        (None, 32000, (1000, 30000)),
        (None, 5000, (1000, 5000)),  # the default is fitted to a small vocabulary
        (TokenIds(low=10, high=800), 800, (10, 800)),
        (TokenIds(low=10, high=90000), None, (10, 90000)),
    ],
)
def test_token_range_fits_the_vocabulary(
    ids: TokenIds | None, vocab: int | None, want: tuple[int, int]
) -> None:
    got = token_range(ids, Limits(vocab, None, "x"))
    assert (got.low, got.high) == want


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (
            TokenIds(low=10, high=801),
            "--token-ids: got 10:801, must lie in [0, 800) (the model's vocabulary of 800 "
            "ids (--vocab-size)): HIGH <= 800",
        ),
        (
            None,
            "token ids: the default range starts at 1000, above the model's vocabulary of "
            "800 ids (--vocab-size); give --token-ids LOW:HIGH with HIGH <= 800",
        ),
    ],
)
def test_ids_outside_the_vocabulary_are_one_line(ids: TokenIds | None, message: str) -> None:
    with pytest.raises(LyraError) as exc:
        token_range(ids, Limits(800, None, "--vocab-size"))
    assert str(exc.value) == message


def test_replay_draws_ids_inside_the_reported_vocabulary(
    tmp_path: Path, tiny_raw: dict[str, Any]
) -> None:
    sc = scenario_from_dict(tiny_raw)
    with StreamServer(ttft_s=0.005, itl_s=0.001, vocab_size=1200, max_model_len=4096) as srv:
        replay(sc, ReplayConfig(endpoint=srv.url, time_limit_s=30), tmp_path / "r")
        ids = [i for body in srv.received for i in body["prompt"]]
    assert ids
    assert min(ids) >= 1000
    assert max(ids) < 1200
    man = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert man["token_ids"] == {
        "low": 1000,
        "high": 1200,
        "vocab_size": 1200,
        "vocab_source": "/v1/models meta.n_vocab",
        "max_model_len": 4096,
        "served_model": "tiny",
        "prompt_seed": None,
    }


@pytest.mark.parametrize(
    ("server", "argv", "message"),
    [
        ({}, ["--vocab-size", "900"], "token ids: the default range starts at 1000"),
        ({}, ["--token-ids", "5:40000", "--vocab-size", "32000"], "--token-ids: got 5:40000"),
        ({"max_model_len": 16}, [], "request 0: "),
    ],
)
def test_replay_refuses_before_sending(
    tmp_path: Path,
    tiny_raw: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    server: dict[str, Any],
    argv: list[str],
    message: str,
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(tiny_raw))
    with StreamServer(**server) as srv:
        code = main(
            ["replay", str(path), "--endpoint", srv.url, "--out", str(tmp_path / "o"), *argv]
        )
        sent = len(srv.received)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert message in err
    assert sent == 0
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("5", "--token-ids: got '5', must be LOW:HIGH with 0 < LOW < HIGH"),
        ("9:3", "--token-ids: got '9:3', must be LOW:HIGH with 0 < LOW < HIGH"),
        ("0:3", "--token-ids: got '0:3', must be LOW:HIGH with 0 < LOW < HIGH"),
    ],
)
def test_cli_bad_token_ids_exit_2(
    text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay", "x.yaml", "--endpoint", "http://h:1", "--token-ids", text])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
