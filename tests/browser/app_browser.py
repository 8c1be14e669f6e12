"""``tox -e app-browser``: the explorer in a real browser (headless Chromium).

Runs ``scenarios/lab02_goodput_vs_batch.yaml`` in quick mode into a temporary folder,
starts ``lyra-simpy explore``'s Streamlit server on 127.0.0.1 (a free port), opens the
page in the system's headless Chromium through the DevTools protocol (its debugging
port also on 127.0.0.1), waits for the charts, opens the "Latency CDFs" tab, saves a
screenshot and fails (exit 1) on a Streamlit error box, an uncaught exception or a
console error. Without Chromium it prints one line and exits 0 (skipped); on Debian and
Ubuntu ``sudo apt-get install chromium`` installs it.

Usage: ``python tests/browser/app_browser.py [--screenshot PATH] [--timeout S]``
(default screenshot: ``explore.png`` in the temporary folder, whose path is printed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "lab02_goodput_vs_batch.yaml"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
CHARTS_JS = (
    "[...document.querySelectorAll('[data-testid=stVegaLiteChart]')]"
    ".filter(e => e.querySelector('canvas, svg') && e.getBoundingClientRect().height > 50)"
    ".length"
)
ERRORS_JS = 'document.querySelectorAll(\'[data-testid="stException"],[data-testid="stAlertContentError"]\').length'  # noqa: E501
TAB_JS = (
    "(() => { const b = [...document.querySelectorAll('[role=tab]')]"
    ".find(e => e.innerText.includes('%s')); if (b) { b.click(); return true } "
    "return false })()"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer in {timeout_s:.0f} s")


class DevTools:
    """A minimal DevTools-protocol client for one page (commands and their events)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self.events.append(msg)

    def evaluate(self, js: str) -> Any:
        return self.call("Runtime.evaluate", expression=js, returnByValue=True)["result"].get(
            "value"
        )

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            method, p = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif method == "Runtime.exceptionThrown":
                out.append(p["exceptionDetails"].get("text", "exception"))
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out


def _wait_charts(tools: DevTools, at_least: int, end: float) -> int:
    charts = 0
    while time.monotonic() < end:
        charts = int(tools.evaluate(CHARTS_JS) or 0)
        if charts >= at_least:
            break
        time.sleep(0.5)
    return charts


def _visit(tools: DevTools, url: str, timeout_s: float) -> tuple[int, int, bytes]:
    """Open *url*, draw the CDF and timeline tabs; (charts drawn, error boxes, PNG of the
    CDF tab)."""
    import base64

    for domain in ("Runtime", "Log", "Page"):
        tools.call(f"{domain}.enable")
    tools.call("Page.navigate", url=url)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not tools.evaluate(TAB_JS % "Timeline"):
        time.sleep(0.5)
    timeline = _wait_charts(tools, 4, end)  # the timeline's four panels
    tools.evaluate(TAB_JS % "Sim vs real")  # docs/validation's runs, drawn if present
    _wait_charts(tools, 4, min(end, time.monotonic() + 15))
    tools.evaluate(TAB_JS % "Latency")
    cdfs = _wait_charts(tools, 4, end)  # the four CDFs
    charts = timeline + cdfs
    time.sleep(1.5)  # let the tab settle before the picture
    errors_shown = int(tools.evaluate(ERRORS_JS) or 0)
    png = tools.call("Page.captureScreenshot", format="png")
    return charts, errors_shown, base64.b64decode(png["data"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--screenshot", type=Path, help="PNG to write")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for charts")
    p.add_argument(
        "--query",
        default="",
        help="address query, e.g. 'scenario=lab02_goodput_vs_batch&variants=16,32'",
    )
    p.add_argument(
        "--results", type=Path, help="explore this results folder (default: a quick run)"
    )
    args = p.parse_args(argv)
    browser = next((b for b in map(shutil.which, BROWSERS) if b), None)
    if browser is None:
        print("app-browser: skipped, no Chromium found (Debian/Ubuntu: apt-get install chromium)")
        return 0
    from lyra_simpy.explore import launch

    tmp = Path(tempfile.mkdtemp(prefix="lyra-app-browser-"))
    shot = args.screenshot or tmp / "explore.png"
    results, figures = tmp / "results", tmp / "figures"
    if args.results is not None:
        results, figures = args.results, args.results.parent / "figures"
    else:
        subprocess.run(
            [sys.executable, "-m", "lyra_simpy", "run", str(SCENARIO), "--quick", "--out",
             str(results), "--figures", str(figures), "--trace-events"],
            check=True, stdout=subprocess.DEVNULL, cwd=ROOT,
        )  # fmt: skip
    port = _free_port()
    server = subprocess.Popen(
        launch.command(results, figures, port), env=launch.environ(results, figures), cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    chrome = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/_stcore/health", 60)
        chrome = subprocess.Popen(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={tmp / 'chrome'}", "--window-size=1400,1500", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert chrome.stderr is not None
        debug_port = None
        for line in chrome.stderr:
            if "DevTools listening on ws://" in line:
                debug_port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])
                break
        if debug_port is None:
            raise RuntimeError("Chromium did not open its debugging port")
        with urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json/list") as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        from websockets.sync.client import connect

        with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            tools = DevTools(ws)
            charts, errors_shown, png = _visit(
                tools, f"http://127.0.0.1:{port}/?{args.query}", args.timeout
            )
            console = tools.console_errors()
        shot.parent.mkdir(parents=True, exist_ok=True)
        shot.write_bytes(png)
        print(f"app-browser: {charts} charts drawn, screenshot {shot}")
        failures = []
        if charts < 8:
            failures.append(f"only {charts} of 8 charts drawn in {args.timeout:.0f} s")
        if errors_shown:
            failures.append(f"{errors_shown} Streamlit error box(es) on the page")
        failures += [f"console error: {line}" for line in console]
        for line in failures:
            print(f"app-browser: FAIL {line}")
        return 1 if failures else 0
    finally:
        for proc in (chrome, server):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    sys.exit(main())
