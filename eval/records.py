"""Eval results on disk: one JSON line per (problem, method, sample), appended as each finishes.

The file is the state of a run. A rerun reads it and skips what is there; a last line cut
short by a crash is dropped (it was not a finished result) before appending again, and a
bad line before it is skipped with a warning (its result is run again). A header file
next to it (eval.json) pins the settings and the served models, so a rerun with other
settings or against other models cannot mix its results into the same file. Results with no
eval.json beside them are refused: the records do not name the models that made them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lookahead_reasoning.files import write_atomically
from lookahead_reasoning.errors import LookaheadError, validation_message

log = logging.getLogger(__name__)


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

    @property
    def cut_at_cap(self) -> bool:
        """Whether the answer stopped at the token cap instead of ending on its own."""
        return self.finish == "max_tokens"


class ResultStore:
    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[tuple[str, str, int], EvalRecord]:
        """The finished records.

        A last line without its newline is kept when it is a whole record, and cut off the
        file when it is torn (a crash while writing it: not a finished result). A bad line
        before it (not UTF-8, not JSON, not a record) is skipped with a logged warning
        naming its file:line; a file in which no line is a record is refused.
        """
        if not self.path.exists():
            return {}
        raw = self.path.read_bytes()
        *lines, tail = raw.split(b"\n")  # lines end with "\n" (JSON escapes it in strings); tail does not
        records: dict[tuple[str, str, int], EvalRecord] = {}
        skipped: list[tuple[int, str]] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            parsed = _parse(line)
            if isinstance(parsed, EvalRecord):
                records[parsed.key] = parsed
            else:
                skipped.append((number, parsed))
        torn = False
        if tail.strip():
            parsed = _parse(tail)
            if isinstance(parsed, EvalRecord):
                records[parsed.key] = parsed  # whole, only its newline is missing; `append` adds it
            else:
                torn = True
        if skipped and not records:
            number, problem = skipped[0]
            raise LookaheadError(f"{self.path}:{number}: {problem}; move the file away or use another --out")
        for number, problem in skipped:
            log.warning("%s:%d: %s; skipped", self.path, number, problem)
        if torn:
            with self.path.open("r+b") as f:
                f.truncate(len(raw) - len(tail))
        return records

    def append(self, record: EvalRecord) -> None:
        """Add one record as one line, after a newline if the file's last line lacks one."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (record.model_dump_json() + "\n").encode("utf-8")
        with self.path.open("a+b") as f:
            if f.seek(0, os.SEEK_END) > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    line = b"\n" + line
            f.write(line)  # append mode: at the end, wherever the read left the position
            f.flush()
            os.fsync(f.fileno())


def _parse(line: bytes) -> EvalRecord | str:
    """A record, or what is wrong with the line."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not an eval result (not UTF-8: byte 0x{line[error.start]:02x} at column {error.start + 1})"
    try:
        return EvalRecord.model_validate_json(text)
    except ValidationError as error:
        return f"not an eval result ({validation_message(error)})"


def read_pin(path: Path) -> dict:
    """eval.json as written by `pin_settings`; a one-line LookaheadError when it is not that."""
    fix = "move it away or use another --out"
    try:
        pinned = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LookaheadError(f"{path} is not valid JSON; {fix}") from None
    except OSError as error:
        raise LookaheadError(f"cannot read {path}: {error.strerror or error}") from None
    if not isinstance(pinned, dict):
        raise LookaheadError(f"{path} is malformed (not a JSON object); {fix}")
    methods = pinned.get("methods", [])
    if not isinstance(methods, list) or not all(isinstance(m, str) for m in methods):
        raise LookaheadError(f"{path} is malformed (methods is not a list of names); {fix}")
    models = pinned.get("models")
    if models is not None and not (
        isinstance(models, dict) and all(isinstance(r, str) and isinstance(m, str) for r, m in models.items())
    ):
        raise LookaheadError(f"{path} is malformed (models is not an object of role: model names); {fix}")
    return pinned


def refuse_unpinned(results: Path, pin: Path) -> None:
    """A one-line LookaheadError when `results` holds anything and `pin` does not exist.

    A run writes its pin before its first result, so such results came from elsewhere (copied in,
    or eval.json deleted); the records do not name the models or settings that made them, so they
    cannot be checked against this run's and are not adopted.
    """
    if pin.exists() or not results.exists():
        return
    with results.open("rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                raise LookaheadError(
                    f"{results} has results but no {pin.name} beside it, so the models and settings that made them "
                    "are unknown; move it away or use another --out"
                )


def pin_settings(path: Path, settings: dict) -> None:
    """Write the run's settings, or check that a resumed run uses the same ones.

    `settings["models"]` (role -> the model its server serves, see eval/served.py) is
    checked role by role; a pin written without models takes the ones given now.
    """
    if path.exists():
        before = read_pin(path)
        then, now = before.get("models"), settings.get("models")
        if then is not None and now is not None and then != now:
            roles = [r for r in dict.fromkeys([*now, *then]) if then.get(r) != now.get(r)]
            differ = ", ".join(f"{r}: {then.get(r) or 'none'} then, {now.get(r) or 'none'} now" for r in roles)
            raise LookaheadError(
                f"{path.parent} holds results of other models ({differ}); use another --out to start afresh"
            )
        changed = sorted(k for k in settings if k not in ("methods", "models") and before.get(k) != settings[k])
        if changed:
            raise LookaheadError(
                f"{path.parent} holds results made with other settings ({', '.join(changed)} differ); "
                "use another --out to start afresh"
            )
        settings = {**settings, "methods": list(dict.fromkeys(before.get("methods", []) + settings["methods"]))}
        if now is None and then is not None:
            settings["models"] = then
    write_atomically(path, json.dumps(settings, indent=2))
