"""Reading the final answer out of a reasoning text."""

from __future__ import annotations


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (braces balanced), or None."""
    start = text.rfind("\\boxed")
    while start != -1:
        i = start + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : j].strip()
                j += 1
        start = text.rfind("\\boxed", 0, start)
    return None
