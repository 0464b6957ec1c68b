"""Eval results on disk: one JSON line per (problem, method, sample), appended as each finishes.

The file is the state of a run. A rerun reads it and skips what is there; a line cut
short by a crash is dropped (it was not a finished result) before appending again.
A header file next to it (eval.json) pins the settings, so a rerun with other
settings cannot mix its results into the same file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lookahead_reasoning.files import write_atomically
from lookahead_reasoning.runtime.errors import LookaheadError


class EvalRecord(BaseModel):
    problem_id: str
    method: str
    sample: int
    correct: bool | None  # None: nothing to grade against
    score: float | None = None  # a judge's 1-10 (MT-Bench)
    extracted: str | None = None
    reference: str | None = None
    grade_detail: str = ""
    wall_s: float
    prompt_tokens: int
    output_tokens: int
    finish: str
    rounds: int = 0
    draft_steps_judged: int = 0
    draft_steps_accepted: int = 0
    degraded: list[str] = []
    text: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.problem_id, self.method, self.sample)


class ResultStore:
    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[tuple[str, str, int], EvalRecord]:
        """The finished records; a torn last line (no newline) is cut off the file."""
        if not self.path.exists():
            return {}
        raw = self.path.read_bytes()
        if raw and not raw.endswith(b"\n"):
            keep = raw.rfind(b"\n") + 1
            with self.path.open("r+b") as f:
                f.truncate(keep)
            raw = raw[:keep]
        records: dict[tuple[str, str, int], EvalRecord] = {}
        for number, line in enumerate(raw.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = EvalRecord.model_validate_json(line)
            except ValidationError as error:
                raise LookaheadError(
                    f"{self.path}:{number}: not an eval result ({error.errors()[0]['msg']}); "
                    "move the file away or use another --out"
                ) from None
            records[record.key] = record
        return records

    def append(self, record: EvalRecord) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(record.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())


def pin_settings(path: Path, settings: dict) -> None:
    """Write the run's settings, or check that a resumed run uses the same ones."""
    if path.exists():
        try:
            before = json.loads(path.read_text())
        except json.JSONDecodeError:
            raise LookaheadError(f"{path} is not valid JSON; move it away or use another --out") from None
        changed = sorted(k for k in settings if k != "methods" and before.get(k) != settings[k])
        if changed:
            raise LookaheadError(
                f"{path.parent} holds results made with other settings ({', '.join(changed)} differ); "
                "use another --out to start afresh"
            )
        settings = {**settings, "methods": list(dict.fromkeys(before.get("methods", []) + settings["methods"]))}
    write_atomically(path, json.dumps(settings, indent=2))
