"""An in-process streaming server for the live-endpoint tests.

Speaks OpenAI's ``/v1/completions`` server-sent events and SGLang's ``/generate``
stream (chunked transfer encoding, one token per event), with delays and faults set
per request in arrival order: ``faults[k]`` is the fault of the *k*-th request received.

Faults: ``slow_first`` (the first token comes ``slow_first_s`` late), ``drop`` (the
connection closes after two tokens), ``http500``, ``malformed`` (a chunk that is not
JSON), ``wrong_count`` (one token fewer than asked, reported as such), ``hang`` (no
reply until the client gives up), ``no_tokens`` (``[DONE]`` after no choice chunk,
usage 0), ``no_usage`` (no usage chunk), ``usage_plus_2`` (usage reports two tokens
more than streamed), ``trailing_empty`` (a last chunk with empty text and a
``finish_reason``, as llama.cpp sends), ``bad_ids`` (``token_ids`` that is not a list).

``style="vllm"`` streams as vLLM's ``/v1/completions`` does with
``--skip-tokenizer-init``: every chunk ``text: ""`` and ``usage: null``, the last token's
chunk with ``finish_reason: "length"``, ``token_ids`` only when the body asks
(``return_token_ids``), the usage chunk only with ``stream_options.include_usage``;
*tokens_per_chunk* > 1 streams several tokens per chunk (speculative decoding).
As vLLM does, that style answers 404 to a ``model`` other than the served name ``tiny``
(``/v1/models`` ``data[0].id``).
``vocab_size`` / ``max_model_len`` set what ``/v1/models`` reports (vLLM:
``max_model_len``; llama.cpp: ``meta.n_vocab``), ``props`` False hides ``/props``.
``path_s`` > 0 delays every request that long before its "engine" starts (the request
path), and the vLLM style then serves ``/metrics`` with vLLM's prefill-time histogram:
each finished request's ``ttft_s`` (what the engine took, without the path).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StreamServer:
    """Start with ``with StreamServer() as srv: srv.url``."""

    def __init__(
        self,
        ttft_s: float = 0.02,
        itl_s: float = 0.005,
        slow_first_s: float = 0.3,
        style: str = "text",
        tokens_per_chunk: int = 1,
        vocab_size: int | None = None,
        max_model_len: int | None = None,
        props: bool = True,
        path_s: float = 0.0,
        timings: bool = False,
        wake_s: float = 0.0,
        wake_after_s: float = 0.1,
        save_s_per_token: float = 0.0,
        save_full_tokens: int = 0,
        save_reused_s_per_token: float = 0.0,
    ):
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.slow_first_s = slow_first_s
        self.style = style
        self.tokens_per_chunk = tokens_per_chunk
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.props = props
        self.path_s = path_s
        self.timings = timings
        """Give llama.cpp's ``timings`` (``prompt_ms``: *ttft_s*) with the last chunk."""
        self.wake_s, self.wake_after_s = wake_s, wake_after_s
        """A request that finds the server idle *wake_after_s* or more (since the last
        one ended) takes *wake_s* longer to its first token (an engine's wake)."""
        self.save_s_per_token = save_s_per_token
        """llama.cpp's prompt cache in RAM: a request pinned to a slot (``id_slot``) waits
        this per token of its own slot's and every idle slot's state not saved yet, before
        its prompt (not in its ``prompt_ms``); a slot's state is its last request's prompt
        and outputs but the last."""
        self.save_full_tokens, self.save_reused_s_per_token = (
            save_full_tokens,
            save_reused_s_per_token,
        )
        """Once more than *save_full_tokens* (> 0) were saved, the cache is full and a save
        waits *save_reused_s_per_token* a token instead (memory the cache held before)."""
        self._saved_total = 0
        self._unsaved: dict[int, int] = {}
        self._running: set[int] = set()
        self._last_end = time.perf_counter()
        self._busy = 0
        self.prefills: list[float] = []
        """The engine prefill time of each finished request (``/metrics``)."""
        self.faults: dict[int, str] = {}
        self.slow_factor = 2.0
        """How much slower a request with the fault ``slow`` runs (a host's slow spell)."""
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                reply: dict[str, Any] | None = None
                if self.path == "/props" and server.props:
                    reply = {"build_info": "test-1", "model_path": "fake.gguf", "total_slots": 4}
                elif self.path == "/metrics" and server.style == "vllm" and server.path_s:
                    text = "\n".join(
                        [
                            "# TYPE vllm:request_prefill_time_seconds histogram",
                            'vllm:request_prefill_time_seconds_sum{engine="0"} '
                            f"{sum(server.prefills)}",
                            'vllm:request_prefill_time_seconds_count{engine="0"} '
                            f"{len(server.prefills)}.0",
                        ]
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                elif self.path == "/version" and server.style == "vllm":
                    reply = {"version": "0.32.0"}
                elif self.path == "/v1/models":
                    model: dict[str, Any] = {"id": "tiny", "object": "model"}
                    if server.style == "vllm":
                        model.update(owned_by="vllm", root="/models/tiny-llama")
                    if server.max_model_len is not None:
                        model["max_model_len"] = server.max_model_len
                    if server.vocab_size is not None:
                        model["meta"] = {"n_vocab": server.vocab_size}
                    reply = {"object": "list", "data": [model]}
                if reply is not None:
                    body = json.dumps(reply).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    k = len(server.received)
                    server.received.append(body)
                server._serve(self, body, server.faults.get(k))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> StreamServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _serve(self, h: BaseHTTPRequestHandler, body: dict[str, Any], fault: str | None) -> None:
        sglang = h.path == "/generate"
        if sglang:
            prompt = body["input_ids"]
            n = body["sampling_params"]["max_new_tokens"]
        else:
            prompt = body["prompt"]
            n = body["max_tokens"]
        wrong_model = self.style == "vllm" and body.get("model") not in (None, "tiny")
        if fault == "http500" or (wrong_model and not sglang):
            h.send_response(404 if wrong_model else 500)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if fault == "hang":
            time.sleep(3.0)
            return
        if fault == "wrong_count":
            n -= 1
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def event(payload: str) -> None:
            data = f"data: {payload}\n\n".encode()
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        time.sleep(self.path_s)
        scale = self.slow_factor if fault == "slow" else 1.0
        with self._lock:
            idle = not self._busy and time.perf_counter() - self._last_end >= self.wake_after_s
            self._busy += 1
            slot = body.get("id_slot")
            saved = 0
            if self.save_s_per_token and isinstance(slot, int):
                saved += self._unsaved.pop(slot, 0)  # its own slot's state first
                self._running.add(slot)
                for other in [k for k in self._unsaved if k not in self._running]:
                    saved += self._unsaved.pop(other)
            full = 0 < self.save_full_tokens < self._saved_total
            self._saved_total += saved
        wake = self.wake_s if idle else 0.0
        time.sleep(saved * (self.save_reused_s_per_token if full else self.save_s_per_token))
        try:
            self._stream(h, event, body, fault, sglang, prompt, n, scale, wake)
        finally:
            with self._lock:
                self._busy -= 1
                self._last_end = time.perf_counter()
                if self.save_s_per_token and isinstance(slot, int):
                    self._running.discard(slot)
                    self._unsaved[slot] = len(prompt) + n - 1

    def _stream(self, h: BaseHTTPRequestHandler, event: Any, body: dict[str, Any],
                fault: str | None, sglang: bool, prompt: list[Any], n: int, scale: float,
                wake: float) -> None:  # fmt: skip
        first = self.ttft_s * scale + wake
        time.sleep(first + (self.slow_first_s if fault == "slow_first" else 0.0))
        try:
            if sglang:
                self._sglang_events(event, fault, len(prompt), n, h)
            else:
                self._openai_events(event, fault, body, len(prompt), n, h, scale, first)
        except _DroppedError:
            return
        with self._lock:
            self.prefills.append(self.ttft_s)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _sglang_events(
        self, event: Any, fault: str | None, n_in: int, n: int, h: BaseHTTPRequestHandler
    ) -> None:
        for i in range(n):
            if i:
                time.sleep(self.itl_s)
            if self._skip(fault, i, event, h):
                continue
            meta = {"prompt_tokens": n_in, "completion_tokens": i + 1}
            event(json.dumps({"text": "x" * (i + 1), "meta_info": meta}))
        event("[DONE]")

    def _skip(self, fault: str | None, i: int, event: Any, h: BaseHTTPRequestHandler) -> bool:
        """Apply a mid-stream fault at chunk *i*: True when a bad chunk replaces it;
        a dropped connection raises."""
        if fault == "drop" and i == 2:
            h.wfile.flush()
            h.connection.shutdown(2)
            h.close_connection = True
            raise _DroppedError
        if fault == "malformed" and i == 1:
            event("{not json")
            return True
        return False

    def _openai_events(
        self,
        event: Any,
        fault: str | None,
        body: dict[str, Any],
        n_in: int,
        n: int,
        h: BaseHTTPRequestHandler,
        scale: float = 1.0,
        first: float | None = None,
    ) -> None:
        vllm = self.style == "vllm"
        with_ids = bool(body.get("return_token_ids")) and vllm
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if fault == "no_tokens":
            n = 0
        step = self.tokens_per_chunk
        sent = 0
        for i in range(0, n, step):
            if i:
                time.sleep(self.itl_s * scale)
            if self._skip(fault, i // step, event, h):
                continue
            k = min(step, n - i)
            choice: dict[str, Any] = {"index": 0, "text": "" if vllm else "x" * k}
            if vllm:
                choice["finish_reason"] = "length" if i + k >= n else None
            if with_ids:
                choice["token_ids"] = "7" if fault == "bad_ids" else [7] * k
            chunk: dict[str, Any] = {"choices": [choice]}
            if self.timings and i + k >= n:
                first_s = self.ttft_s * scale if first is None else first
                chunk["timings"] = {"prompt_ms": first_s * 1000.0}
            if vllm:
                chunk["usage"] = None
            event(json.dumps(chunk))
            sent += k
        if fault == "trailing_empty":
            event(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
        if with_usage and fault != "no_usage":
            done = sent + (2 if fault == "usage_plus_2" else 0)
            usage = {"prompt_tokens": n_in, "completion_tokens": done}
            event(json.dumps({"choices": [], "usage": usage}))
        event("[DONE]")


class _DroppedError(Exception):
    pass
