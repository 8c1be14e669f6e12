"""The data that travels with the package: the four request traces, the slices of the
published profiles, their checksums, and the catalog of traces known by name (lookup
order, fetching into the cache with its checksum checked, one-line errors offline)."""

from __future__ import annotations

import hashlib
import http.server
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lyra_simpy.calibration.roofline_check import PACKAGE_PROFILES
from lyra_simpy.cli import main
from lyra_simpy.errors import TraceError
from lyra_simpy.workload import catalog
from lyra_simpy.workload.catalog import PACKAGE_TRACES, KnownTrace, fetch, known_traces

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_vendored_trace_is_the_file_the_catalog_and_readme_name():
    vendored = [t for t in known_traces().values() if t.vendored]
    assert {t.name for t in vendored} == {
        "azure-code-2023",
        "azure-conv-2023",
        "mooncake-conversation",
        "mooncake-synthetic",
    }
    table = {}
    for line in (PACKAGE_TRACES / "README.md").read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"[0-9a-f]{64}", cells[6]):
            table[cells[1]] = (int(cells[5].replace(",", "")), cells[6])
    for trace in vendored:
        path = PACKAGE_TRACES / trace.file
        assert path.stat().st_size == trace.size
        assert _sha(path) == trace.sha256, trace.name
        assert table[trace.file] == (trace.size, trace.sha256)
    files = {p.name for p in PACKAGE_TRACES.iterdir()} - {"README.md"}
    assert files == {t.file for t in vendored}


def test_every_profile_slice_matches_its_readme_checksum():
    listed = {}
    for line in (PACKAGE_PROFILES / "README.md").read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"[0-9a-f]{64}", cells[2]):
            listed[cells[0]] = (int(cells[1]), cells[2])
    present = {
        str(p.relative_to(PACKAGE_PROFILES)): p
        for p in PACKAGE_PROFILES.rglob("*")
        if p.is_file() and p.name != "README.md"
    }
    assert set(present) == set(listed)
    for rel, path in present.items():
        assert (path.stat().st_size, _sha(path)) == listed[rel], rel


def test_no_scenario_reads_a_file_outside_the_project():
    for path in SCENARIOS.glob("*.yaml"):
        assert "shared/" not in path.read_text().replace("# ", ""), path.name


# -- lookup by name ---------------------------------------------------------------------


def test_a_name_resolves_to_the_package_copy(tmp_path, monkeypatch):
    monkeypatch.delenv("LYRA_TRACES_DIR", raising=False)
    got = catalog.resolve_path("azure-conv-2023", tmp_path)
    assert got == PACKAGE_TRACES / "AzureLLMInferenceTrace_conv.csv"


def test_lyra_traces_dir_comes_first_and_a_plain_path_stays_a_path(tmp_path, monkeypatch):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "AzureLLMInferenceTrace_conv.csv").write_text("TIMESTAMP,ContextTokens\n")
    monkeypatch.setenv("LYRA_TRACES_DIR", str(mine))
    assert catalog.resolve_path("azure-conv-2023", tmp_path) == (
        mine / "AzureLLMInferenceTrace_conv.csv"
    )
    # a file of the scenario's own with that name wins over the catalog
    (tmp_path / "azure-conv-2023").write_text("x")
    assert catalog.resolve_path("azure-conv-2023", tmp_path) == tmp_path / "azure-conv-2023"
    assert catalog.resolve_path("t.csv", tmp_path) == tmp_path / "t.csv"
    assert catalog.resolve_path("/abs/t.csv", tmp_path) == Path("/abs/t.csv")


def test_a_name_not_fetched_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("LYRA_TRACES_DIR", raising=False)
    with pytest.raises(TraceError) as info:
        catalog.resolve_path("burstgpt-1", tmp_path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(
        "trace 'burstgpt-1' is not here: run `lyra-simpy traces fetch burstgpt-1`"
    )
    assert str(tmp_path / "cache" / "traces" / "BurstGPT_1.csv") in text


def test_a_scenario_naming_a_fetched_trace_reads_it_from_the_cache(
    tmp_path, monkeypatch, make_scenario
):
    from lyra_simpy.scenario import scenario_from_dict

    monkeypatch.setenv("LYRA_CACHE", str(tmp_path))
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "BurstGPT_1.csv").write_text(
        "Timestamp,Model,Request tokens,Response tokens\n0,x,10,5\n1.5,x,20,6\n3,x,30,7\n"
    )
    raw = {
        "name": "b",
        "seed": 1,
        "workload": {
            "num_requests": 3,
            "arrival": {"name": "trace", "path": "burstgpt-1", "format": "burstgpt"},
            "input_tokens": {
                "name": "empirical",
                "path": "burstgpt-1",
                "format": "burstgpt",
                "field": "input",
            },
            "output_tokens": {
                "name": "empirical",
                "path": "burstgpt-1",
                "format": "burstgpt",
                "field": "output",
            },
        },
        "scheduler": {"name": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 256},
        "kv_cache": {"block_size": 8, "num_blocks": 64},
        "cost": {"name": "linear", "base_ms": 10.0, "per_seq_ms": 1.0},
    }
    from lyra_simpy import simulate

    result = simulate(scenario_from_dict(raw, tmp_path))
    assert result.summary["completed"] == 3
    # arrivals are the trace's (0, 1.5, 3 s); lengths are drawn from its rows
    assert result.summary["duration"] > 3.0
    assert result.summary["total_input_tokens"] in range(30, 91, 10)


# -- fetching ---------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A file server on 127.0.0.1 over *tmp_path*/www (stops with the test)."""
    www = tmp_path / "www"
    www.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
            super().__init__(*a, directory=str(www), **k)

        def log_message(self, *args):  # type: ignore[no-untyped-def]
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _entry(data: bytes, sha: str | None = "auto") -> KnownTrace:
    return KnownTrace(
        name="tiny",
        file="tiny.csv",
        format="csv",
        vendored=False,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest() if sha == "auto" else sha,
        licence="CC0",
        source="a test",
        url="http://127.0.0.1:9/none",
        cite="-",
        about="a test trace",
    )


DATA = b"arrival_s,input_tokens,output_tokens\n0,10,5\n1,20,6\n"


def test_fetch_downloads_checks_and_keeps_the_file(tmp_path, monkeypatch, server):
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "www" / "tiny.csv").write_bytes(DATA)
    got = fetch(_entry(DATA), f"{server}/tiny.csv", progress=False)
    assert got == tmp_path / "cache" / "traces" / "tiny.csv"
    assert got.read_bytes() == DATA
    assert [p.name for p in got.parent.iterdir()] == ["tiny.csv"]  # nothing half-written
    # already here: not fetched again (the server has nothing now)
    (tmp_path / "www" / "tiny.csv").unlink()
    assert fetch(_entry(DATA), f"{server}/tiny.csv", progress=False) == got


def test_fetch_refuses_a_file_whose_checksum_differs(tmp_path, monkeypatch, server):
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "www" / "tiny.csv").write_bytes(DATA + b"2,30,7\n")
    with pytest.raises(TraceError, match=r"^traces fetch tiny: sha256 of the download is "):
        fetch(_entry(DATA), f"{server}/tiny.csv", progress=False)
    assert not list((tmp_path / "cache" / "traces").iterdir())


def test_fetch_without_a_published_checksum_says_what_it_got(tmp_path, monkeypatch, server):
    import io

    monkeypatch.setenv("LYRA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "www" / "tiny.csv").write_bytes(DATA)
    log = io.StringIO()
    fetch(_entry(DATA, sha=None), f"{server}/tiny.csv", progress=False, log=log)
    assert log.getvalue() == (
        "tiny: the source publishes no checksum; sha256 of what was fetched: "
        f"{hashlib.sha256(DATA).hexdigest()}\n"
    )


def test_fetch_offline_is_one_line_naming_the_url_and_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path / "cache"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/tiny.csv"
    with pytest.raises(TraceError) as info:
        fetch(_entry(DATA), url, progress=False, timeout_s=5)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"traces fetch tiny: cannot reach {url} (")
    assert text.endswith(
        f"download {url} by hand and put it at {tmp_path / 'cache/traces/tiny.csv'}"
    )
    assert not list((tmp_path / "cache" / "traces").iterdir())


def test_fetch_of_a_missing_file_names_the_http_status(tmp_path, monkeypatch, server):
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(TraceError, match=r"answered HTTP 404; download .* by hand"):
        fetch(_entry(DATA), f"{server}/absent.csv", progress=False)


def test_traces_cli_lists_and_fetches(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LYRA_CACHE", str(tmp_path))
    monkeypatch.delenv("LYRA_TRACES_DIR", raising=False)
    assert main(["traces", "list"]) == 0
    out = capsys.readouterr().out
    for trace in known_traces().values():
        assert trace.name in out
        assert (trace.sha256 or "not published by the source") in out
    assert re.search(
        r"^azure-conv-2023\s+azure\s+0\.7 MB\s+CC-BY-4\.0\s+in the package$", out, re.M
    )
    assert re.search(r"^burstgpt-1\s+burstgpt\s+52\.3 MB\s+CC-BY-4\.0\s+not fetched$", out, re.M)
    assert main(["traces", "fetch", "mooncake-synthetic"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"mooncake-synthetic: {PACKAGE_TRACES / 'mooncake_synthetic_trace.jsonl'}"
    )
    assert main(["traces", "fetch", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lyra-simpy: traces fetch: got 'nope', must be one of azure-code-2023")
    assert err.count("\n") == 1


def test_the_packaged_yaml_reads_the_same_through_libyaml_and_pure_python():
    """The catalogs are parsed by libyaml when present (``files.package_yaml``): the
    values must be exactly the pure-Python parser's."""
    import yaml

    from lyra_simpy.files import package_yaml

    data = PACKAGE_TRACES.parent
    files = sorted(data.glob("*.yaml"))
    assert {f.name for f in files} >= {"hardware.yaml", "models.yaml", "traces.yaml"}
    for path in files:
        text = path.read_text()
        assert package_yaml(text) == yaml.safe_load(text), path.name
