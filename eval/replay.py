"""The ceiling of each round rule on recorded answers: `lookahead bench replay`.

Recorded AR answers (an eval results.jsonl) give real step lengths; a server probe (`lookahead servers
probe --json`) gives the costs; runtime/adaptive/round_rules.py walks each answer through each rule's timeline.
It is a ceiling, not a forecast: the engine's efficiency on real servers is its measured speedup over this
figure at the measured α (`examples/side_by_side.py --probe`, `lookahead run --baseline --probe`).

Step lengths: an answer's text is cut at the delimiter and its output tokens shared out by the pieces'
length in characters (as `split_steps` does), each capped at the step cap. Costs from the probe: T, the
target's fitted seconds per token, and its fixed cost per request; B(n) at the probe's widths (linear
between and beyond); c per token; the judge's seconds per call; the two models' slowdowns side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.programs.step_types import StepOutput, split_steps
from lookahead_reasoning.runtime.adaptive.round_rules import RULES, RuleCosts, rule_of, speedup

__all__ = ["RULES", "RULE_TITLES", "Ceiling", "ceiling_of", "ceilings", "costs_from_probe", "load_answers",
           "load_costs", "rule_of", "step_lengths"]

RULE_TITLES = {
    "longest": "the round waits for its longest branch (sync, one batched fork)",
    "decision": "the round ends at its decision, the bonus branch goes on (sync, streamed)",
    "async": "drafting overlaps the target's streams (async pipeline)",
}


def costs_from_probe(probe: dict) -> RuleCosts:
    """From a `lookahead servers probe --json` file's object."""
    try:
        beside_t = probe.get("target_beside_draft") or 1.0
        beside_d = probe.get("draft_beside_target") or 1.0
        return RuleCosts(
            target_token_s=float(probe["target"]["per_token_s"]),
            request_s=max(0.0, float(probe["target"]["fixed_s"])),
            c=float(probe.get("c_per_token") or probe["c"]),
            judge_s=float(probe["judge_s"]),
            widths=tuple((int(w["width"]), float(w["b"])) for w in probe["fork"]),
            target_beside_draft=max(1.0, float(beside_t)),
            draft_beside_target=max(1.0, float(beside_d)),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise LookaheadError(f"the probe file does not hold a server probe ({error!r} missing or wrong)") from None


def load_costs(path: Path) -> RuleCosts:
    try:
        return costs_from_probe(json.loads(path.read_text()))
    except OSError as error:
        raise LookaheadError(f"{path}: {error.strerror}") from None
    except ValueError:
        raise LookaheadError(f"{path}: not JSON (write it with lookahead servers probe --json)") from None


def step_lengths(text: str, output_tokens: int, delimiter: str = "\n\n", cap: int = 100) -> list[int]:
    """An answer's steps in tokens: its output tokens shared out by the steps' length in characters, capped."""
    steps = split_steps(StepOutput(text, "eos", completion_tokens=max(1, output_tokens)), delimiter)
    return [max(1, min(cap, s.completion_tokens)) for s in steps if s.text]


def load_answers(path: Path, method: str = "ar", delimiter: str = "\n\n", cap: int = 100) -> list[list[int]]:
    """Step lengths of every `method` answer in an eval results.jsonl (lines that do not parse are skipped)."""
    if not path.is_file():
        raise LookaheadError(f"{path}: no such results file")
    answers = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("method") == method and record.get("text"):
            answers.append(step_lengths(record["text"], int(record.get("output_tokens") or 0), delimiter, cap))
    if not answers:
        raise LookaheadError(f"{path}: no {method!r} answers with text to replay")
    return answers


@dataclass(frozen=True)
class Ceiling:
    rule: str
    depth: int
    alpha: float
    speedup: float  # AR time over LR time, summed over the answers, median over the draws


def ceilings(answers: list[list[int]], costs: RuleCosts, rules=RULES, depths=(1, 2, 3), alphas=(0.63, 0.8, 1.0),
             draws: int = 20, seed: int = 0) -> list[Ceiling]:
    """AR time over LR time for every rule, γ and α: the answers' sums, the median over `draws` seeded draws."""
    return [Ceiling(rule, depth, alpha, speedup(answers, costs, rule, depth, alpha, draws, str(seed)))
            for rule in rules for depth in depths for alpha in alphas]


def ceiling_of(answers: list[list[int]], costs: RuleCosts, rule: str, depth: int, alpha: float, draws: int = 20) -> float:
    return speedup(answers, costs, rule, depth, alpha, draws, "0")
