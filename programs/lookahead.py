"""Lookahead reasoning as a part of a larger SGLang program.

`lookahead_turn(s, question, reasoner)` appends a user turn with the question and an
assistant turn holding the lookahead answer to the program state `s`. The reasoning
continues `s`'s whole transcript, so earlier turns are context. The result is stored
in the state: `s["reasoning"]` (the answer text) and `s["lookahead"]` (the full
result record with statistics).

`reasoner` is anything with `continue_from(prompt) -> result` whose result has a
`.text`: normally a `lookahead_reasoning.LookaheadReasoner`. Its target server should
serve the same model (and chat template) as the parent program's backend.

SGLang's frontend has no `s += sub_program(...)` for programs that run their own
requests, so inside a parent program call `lookahead_turn(s, ...)` directly; on its
own, run `lookahead.run(question=..., reasoner=..., backend=...)`.
"""

from __future__ import annotations

import sglang as sgl

from lookahead_reasoning.programs.prompts import question_message


def lookahead_turn(s, question, reasoner):
    s += sgl.user(question_message(question))
    s += sgl.assistant_begin()
    result = reasoner.continue_from(s.text())
    s += result.text
    s += sgl.assistant_end()
    s["reasoning"] = result.text
    s["lookahead"] = result


lookahead = sgl.function(lookahead_turn)
