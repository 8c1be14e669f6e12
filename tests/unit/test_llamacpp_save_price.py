"""validation/llamacpp_save_price.py: what llama-server's prompt-cache save cost per token
through a point's server log, while the cache grew and once it evicted (issue 12,
docs/VALIDATION-llamacpp.md item 73)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders import validation_module

price = validation_module("llamacpp_save_price")
ROOT = Path(__file__).resolve().parents[2]
KEPT = ROOT / "docs" / "validation" / "llamacpp-save-price-item73.json"

# two slots: slot 0's request (300 tokens) ends, the next launch on it saves them (12 ms);
# slot 1's (200) ended before that launch, which saves it as an idle slot
# (--cache-idle-slots), and that launch's own request (400) is saved, idle, at slot 1's
# next launch, which saves nothing of its own; then slot 1's request (400) ends, the cache
# evicts, and its next launch saves the 400 tokens in 4 ms
LOG = """\
0.01.000.000 I slot launch_slot_: id  0 | task 1 | processing task, is_child = 0
0.01.500.000 I slot launch_slot_: id  1 | task 2 | processing task, is_child = 0
0.02.000.000 I slot      release: id  0 | task 1 | stop processing: n_tokens = 300, truncated = 0
0.02.500.000 I slot      release: id  1 | task 2 | stop processing: n_tokens = 200, truncated = 0
0.03.000.000 I slot get_availabl: id  0 | task -1 | selected slot by LRU, t_last = 2
0.03.012.000 I slot launch_slot_: id  0 | task 3 | processing task, is_child = 0
0.03.600.000 I slot      release: id  0 | task 3 | stop processing: n_tokens = 400, truncated = 0
0.04.000.000 I slot get_availabl: id  1 | task -1 | selected slot by LRU, t_last = 3
0.04.020.000 I slot launch_slot_: id  1 | task 4 | processing task, is_child = 0
1.00.000.000 I slot      release: id  1 | task 4 | stop processing: n_tokens = 400, truncated = 0
1.00.100.000 I slot get_availabl: id  1 | task -1 | selected slot by LRU, t_last = 4
1.00.102.000 W srv         alloc:  - making room for prompt cache entry, removing oldest entry
1.00.104.000 I slot launch_slot_: id  1 | task 5 | processing task, is_child = 0
"""


def test_each_launch_is_charged_with_its_own_slots_unsaved_state(tmp_path: Path) -> None:
    log = tmp_path / "llama-server.log"
    log.write_text(LOG)
    rows, first = price.launches(log)
    # slot 1's launch at 4.0 s saves nothing of its own: the launch at 3.0 s saved it idle;
    # its launch at 60.1 s saves its 400 tokens after the eviction
    assert [(r["tokens"], round(r["ms"], 3), r["evicting"]) for r in rows] == [
        (300, 12.0, False), (400, 4.0, True)]  # fmt: skip
    assert first == pytest.approx(60.102)
    got = price.price(rows, least=100)
    assert got is not None
    assert (got["launches"], got["ms_per_token"]) == (2, pytest.approx(0.025))
    assert price.price(rows, least=1000) is None


def test_the_kept_prices_by_the_caches_state() -> None:
    # item 73 (docs/VALIDATION-llamacpp.md): once the cache evicts, a save costs 0.009-0.010
    # ms a token at the three long points; while it grows, 0.013-0.094 and spread from a
    # fresh page's price to a reused one's; the probes read 0.008-0.115; the short points'
    # caches never evicted
    kept = json.loads(KEPT.read_text())
    points = kept["points"]
    assert kept["least"] == 100
    evicting = {p: v["evicting"]["ms_per_token"] for p, v in points.items() if v["evicting"]}
    assert evicting == {"default/long": 0.0089, "kvu/long": 0.0099, "np2_b64/long": 0.0101}
    assert {p for p, v in points.items() if v["first_eviction_min"] is None} == {
        "default/short", "kvu/short", "np2_b64/short"}  # fmt: skip
    # when each long point's cache first evicted, in minutes of its server's life (to its
    # last launch), as the document rounds them
    when = {p: (round(v["first_eviction_min"]), round(v["log_min"]))
            for p, v in points.items() if v["first_eviction_min"] is not None}  # fmt: skip
    assert when == {"default/long": (15, 56), "kvu/long": (25, 35), "np2_b64/long": (46, 48)}
    growing = {p: v["growing"]["ms_per_token"] for p, v in points.items()}
    # the short points: 12-32 launches each, at 0.021-0.026 ms a token
    short = [v["growing"] for k, v in points.items() if k.endswith("short")]
    assert (min(g["launches"] for g in short), max(g["launches"] for g in short)) == (12, 32)
    assert (min(g["ms_per_token"] for g in short), max(g["ms_per_token"] for g in short)) == (
        0.0211, 0.0261)  # fmt: skip
    assert (min(growing.values()), max(growing.values())) == (0.0129, 0.094)
    spread = [(v["growing"]["p10"], v["growing"]["p90"]) for k, v in points.items()
              if k.endswith("long")]  # fmt: skip
    assert all(lo < 0.01 and hi > 0.11 for lo, hi in spread)
    # the probes are those of the matrix published then (item 72's set; item 75 ran two
    # points again)
    kept_set = ROOT / "docs" / "validation" / "llamacpp-matrix-epyc-item72.json"
    published = json.loads(kept_set.read_text())
    probes = {p: published["results"][p]["prompt_save"]["ms_per_token"] for p in points}
    assert probes == {p: v["probe_ms_per_token"] for p, v in points.items()}
    assert (round(min(probes.values()), 3), round(max(probes.values()), 3)) == (0.008, 0.115)
    # -kvu long's probe against its runs' saves once evicting, -np 2 -b 64 short's against
    # its runs' (growing)
    assert round(probes["kvu/long"] / evicting["kvu/long"]) == 9
    assert round(probes["np2_b64/short"] / growing["np2_b64/short"]) == 4
    doc = " ".join((ROOT / "docs" / "VALIDATION-llamacpp.md").read_text().split())
    assert "a save cost 0.009–0.010 ms a token at all three (10–90 %: 0.007–0.019)" in doc
    assert "`-np 4` long 15 minutes into its server's 56, `-kvu` long 25 of 35, `-np 2 -b 64` " \
           "long 46 of 48" in doc  # fmt: skip
    assert "and 0.021–0.026 at the short points, whose caches never evicted (12–32 launches" in doc
    assert "`-kvu` long's (0.086) charges its runs after the eviction nine times" in doc
    readme = " ".join((ROOT / "docs" / "llamacpp-fidelity.md").read_text().split())
    assert "a save cost 0.009–0.010 ms a token at every long point once the cache held its " \
           "8 GiB and evicted, while the profiles' probes read 0.008–0.115 (item 73" \
           in readme  # fmt: skip


def test_a_point_not_run_here_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(price, "OUT", tmp_path)
    with pytest.raises(SystemExit, match=r"^kvu/long: no .*llama-server.log or .*matrix.json "
                                         r"\(run validate_cpu.py --matrix, or llamacpp_store.py "
                                         r"unpack\)$"):  # fmt: skip
        price.main(["kvu/long"])
