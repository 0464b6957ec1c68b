"""A scripted stand-in for the SGLang programs, for unit tests of the round logic.

Tokens are words. A model's script is a list of steps; the step after a text is the
script step at the text's number of delimiters, minus whatever of it the text already
ends with (so a length-capped step continues where it stopped). The last script step
ends on EOS, the others on the delimiter.
"""

from __future__ import annotations

from lookahead_reasoning.programs.step_types import StepOutput
from lookahead_reasoning.verifiers.base import Verdict

DELIM = "\n\n"
PROMPT = "<prompt>"


class ScriptedModel:
    def __init__(self, script: list[str]):
        self.script = script

    def next_step(self, text: str, cap: int) -> StepOutput:
        index = text.count(DELIM)
        if index >= len(self.script):
            return StepOutput("", "eos")
        full = self.script[index]
        tail = text.rsplit(DELIM, 1)[-1] if DELIM in text else text
        rest = full[len(tail):] if tail and full.startswith(tail) else full
        words = rest.split(" ")
        last = index == len(self.script) - 1
        if len(words) > cap:
            return StepOutput(" ".join(words[:cap]) + " ", "length", completion_tokens=cap)
        return StepOutput(rest if last else rest + DELIM, "eos" if last else "delimiter", completion_tokens=len(words))


class ScriptedModels:
    """Implements the engine's StepModels protocol over two scripts."""

    def __init__(self, target: list[str], draft: list[str] | None = None, fail: set[str] = frozenset()):
        self.target_model = ScriptedModel(target)
        self.draft_model = ScriptedModel(draft if draft is not None else target)
        self.fail = set(fail)
        self.calls: dict[str, int] = {"draft": 0, "target": 0, "generate": 0}
        self.branch_rids: list[str] = []  # request ids of the branches sent one by one
        self.aborted: list[str] = []
        self.commits: list[str] = []  # prefixes committed before a streamed first round

    def _check(self, role: str) -> None:
        if role in self.fail:
            from lookahead_reasoning.programs.backend import BackendError

            raise BackendError(f"cannot reach the SGLang server for {role}")

    def prompt(self, question: str) -> str:
        self._check("target")
        return PROMPT

    def draft(self, prefix: str, gamma: int, max_step_tokens: int | None = None) -> list[StepOutput]:
        self.calls["draft"] += 1
        self._check("draft")
        text, steps = prefix[len(PROMPT):], []
        for _ in range(gamma):
            step = self.draft_model.next_step(text, max_step_tokens or 100)
            steps.append(step)
            if not step.complete:
                break
            text += step.text
        return steps

    def sample(self, prefixes: list[str], width: int, max_step_tokens: int | None = None) -> list[list[StepOutput]]:
        """Candidate i is the draft script's step with " v{i}" appended (i = 0 is the plain draft step)."""
        self.calls["draft"] += 1
        self._check("draft")
        out = []
        for prefix in prefixes:
            base = self.draft_model.next_step(prefix[len(PROMPT):], max_step_tokens or 100)
            variants = [base]
            for i in range(1, width):
                text = base.text[: -len(DELIM)] if base.complete else base.text
                variants.append(StepOutput(f"{text} v{i}" + (DELIM if base.complete else ""), base.ending,
                                           completion_tokens=base.completion_tokens + 1))
            out.append(variants)
        return out

    def target(
        self, prefix: str, continuations: list[str], max_step_tokens: int | list[int] | None = None,
        commit_prefix: bool = True,
    ) -> list[StepOutput]:
        self.calls["target"] += 1
        self._check("target")
        text = prefix[len(PROMPT):]
        caps = max_step_tokens if isinstance(max_step_tokens, list) else [max_step_tokens or 100] * len(continuations)
        return [self.target_model.next_step(text + c, cap) for c, cap in zip(continuations, caps)]

    def target_branch(self, prefix: str, continuation: str, max_step_tokens: int, rid: str,
                      on_progress=None) -> StepOutput:
        """One branch as its own request (streamed rounds), written at once: no chunk before the step."""
        self.branch_rids.append(rid)
        [step] = self.target(prefix, [continuation], max_step_tokens, commit_prefix=False)
        return step

    def commit_target(self, prefix: str) -> None:
        self._check("target")
        self.commits.append(prefix)

    def abort_target(self, rid: str) -> bool:
        self.aborted.append(rid)
        return True

    def generate(self, prefix: str, max_tokens: int) -> StepOutput:
        self.calls["generate"] += 1
        self._check("target")
        written, text, produced = prefix[len(PROMPT):], "", 0
        while produced < max_tokens:
            step = self.target_model.next_step(written + text, max_tokens - produced)
            text += step.text
            produced += max(1, step.completion_tokens)
            if step.ending == "eos":
                return StepOutput(text, "eos", completion_tokens=produced)
        return StepOutput(text, "length", completion_tokens=produced)


class ScriptedJudge:
    """Accepts pairs whose draft step contains a word from `accept_words`; counts calls."""

    name = "scripted-judge"

    def __init__(self, accept_words: set[str] = frozenset(), fail: bool = False):
        self.accept_words = set(accept_words)
        self.fail = fail
        self.pairs_seen: list[tuple[str, str]] = []

    def verify(self, context, pairs):
        if self.fail:
            raise RuntimeError("judge server timed out")
        self.pairs_seen.extend(pairs)
        out = []
        for _, draft in pairs:
            ok = any(w in draft.split() for w in self.accept_words)
            out.append(Verdict(ok, 0.9 if ok else 0.1, "scripted", prompt_tokens=10, completion_tokens=1))
        return out
