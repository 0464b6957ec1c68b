"""What the client sees of the model's text: cut at a stop string, and split into reasoning and content.

`StopText` follows a run's kept text as it grows. The text ends before the first occurrence
of any stop string (the stop string itself is dropped, as OpenAI does): the first to be
complete as the text grows, as when a server stops generating there (of two that end at the
same place, the longer). What it releases for streaming never reaches past one: it holds
back a tail as long as the longest stop string minus one until the text is final.

`ThinkSplit` separates a think section (`<think>...</think>`) from the answer with SGLang's
own reasoning parser (`sglang.srt.parser.reasoning_parser.ReasoningParser`, the class
SGLang's server uses for `--reasoning-parser`; it imports without a GPU). Names are SGLang's:
`deepseek-r1` (reasoning until `</think>`, with or without the opening tag), `qwen3`
(reasoning only inside `<think>...</think>`), `qwen3-thinking`, and the others SGLang knows.
"""

from __future__ import annotations

from lookahead_reasoning.errors import LookaheadError


class StopText:
    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.hold = max(map(len, self.stops), default=1) - 1
        self.text = ""  # the text so far, cut before the stop string once one is seen
        self.hit = False  # a stop string was seen: the text is final
        self._sent = 0  # characters of `text` already released

    def feed(self, piece: str) -> str:
        """Add `piece` to the text; return what can now be released (never past a stop string)."""
        if self.hit or not piece:
            return ""
        start = max(0, len(self.text) - self.hold)  # a new match ends in `piece`: it starts no earlier
        self.text += piece
        # (end, start) of each stop string's first match: generation stops where the first match is complete
        found = [(i + len(s), i) for s in self.stops if (i := self.text.find(s, start)) >= 0]
        if found:
            self.text = self.text[:min(found)[1]]
            self.hit = True
            return self._release(len(self.text))
        return self._release(max(self._sent, len(self.text) - self.hold))

    def flush(self) -> str:
        """The held-back tail, once no more text comes."""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        out = self.text[self._sent:upto]
        self._sent = max(self._sent, upto)
        return out


def check_reasoning_parser(name: str) -> None:
    """LookaheadError unless SGLang knows a reasoning parser of this name that builds without a request."""
    try:
        _parser(name, stream=False)
    except ImportError as error:
        raise LookaheadError(f"--reasoning-parser needs SGLang's reasoning parser: {error}") from None
    except Exception as error:  # noqa: BLE001 - SGLang raises ValueError for unknown names, others for odd ones
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        known = ", ".join(sorted(ReasoningParser.DetectorMap))
        raise LookaheadError(f"reasoning parser {name!r} is not usable here ({error}); SGLang knows: {known}") from None


def split_reasoning(name: str, text: str) -> tuple[str | None, str]:
    """(reasoning_content, content) of a whole answer, as SGLang's server splits it: None when no reasoning."""
    reasoning, content = _parser(name, stream=False).parse_non_stream(text)
    return reasoning or None, content or ""


class ThinkSplit:
    """The streaming split: feed text pieces, get (reasoning, content) deltas; `end()` flushes."""

    def __init__(self, name: str):
        self._parser = _parser(name, stream=True)

    def feed(self, piece: str) -> tuple[str, str]:
        reasoning, content = self._parser.parse_stream_chunk(piece)
        return reasoning or "", content or ""

    def end(self) -> tuple[str, str]:
        reasoning, content = self._parser.parse_stream_end()
        return reasoning or "", content or ""


def _parser(name: str, stream: bool):
    from sglang.srt.parser.reasoning_parser import ReasoningParser  # about 2 s on first use: only when asked for

    return ReasoningParser(model_type=name, stream_reasoning=stream)
