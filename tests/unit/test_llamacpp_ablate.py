"""validation/llamacpp_ablate.py: the stored matrix priced by another commit or without
the prompts-together probe rows (issue 12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders import validation_module

ABLATE = validation_module("llamacpp_ablate")


def test_lone_probes_drops_only_prompts_sent_together(tmp_path: Path) -> None:
    profile = tmp_path / "profile.csv"
    rows = ["phase,batch_size,input_tokens,context_len,latency_ms",
            "prefill,1,200,0,300.0", "prefill,2,200,0,560.0", "decode,2,0,200,30.0",
            "prefill,4,200,0,1100.0", "mixed,3,200,201,400.0"]  # fmt: skip
    profile.write_text("\n".join(rows) + "\n")
    assert ABLATE.lone_probes(profile) == 2
    assert profile.read_text().splitlines() == [rows[0], rows[1], rows[3], rows[5]]


def test_without_a_stored_matrix_it_says_so(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.setattr(ABLATE, "STORED", tmp_path / "validation-llamacpp")
    assert ABLATE.main([]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("llamacpp_ablate.py: no stored matrix at ")
    assert len(out.splitlines()) == 1


def test_a_stored_folder_without_a_matrix_is_named(tmp_path: Path, capsys: Any) -> None:
    assert ABLATE.main(["--stored", str(tmp_path)]) == 2
    assert capsys.readouterr().out.strip() == (
        f"llamacpp_ablate.py: no stored matrix at {tmp_path} (run validate_cpu.py --matrix)"
    )
