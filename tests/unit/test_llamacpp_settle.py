"""validate_cpu.py --matrix --settle: one request a slot right before each real run, so
that the run starts with the probes' states out of the slots and the slots released in
the order a never-used server gives them out (issue 12, item 67)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from builders import validation_module

matrix = validation_module("llamacpp_matrix")


def test_settle_pins_one_short_request_to_each_slot_highest_id_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[dict[str, Any]] = []

    def post(url: str, json: dict[str, Any], timeout: float) -> httpx.Response:
        sent.append(json)
        assert url == "http://127.0.0.1:8080/completion"
        if json["id_slot"] == 1:  # a slot that failed to answer is left out
            return httpx.Response(500, json={"error": "busy"})
        return httpx.Response(200, json={"id_slot": json["id_slot"], "content": "x"})

    monkeypatch.setattr(httpx, "post", post)
    got = matrix.settle_slots("http://127.0.0.1:8080", 4)
    assert [b["id_slot"] for b in sent] == [3, 2, 1, 0]
    assert got == [3, 2, 0]
    for b in sent:
        assert len(b["prompt"]) == matrix.SETTLE_TOKENS
        assert b["n_predict"] == 1
        assert b["cache_prompt"] is False
    # fresh prompt ids each request: none shared with another's
    assert len({tuple(b["prompt"]) for b in sent}) == 4
