"""Eval results on disk: one JSON line per (problem, method, sample), appended as each finishes.

The file is the state of a run. A rerun reads it and skips what is there; a last line cut
short by a crash is cut off (it was not a finished result) before appending again, and a
bad line or a torn record before it is skipped with a warning (its result is run again), while
every whole record is read, also one appended on the same line after a torn one. A header file
next to it (eval.json) pins the settings and the served models, so a rerun with other
settings or against other models cannot mix its results into the same file. Results with no
eval.json beside them, or with one that names no models, are refused: nothing says which
models made them. `--force-reuse` (`adopt_results`) adopts them as this run's all the same.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from pydantic import BaseModel, ValidationError

from lookahead_reasoning.files import write_atomically
from lookahead_reasoning.errors import LookaheadError, validation_message

log = logging.getLogger(__name__)

# where a JSON object with keys can begin: inside a JSON string a quote is escaped, so `{"` there is never
# followed by a key, and a record has no nested objects; a torn record's line holds these only where pieces start
OBJECT_START = re.compile(rb'\{\s*"')


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

        Every whole record is read, also one that follows a torn record on the same line (a crash
        cut that one short and a resumed run appended after it). A bad line or a torn piece of a
        line is skipped with a logged warning naming its file:line; a file in which no line holds a
        record is refused. A last line without its newline is kept when it is a whole record; when
        it ends in a torn record (a crash while writing it: not a finished result), that record is
        cut off the file, with a warning, so that its result is run again.
        """
        if not self.path.exists():
            return {}
        raw = self.path.read_bytes()
        *lines, tail = raw.split(b"\n")  # lines end with "\n" (JSON escapes it in strings); tail does not
        records: dict[tuple[str, str, int], EvalRecord] = {}
        skipped: list[tuple[int, str]] = []
        cut: tuple[int, str] | None = None  # bytes to cut off the end of the file, and why
        for number, line in enumerate([*lines, tail], 1):
            if not line.strip():
                continue
            found, torn = _read(line)
            records.update((r.key, r) for r in found)
            # a last line that ends in what began as a record was being written when the run stopped; other
            # bad bytes there were not written by a run and stay, skipped like any bad line
            if number > len(lines) and torn and torn[-1][1] == len(line) and line[torn[-1][0]:].startswith(b"{"):
                start, end, problem = torn.pop()  # the record being written when the run stopped
                why = f"{_where(start, end, line, problem)}, a record cut short; cut off, its result runs again"
                cut = (end - start, f"{self.path}:{number}: {why}")
            skipped += [(number, _where(start, end, line, problem)) for start, end, problem in torn]
        if skipped and not records:
            number, problem = skipped[0]
            raise LookaheadError(f"{self.path}:{number}: {problem}; move the file away or use another --out")
        for number, problem in skipped:
            log.warning("%s:%d: %s; skipped", self.path, number, problem)
        if cut:
            log.warning("%s", cut[1])
            with self.path.open("r+b") as f:
                f.truncate(len(raw) - cut[0])
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


def _read(line: bytes) -> tuple[list[EvalRecord], list[tuple[int, int, str]]]:
    """The whole records on a line, and its pieces that are none: (start, end, what is wrong).

    A line is one record but for a crash: then it is a torn record's piece, perhaps followed by a
    whole record appended after it. Pieces begin where an object can begin (`OBJECT_START`); from
    each, the shortest run of pieces that reads as a record is taken.
    """
    parsed = _parse(line)
    if isinstance(parsed, EvalRecord):
        return [parsed], []
    bounds = sorted({0, *(m.start() for m in OBJECT_START.finditer(line)), len(line)})
    records: list[EvalRecord] = []
    torn: list[tuple[int, int, str]] = []
    bad_from: int | None = None  # where the bad piece being passed over began
    i = 0
    while i < len(bounds) - 1:
        for j in range(i + 1, len(bounds)):
            record = _parse(line[bounds[i]:bounds[j]])
            if isinstance(record, EvalRecord):
                break
        else:
            bad_from = bounds[i] if bad_from is None else bad_from
            i += 1
            continue
        if bad_from is not None:
            torn.append((bad_from, bounds[i], _parse(line[bad_from:bounds[i]])))
            bad_from = None
        records.append(record)
        i = j
    if bad_from is not None:
        torn.append((bad_from, len(line), parsed if bad_from == 0 else _parse(line[bad_from:])))
    return records, torn


def _where(start: int, end: int, line: bytes, problem: str) -> str:
    """What is wrong with line[start:end], naming its columns unless it is the whole line."""
    return problem if (start, end) == (0, len(line)) else f"columns {start + 1}-{end}: {problem}"


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


ADOPT = "give --force-reuse to add this run's results to them"  # how a refused reuse can go ahead all the same


def refuse_unpinned(results: Path, pin: Path) -> None:
    """A one-line LookaheadError when `results` holds anything and `pin` does not exist.

    A run writes its pin before its first result, so such results came from elsewhere (copied in,
    or eval.json deleted); the records do not name the models or settings that made them, so they
    cannot be checked against this run's and are not adopted (`adopt_results` adopts them).
    """
    if not pin.exists() and _has_results(results):
        raise LookaheadError(
            f"{results} has results but no {pin.name} beside it, so the models and settings that made them "
            f"are unknown; move it away, use another --out, or {ADOPT}"
        )


def _has_results(results: Path) -> bool:
    if not results.exists():
        return False
    with results.open("rb") as f:
        while chunk := f.read(1 << 16):
            if chunk.strip():
                return True
    return False


def pin_settings(path: Path, settings: dict, force_reuse: bool = False) -> None:
    """Write the run's settings, or check that a resumed run uses the same ones.

    `settings["models"]` (role -> the model its server serves, see eval/served.py) is checked
    role by role; a pin that names other models, or none (written before models were pinned),
    is refused, unless `force_reuse`: then it names the models given now. A caller that gives
    no models keeps the pinned ones.
    """
    if path.exists():
        before = read_pin(path)
        then, now = before.get("models"), settings.get("models")
        if now is not None and then != now:
            if then is None:
                problem = f"{path} names no models, so the models that made the results in {path.parent} are unknown"
            else:
                roles = [r for r in dict.fromkeys([*now, *then]) if then.get(r) != now.get(r)]
                differ = ", ".join(f"{r}: {then.get(r) or 'none'} then, {now.get(r) or 'none'} now" for r in roles)
                problem = f"{path.parent} holds results of other models ({differ})"
            if not force_reuse:
                raise LookaheadError(f"{problem}; use another --out to start afresh, or {ADOPT}")
            log.warning("%s; --force-reuse: this run's results join them, and %s names this run's models",
                        problem, path.name)
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


def adopt_results(out: Path, settings: dict) -> None:
    """`--force-reuse`: let a run go on from the results in `out` although eval.json is missing or does not
    name the run's models: it then names them. Other settings must still match (`pin_settings`)."""
    results, pin = out / "results.jsonl", out / "eval.json"
    if not pin.exists() and _has_results(results):
        log.warning("%s has results but no %s beside it; --force-reuse: they count as results of this run's "
                    "models and settings", results, pin.name)
    pin_settings(pin, {**settings, "methods": []}, force_reuse=True)
