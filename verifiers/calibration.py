"""Calibrated thresholds: chosen on a labelled set, saved per (verifier, model), found by run and eval.

The file is JSON, `{"<verifier>@<model>": {"threshold": ..., "precision": ..., ...}}`, at
$LOOKAHEAD_CALIBRATION, or calibration.json under $LOOKAHEAD_CACHE (default
~/.cache/lookahead-reasoning).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lookahead_reasoning.files import cache_dir, write_atomically
from lookahead_reasoning.errors import validation_message


class Calibration(BaseModel):
    threshold: float
    precision: float | None
    recall: float | None
    accuracy: float
    n: int
    min_precision: float
    met_precision: bool  # False: no threshold reached min_precision; the most precise one was kept
    pairs: str  # the labelled file it was chosen on


def calibration_path() -> Path:
    if os.environ.get("LOOKAHEAD_CALIBRATION"):
        return Path(os.environ["LOOKAHEAD_CALIBRATION"])
    return cache_dir() / "calibration.json"


def _key(verifier: str, model: str | None) -> str:
    return f"{verifier}@{model or '-'}"


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"calibration file {path} is not valid JSON; delete it or calibrate again") from None
    if not isinstance(data, dict):
        raise ValueError(f"calibration file {path} is not a JSON object; delete it or calibrate again")
    return data


def save_calibration(verifier: str, model: str | None, calibration: Calibration, path: Path | None = None) -> Path:
    path = path or calibration_path()
    data = _read(path)
    data[_key(verifier, model)] = calibration.model_dump()
    write_atomically(path, json.dumps(data, indent=2))
    return path


def load_calibration(verifier: str, model: str | None, path: Path | None = None) -> Calibration | None:
    """The saved calibration, or None; ValueError (one line) when the file or the entry is malformed."""
    path = path or calibration_path()
    key = _key(verifier, model)
    entry = _read(path).get(key)
    if entry is None:
        return None
    try:
        return Calibration.model_validate(entry)
    except ValidationError as error:
        raise ValueError(
            f"calibration file {path}: {key} is not a calibration ({validation_message(error)}); "
            "delete it or calibrate again"
        ) from None
