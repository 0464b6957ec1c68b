"""Benchmarks as specs: where the data comes from, how a record becomes a problem, how it is graded.

A spec names a Hugging Face dataset (id, config, split) for online users, and the
local JSON Lines schema of `../shared/data/` (see its README) for offline ones. Both
load through `datasets`. Records are checked line by line first, so a malformed
file is reported with its path and line number instead of an Arrow traceback.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from lookahead_reasoning.programs.prompts import CHOICE_INSTRUCTION, CODE_INSTRUCTION, REASONING_INSTRUCTION
from lookahead_reasoning.errors import LookaheadError


class Problem(BaseModel):
    """One benchmark item, ready to ask: `message` is the whole user turn."""

    id: str
    message: str
    reference: str | None = None  # the answer to grade against (None: nothing to grade)
    grader: str  # math, number, choice, code, none, judge-score
    extra: dict = {}  # grader inputs: tests, entry point, reference answers


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    hf_id: str
    hf_config: str | None
    hf_split: str
    local_file: str  # the file name in ../shared/data/
    required: tuple[str, ...]  # fields a local record must have
    to_problem: Callable[[dict, int], Problem]
    note: str = ""  # said in reports (e.g. "no tests: speed and acceptance only")
    aliases: tuple[str, ...] = field(default=())


def _text(record: dict, *keys: str) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise KeyError(keys[0])


def _record_id(record: dict, prefix: str, index: int) -> str:
    for key in ("id", "task_id", "question_id", "unique_id"):
        if record.get(key) is not None:
            return str(record[key])
    return f"{prefix}-{index:04d}"


def _gsm8k(record: dict, index: int) -> Problem:
    answer = str(record["answer"])
    if "####" in answer:  # the hub's form: worked solution, then "#### N"
        answer = answer.rsplit("####", 1)[1].strip().replace(",", "")
    return Problem(
        id=_record_id(record, "gsm8k", index),
        message=f"{_text(record, 'question')}\n\n{REASONING_INSTRUCTION}",
        reference=answer,
        grader="number",
    )


def _math(prefix: str) -> Callable[[dict, int], Problem]:
    def convert(record: dict, index: int) -> Problem:
        return Problem(
            id=_record_id(record, prefix, index),
            message=f"{_text(record, 'question', 'problem')}\n\n{REASONING_INSTRUCTION}",
            reference=str(record["answer"]),
            grader="math",
        )

    return convert


LETTERS = "ABCD"


def _gpqa(record: dict, index: int) -> Problem:
    if "choices" in record:
        question, choices, answer = record["question"], list(record["choices"]), str(record["answer"]).strip()
    else:  # the hub's CSV columns; shuffled as the local copy was (random.Random(row).shuffle)
        question = record["Question"].strip()
        options = [record["Correct Answer"]] + [record[f"Incorrect Answer {i}"] for i in (1, 2, 3)]
        choices = [o.strip() for o in options]
        correct = choices[0]
        random.Random(index).shuffle(choices)
        answer = LETTERS[choices.index(correct)]
    if len(choices) != 4 or answer not in LETTERS:
        raise ValueError("GPQA needs 4 choices and an answer letter A-D")
    listed = "\n".join(f"{letter}) {choice}" for letter, choice in zip(LETTERS, choices))
    return Problem(
        id=_record_id(record, "gpqa", index),
        message=f"{question}\n\n{listed}\n\n{CHOICE_INSTRUCTION}",
        reference=answer,
        grader="choice",
    )


def _humaneval(record: dict, index: int) -> Problem:
    prompt = record["prompt"]
    return Problem(
        id=str(record["task_id"]),
        message=f"Complete the following Python function.\n\n```python\n{prompt}```\n\n{CODE_INSTRUCTION}",
        reference=None,
        grader="code",
        extra={"prompt": prompt, "test": record["test"], "entry_point": record["entry_point"]},
    )


def _livecodebench(record: dict, index: int) -> Problem:
    question = _text(record, "question", "question_content")
    starter = record.get("starter_code") or ""
    if starter.strip():
        body = f"{question}\n\nStart from this code:\n```python\n{starter}\n```"
    else:
        body = f"{question}\n\nRead the input from standard input and write the answer to standard output."
    return Problem(
        id=_record_id(record, "lcb", index), message=f"{body}\n\n{CODE_INSTRUCTION}", reference=None, grader="none"
    )


def _mt_bench(record: dict, index: int) -> Problem:
    turns = record.get("turns") or record.get("prompt")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
        raise KeyError("turns")
    reference = record.get("reference")
    return Problem(
        id=_record_id(record, "mt", index),
        message=turns[0],
        reference=reference[0] if isinstance(reference, list) and reference else None,
        grader="judge-score",
        extra={"category": record.get("category"), "question": turns[0]},
    )


SPECS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("gsm8k", "openai/gsm8k", "main", "test", "gsm8k_test.jsonl", ("question", "answer"), _gsm8k),
        DatasetSpec("math500", "HuggingFaceH4/MATH-500", None, "test", "math500.jsonl", ("answer",), _math("math500")),
        DatasetSpec("aime24", "HuggingFaceH4/aime_2024", None, "train", "aime24.jsonl", ("answer",), _math("aime24")),
        DatasetSpec("amc23", "math-ai/amc23", None, "test", "amc23.jsonl", ("answer",), _math("amc23")),
        DatasetSpec(
            "gpqa_diamond", "Idavidrein/gpqa", "gpqa_diamond", "train", "gpqa_diamond.jsonl",
            ("question", "choices", "answer"), _gpqa,
        ),
        DatasetSpec(
            "humaneval", "openai/openai_humaneval", None, "test", "humaneval.jsonl",
            ("task_id", "prompt", "test", "entry_point"), _humaneval,
        ),
        DatasetSpec(
            "livecodebench", "livecodebench/code_generation_lite", None, "test", "livecodebench_v5_subset.jsonl",
            ("question",), _livecodebench,
            note="the local LiveCodeBench copy has no tests: speed and acceptance only, no accuracy",
        ),
        DatasetSpec(
            "mt_bench", "HuggingFaceH4/mt_bench_prompts", None, "train", "mt_bench.jsonl", ("turns",), _mt_bench,
            note="MT-Bench: first turns only, scored 1-10 by the judge model (prompt in programs/prompts.py)",
        ),
    )
}


def dataset_spec(name: str) -> DatasetSpec:
    if name not in SPECS:
        raise LookaheadError(f"unknown dataset {name!r}; known: {', '.join(SPECS)}")
    return SPECS[name]


def read_jsonl(path: Path, required: tuple[str, ...], what: str = "data file") -> list[dict]:
    """The records of a JSON Lines file; a LookaheadError names the file and line of the first bad one."""
    if not path.is_file():
        raise LookaheadError(f"{what} {path} does not exist")
    records = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise LookaheadError(f"{path}:{number}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict):
                raise LookaheadError(f"{path}:{number}: a record must be a JSON object")
            missing = [key for key in required if record.get(key) in (None, "")]
            if missing:
                raise LookaheadError(f"{path}:{number}: record lacks the field(s) {', '.join(missing)}")
            records.append(record)
    if not records:
        raise LookaheadError(f"{what} {path} holds no records")
    return records


def _load_records(spec: DatasetSpec, data: Path | None) -> tuple[list[dict], str]:
    import datasets

    datasets.disable_progress_bars()
    if data is not None:
        read_jsonl(data, spec.required)  # clear errors first; then the datasets loader
        rows = datasets.load_dataset("json", data_files=str(data), split="train")
        return rows.to_list(), str(data)
    try:
        rows = datasets.load_dataset(spec.hf_id, spec.hf_config, split=spec.hf_split)
    except Exception as error:
        raise LookaheadError(
            f"could not load {spec.hf_id} from the Hugging Face hub ({type(error).__name__}); "
            f"offline, give --data PATH (e.g. ../shared/data/{spec.local_file})"
        ) from None
    return rows.to_list(), spec.hf_id


def problem_span(text: str) -> range:
    """FIRST-LAST (0-based, both included) or one index, as a range; a one-line error otherwise."""
    first, dash, last = text.partition("-")
    try:
        span = range(int(first), int(last if dash else first) + 1)
    except ValueError:
        raise LookaheadError(f"--problems takes FIRST-LAST (0-based, e.g. 200-249), got {text!r}") from None
    if span.start < 0 or not span:
        raise LookaheadError(f"--problems takes FIRST-LAST with 0 <= FIRST <= LAST, got {text!r}")
    return span


def load_problems(name: str, data: Path | None = None, limit: int | None = None,
                  span: range | None = None) -> list[Problem]:
    """The dataset's problems, those at the indices of `span` if given, then the first `limit`."""
    spec = dataset_spec(name)
    records, origin = _load_records(spec, data)
    indexed = list(enumerate(records))
    if span is not None:
        if span.start >= len(records):
            raise LookaheadError(f"{origin}: --problems starts at {span.start}, but there are {len(records)} problems")
        indexed = indexed[span.start:span.stop]
    if limit is not None:
        indexed = indexed[:limit]
    problems = []
    for index, record in indexed:
        try:
            problems.append(spec.to_problem(record, index))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise LookaheadError(f"{origin}: record {index + 1} does not fit {name}: {error}") from None
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise LookaheadError(f"{origin}: problem ids are not unique")
    return problems
