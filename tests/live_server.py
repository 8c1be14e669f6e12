"""An in-process streaming server for the live-endpoint tests.

Speaks OpenAI's ``/v1/completions`` server-sent events and SGLang's ``/generate``
stream (chunked transfer encoding, one token per event), with delays and faults set
per request in arrival order: ``faults[k]`` is the fault of the *k*-th request received.

Faults: ``slow_first`` (the first token comes ``slow_first_s`` late), ``drop`` (the
connection closes after two tokens), ``http500``, ``malformed`` (a chunk that is not
JSON), ``wrong_count`` (one token fewer than asked, reported as such), ``hang`` (no
reply until the client gives up).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StreamServer:
    """Start with ``with StreamServer() as srv: srv.url``."""

    def __init__(self, ttft_s: float = 0.02, itl_s: float = 0.005, slow_first_s: float = 0.3):
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.slow_first_s = slow_first_s
        self.faults: dict[int, str] = {}
        self.received: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/props":
                    body = json.dumps(
                        {"build_info": "test-1", "model_path": "fake.gguf", "total_slots": 4}
                    ).encode()
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
        if fault == "http500":
            h.send_response(500)
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

        time.sleep(self.ttft_s + (self.slow_first_s if fault == "slow_first" else 0.0))
        for i in range(n):
            if i:
                time.sleep(self.itl_s)
            if fault == "drop" and i == 2:
                h.wfile.flush()
                h.connection.shutdown(2)
                h.close_connection = True
                return
            if fault == "malformed" and i == 1:
                event("{not json")
                continue
            if sglang:
                meta = {"prompt_tokens": len(prompt), "completion_tokens": i + 1}
                event(json.dumps({"text": "x" * (i + 1), "meta_info": meta}))
            else:
                event(json.dumps({"choices": [{"text": "x", "index": 0}]}))
        if not sglang:
            usage = {"prompt_tokens": len(prompt), "completion_tokens": n}
            event(json.dumps({"choices": [], "usage": usage}))
        event("[DONE]")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
