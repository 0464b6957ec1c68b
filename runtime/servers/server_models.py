"""What a server serves and with which flags: model names, folders and ids, the device, GPU counts.

CPU mode (docs/cpu.md) puts an empty `common_ops` module on the server's PYTHONPATH: sgl_kernel
imports it unconditionally and finds no CUDA library on a CPU-only machine. That module is a
stand-in that lets the CPU server start, not a feature.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Callable

from lookahead_reasoning.runtime.servers import offline_weights

from lookahead_reasoning.errors import LookaheadError

HF_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def check_model(model: str) -> None:
    """Fail early, before anything is prepared or started, on a model that cannot be served."""
    if model in offline_weights.MODEL_NAMES:
        return
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise LookaheadError(f"model folder {path} has no config.json")
        return
    if HF_ID.match(model) and not model.startswith("."):
        return
    if model.startswith(("/", ".", "~")) or os.sep in model:
        raise LookaheadError(f"model folder {model} does not exist")
    raise LookaheadError(
        f"unknown model {model!r}: give a folder, a Hugging Face id, or one of {', '.join(offline_weights.MODEL_NAMES)}"
    )


def resolve_model(model: str, log: Callable[[str], None]) -> tuple[str, str | None]:
    """(model path for SGLang, frontend chat template name or None)."""
    check_model(model)
    if model in offline_weights.MODEL_NAMES:
        log(f"preparing offline model {model}")
        return str(offline_weights.prepare(model, log=log)), offline_weights.chat_template_for(model)
    return resolve_path(model), None


def resolve_path(model: str) -> str:
    """A model folder as an absolute path; a Hugging Face id as it is."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def detect_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def cpu_stub_dir() -> Path:
    stub = offline_weights.cache_root().parent / "cpu-stub"
    stub.mkdir(parents=True, exist_ok=True)
    module = stub / "common_ops.py"
    if not module.exists():
        module.write_text('"""Empty stand-in for sgl_kernel\'s CUDA ops on a CPU-only machine (see launcher)."""\n')
    return stub


_GPU_FLAGS = {"--tp": 1, "--tp-size": 1, "--tensor-parallel-size": 1, "--dp": 1, "--dp-size": 1,
              "--data-parallel-size": 1, "--pp": 1, "--pp-size": 1, "--pipeline-parallel-size": 1}


def flag_values(args: list[str]) -> dict[str, str]:
    """--flag value and --flag=value pairs of a server command line."""
    values = {}
    for i, arg in enumerate(args):
        if "=" in arg and arg.startswith("--"):
            key, value = arg.split("=", 1)
            values[key] = value
        elif arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            values[arg] = args[i + 1]
    return values


def gpus_per_server(args: list[str]) -> int:
    """GPUs one SGLang server takes: tensor × data × pipeline parallel sizes of its flags."""
    values = flag_values(args)
    sizes = {"tp": 1, "dp": 1, "pp": 1}
    for flag in _GPU_FLAGS:
        if flag in values:
            try:
                sizes[flag[2:4]] = int(values[flag])
            except ValueError:
                raise LookaheadError(f"server flag {flag} needs a number, got {values[flag]!r}") from None
    return sizes["tp"] * sizes["dp"] * sizes["pp"]


def without_flag(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = i + 1 < len(args)
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out
