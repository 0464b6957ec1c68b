"""The dtype of CPU SGLang servers: bfloat16 where the CPU computes it natively, float32 elsewhere.

On a CPU with AMX-BF16 or AVX-512-BF16, bfloat16 decodes several times faster than float32 and a
batch of parallel branches costs about as much as one decode, as on a GPU (docs/cpu.md). Without
them bfloat16 is emulated and several times slower than float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lookahead_reasoning.errors import LookaheadError

DTYPES = ("auto", "bfloat16", "float32")  # what `lookahead launch --dtype` takes; auto: by the CPU's flags
BF16_UNITS = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX-512-BF16"}  # /proc/cpuinfo flag: its name


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    reason: str  # why, for the log and --dry-run: "CPU has AMX-BF16"
    warning: str | None = None  # one line for a choice that will run slowly

    def __str__(self) -> str:
        return f"{self.dtype} ({self.reason})"


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The CPU's feature flags; none where /proc/cpuinfo is missing (not Linux) or unreadable."""
    try:
        lines = cpuinfo.read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return value.split()
    return []


def bf16_unit(flags: Iterable[str]) -> str | None:
    """The CPU's native bfloat16 unit ("AMX-BF16", "AVX-512-BF16"), or None: bfloat16 would be emulated."""
    present = set(flags)
    return next((name for flag, name in BF16_UNITS.items() if flag in present), None)


def choose_cpu_dtype(asked: str, flags: Iterable[str], source: str = "asked with --dtype") -> DtypeChoice:
    """The dtype for a CPU server: `asked` as given, or for "auto" bfloat16 where the CPU has a native
    bfloat16 unit and float32 elsewhere. `source` says where a dtype other than auto was given."""
    unit = bf16_unit(flags)
    if asked == "auto":
        if unit:
            return DtypeChoice("bfloat16", f"CPU has {unit}")
        return DtypeChoice("float32", "CPU has no AMX-BF16 or AVX-512-BF16")
    warning = None
    if asked == "bfloat16" and unit is None:
        warning = (f"warning: bfloat16 ({source}) is emulated on a CPU without AMX-BF16 or AVX-512-BF16, "
                   "several times slower than float32")
    return DtypeChoice(asked, source, warning)


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise LookaheadError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
