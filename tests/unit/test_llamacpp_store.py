"""validation/llamacpp_store.py: a matrix point's runs into the repository and back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import validation_module


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    mod = validation_module("llamacpp_store")
    out, kept = tmp_path / "results", tmp_path / "points"
    published = tmp_path / "matrix.json"
    published.write_text(json.dumps({"results": {"kvu/long": {"finished": "2026-12-06 09:06 UTC"}},
                                     "facts": {}}))  # fmt: skip
    for name, value in (("OUT", out), ("STORE", kept), ("PUBLISHED", published),
                        ("ROOT", tmp_path)):  # fmt: skip
        monkeypatch.setattr(mod, name, value)
    point = out / "kvu_long"
    files = {"profile.csv": "rows\n", "real/poisson_0.3/run1/requests.jsonl": "{}\n",
             "llama-server.log": "log\n", "sim/poisson_0.3/base/x.csv": "made\n",
             "at_speed_runs/poisson_0.3.yaml": "made\n", "poisson_0.3_compare.json": "{}",
             "poisson_0.3.yaml": "load\n"}  # fmt: skip
    for rel, text in files.items():
        (point / rel).parent.mkdir(parents=True, exist_ok=True)
        (point / rel).write_text(text)
    return mod


def test_a_point_packed_and_unpacked_comes_back_without_what_the_simulator_makes(
    store,  # type: ignore[no-untyped-def]
) -> None:
    (line,) = store.pack(["kvu/long"])
    assert line.startswith("kvu/long: 4 files -> points/kvu_long.tar.xz (")
    index = json.loads((store.STORE / "index.json").read_text())
    assert index["kvu/long"]["finished"] == "2026-12-06 09:06 UTC"
    assert index["kvu/long"]["sha256"] == store.sha256(store.STORE / "kvu_long.tar.xz")
    # packed twice, the same bytes (no times or owners in the archive)
    store.pack(["kvu/long"])
    assert json.loads((store.STORE / "index.json").read_text()) == index
    # a folder that is there is left alone; --force replaces it with the stored files
    assert store.unpack(None, force=False) == [
        f"kvu/long: {store.OUT / 'kvu_long'} is there; left as it is (--force replaces it)"
    ]
    assert (store.OUT / "kvu_long" / "sim").is_dir()
    assert store.unpack(["kvu/long"], force=True) == [
        f"kvu/long: 4 files -> {store.OUT / 'kvu_long'}"
    ]
    folder = store.OUT / "kvu_long"
    back = sorted(str(p.relative_to(store.OUT)) for p in folder.rglob("*") if p.is_file())
    assert back == [
        "kvu_long/llama-server.log",
        "kvu_long/poisson_0.3.yaml",
        "kvu_long/profile.csv",
        "kvu_long/real/poisson_0.3/run1/requests.jsonl",
    ]


def test_unpacking_into_a_fresh_clone_puts_the_published_matrix_beside_the_points(
    store,  # type: ignore[no-untyped-def]
) -> None:
    import shutil

    store.pack(["kvu/long"])
    shutil.rmtree(store.OUT)
    store.unpack(["kvu/long"], force=False)
    assert (store.OUT / "matrix.json").read_text() == store.PUBLISHED.read_text()
    assert (store.OUT / "kvu_long" / "profile.csv").read_text() == "rows\n"


def test_a_damaged_archive_or_another_run_is_one_line_and_writes_nothing(
    store,  # type: ignore[no-untyped-def]
) -> None:
    import shutil

    store.pack(["kvu/long"])
    shutil.rmtree(store.OUT)
    archive = store.STORE / "kvu_long.tar.xz"
    good = archive.read_bytes()
    archive.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(SystemExit, match=r"^unpack: kvu_long.tar.xz: SHA-256 [0-9a-f]{64}, "):
        store.unpack(None, force=False)
    archive.write_bytes(good)
    # the published matrix holds a later run of the point than the one stored
    store.PUBLISHED.write_text(json.dumps({"results": {"kvu/long": {"finished": "later"}}}))
    with pytest.raises(SystemExit) as stop:
        store.unpack(None, force=False)
    assert str(stop.value) == (
        "unpack: kvu/long: the stored runs finished 2026-12-06 09:06 UTC, the published "
        "matrix's later"
    )
    assert not store.OUT.exists()
    # a matrix.json in results/ from another run of the point: --resimulate would pair them
    store.PUBLISHED.write_text(
        json.dumps({"results": {"kvu/long": {"finished": "2026-12-06 09:06 UTC"}}})
    )
    store.OUT.mkdir()
    (store.OUT / "matrix.json").write_text(json.dumps({"results": {"kvu/long": {"finished": "x"}}}))
    with pytest.raises(SystemExit) as stop:
        store.unpack(None, force=True)
    assert str(stop.value) == (
        f"unpack: {store.OUT / 'matrix.json'} holds kvu/long as run x, the stored runs finished "
        "2026-12-06 09:06 UTC; move it aside (unpack then puts the published matrix there)"
    )
    assert [p.name for p in store.OUT.iterdir()] == ["matrix.json"]
    with pytest.raises(SystemExit, match=r"^unpack: no stored point 'kvu/short'; stored: "):
        store.unpack(["kvu/short"], force=False)
    with pytest.raises(SystemExit, match=r"^pack: 'kvu/short' is not a published point"):
        store.pack(["kvu/short"])


def test_a_points_folder_and_key_map_both_ways() -> None:
    # every reader finds a point's folder through llamacpp_points.point_folder, and a folder
    # named on a command line (llamacpp_launch_save.py --points) gives its key back
    points = validation_module("llamacpp_points")
    root = Path(__file__).resolve().parents[2]
    keys = json.loads((root / "docs" / "validation" / "llamacpp-matrix.json").read_text())
    for key in keys["results"]:
        folder = points.point_folder(key, points.OUT)
        assert folder.parent == points.OUT
        assert points.point_key(folder.name) == key
    assert points.point_folder("np2_b64/long", Path("r")) == Path("r/np2_b64_long")
    assert points.point_key("np2_b64_long") == "np2_b64/long"
