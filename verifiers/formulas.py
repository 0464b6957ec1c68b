"""What a step states in formulas: its equations, maps and standalone expressions, and its result.

A step is read into statements: chains `A = B = C` (plain `x = 2 + 3`, `(-4 - 2)^2 = 36`, or LaTeX in
`$..$`, `\\(..\\)`, `\\[..\\]`, `$$..$$` and align environments), maps `(x, y) \\to (-y, x)`, and standalone
expressions (every LaTeX one; in plain text those after "is", "becomes", "gives" and the like). Each part
is evaluated by expressions.py. From them a step states:
- quantities: what each left-hand side is given (a letter, an expression, a name in `\\text{}`);
- values: every value it states, the numbers in its text included;
- its result: the last part of its last chain, or where it has no chain its last standalone expression;
- its equation: where its last chain sets an expression in letters equal to a constant (`(5-a)^2 = 9`, or
  `9 = (5-a)^2`), that expression and the constant; and every (expression in letters, constant) pair any
  of its chains states.
Formulas cut by the step's start or end, and code blocks, state nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from lookahead_reasoning.verifiers.expressions import MAX_PART_CHARS, SAMPLE_POINTS, Unreadable, Value, evaluate
from lookahead_reasoning.verifiers.latex import _GREEK, Foreign, latex_to_plain, sympy_value
from lookahead_reasoning.verifiers.numbers import numbers_in

MAX_STEP_CHARS = 8000  # the rest of a longer step is not read
MAX_STATEMENTS = 64  # per step
MAX_PARTS = 256  # per step: the parts of its chains, read in order
MAX_SYMPY_PARTS = 2  # parts per step handed to latex2sympy (milliseconds each)


@dataclass
class Stated:
    """What one step states: each named quantity's values, every value, and its result."""

    quantities: dict[tuple, list[Value]] = field(default_factory=dict)
    values: list[Value] = field(default_factory=list)
    result: Value | None = None
    equation: tuple[Value, Value] | None = None  # the last chain's (expression in letters, constant)
    equations: list[tuple[Value, Value]] = field(default_factory=list)  # every chain's such pairs
    formulas: int = 0  # formulas written, read or not
    numbers: int = 0  # numbers written, in formulas or in words


_CODE = re.compile(r"```.*?(?:```|$)", re.S)
_LIST_MARK = re.compile(r"(?m)^[ \t]*(?:\d+[.)]|[-*•]|#+)[ \t]+")
_LATEX = re.compile(
    r"\$\$(?P<a>.+?)\$\$|\\\[(?P<b>.+?)\\\]|\\\((?P<c>.+?)\\\)"
    r"|\\begin\{(?P<env>equation|align|aligned|gather|eqnarray|multline)\*?\}(?P<d>.+?)\\end\{(?P=env)\*?\}"
    r"|(?<![\\$])\$(?=[^\s$])(?P<e>[^$\n]*?[^\s\\$])\$(?!\d)", re.S)
_OPENERS = re.compile(r"\\\[|\\\(|\\begin\{|\$\$")
_CLOSERS = re.compile(r"\\\]|\\\)|\\end\{[a-z]*\*?\}")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?")
_SEPARATORS = re.compile(
    r"\\\\(?:\[[^\]]*\])?|;|\\(?:Rightarrow|Longrightarrow|implies|iff|Leftrightarrow|therefore|because)"
    r"|\\(?:text|mathrm|textrm)\{\s*(?:and|or|so|thus|then|hence|where|since|because|if|which|for|with|when|"
    r"i\.e\.|gives)\b[^{}]*\}|\\q?quad")
_RELATIONS = re.compile(r"\\(?:neq?|leq?|geq?|lt|gt|leqslant|geqslant|in|notin|subset|subseteq|equiv|pmod|"
                        r"cong|sim|propto|perp|parallel)(?![A-Za-z])|[<>≤≥≠]")
_APPROX = re.compile(r"\\approx|≈|\\simeq")
_ARROW = re.compile(r"\\(?:to|mapsto|rightarrow|longrightarrow|longmapsto)(?![A-Za-z])|→|↦|->")
_IMAGINARY = re.compile(r"complex|imaginary|\bi\s*\^\s*\{?2|\d\s*i\b")


def imaginary_unit(text: str) -> bool:
    """Whether `i` is read as the imaginary unit: the text speaks of complex numbers or writes 2i or i^2."""
    return bool(_IMAGINARY.search(text))


@dataclass
class _Statement:
    parts: list[str]  # as written: LaTeX, or plain text in the syntax expressions.py reads
    kind: str  # "chain", "map" or "value"
    cued: bool  # a standalone value that states a result (LaTeX, or after "is", "gives", ... in text)


def _split_top(text: str, separator: str) -> list[str]:
    pieces, depth, start = [], 0, 0
    for j, c in enumerate(text):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == separator and depth == 0:
            pieces.append(text[start:j])
            start = j + 1
    pieces.append(text[start:])
    return pieces


_SPACING = re.compile(r"\\[,;:! ]|\{,\}")  # thin spaces (their commas separate nothing), 1{,}000


_FULL_STOP = re.compile(r"\.\s*$")  # the sentence's full stop: \[9(a - b) = 27.\]


def _latex_statements(latex: str) -> list[_Statement]:
    latex = _SPACING.sub(lambda m: "" if m.group() == "{,}" else " ", _DEGREES.sub("°", latex))
    rows: list[str] = []
    for row in _SEPARATORS.split(latex):
        row = row.replace("&", " ")
        if rows and row.lstrip().startswith("=") and "=" in rows[-1]:
            rows[-1] += row  # an aligned chain goes on: A &= B \\ &= C
        elif row.strip():
            rows.append(row)
    statements = []
    for row in rows:
        pieces: list[str] = []
        for piece in _split_top(row, ","):
            if pieces and not ("=" in piece and "=" in pieces[-1]):
                pieces[-1] += "," + piece  # commas inside a value; x = 1, y = 2 are two statements
            else:
                pieces.append(piece)
        for piece in pieces:
            statement = _statement(_FULL_STOP.sub("", piece), cued=True)
            if statement:
                statements.append(statement)
    return statements


def _statement(text: str, cued: bool) -> _Statement | None:
    if _RELATIONS.search(text):
        return None
    text = _APPROX.split(text)[0]
    if "=" in text:
        return _Statement(text.split("="), "chain", cued)
    arrows = _ARROW.split(text)
    if len(arrows) == 2:
        return _Statement(arrows, "map", cued)
    if len(arrows) > 2 or not text.strip():
        return None
    return _Statement([text], "value", cued)


_PLAIN_TOKEN = re.compile(r"""
    (?P<num>\d+(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?)
  | (?P<word>[A-Za-z]+(?:_(?:\{[^{}\s]*\}|[A-Za-z0-9]))?)
  | (?P<op>\*\*|->|[-+*/^=×÷·−√²³%°→↦])
  | (?P<open>\() | (?P<close>\)) | (?P<comma>,) | (?P<space>[ \t]+) | (?P<currency>\$(?=\d))
  | (?P<other>.)""", re.X | re.S)
_PLAIN_WORDS = {"sqrt", "sin", "cos", "tan", "ln", "log", "exp", "pi"}
_CUES = re.compile(r"(?<![A-Za-z])(?:is|are|was|were|be|becomes?|gives?|gets?|got|obtains?|yields?|equals?|remains?)"
                   r"\s*:?\s*$", re.I)
_LIST_GOES_ON = re.compile(r"\s*(?:(?:and|or)\s+)?[-+]?\d[^=,;:\n]*(?:[,;:\n]|\.(?!\d)|$)")
_PLAIN_TIMES = re.compile(r"(?<=\d)\s+[x×]\s+(?=\d)")
_PLAIN_SYMBOLS = str.maketrans({"×": "*", "÷": "/", "·": "*", "−": "-", "→": "->", "↦": "->"})


def _plain_statements(text: str) -> list[_Statement]:
    """The formulas in text outside LaTeX: runs of numbers, single letters, operators and brackets."""
    text = _PLAIN_TIMES.sub(" * ", text)
    statements, run, depth, start = [], [], 0, 0

    def close():
        nonlocal run
        formula = "".join(run).strip()
        run = []
        cued = bool(_CUES.search(text, max(0, start - 24), start)) and not re.fullmatch(r"[A-Za-z]", formula)
        if not formula or not (re.search(r"[\d=]|->", formula) or (cued and re.search(r"[-+*/^()]", formula))):
            return
        statement = _statement(formula.translate(_PLAIN_SYMBOLS).replace("->", "\\to "), cued)
        if statement:  # an uncued value is a number in passing: stated, never the step's result
            statements.append(statement)

    for match in _PLAIN_TOKEN.finditer(text):
        kind, token = match.lastgroup, match.group()
        if kind == "word":
            if token.lower() == "equals":
                kind, token = "op", "="
            elif len(token.split("_")[0]) > 1 and token not in _PLAIN_WORDS:
                close()
                continue
        if kind == "comma" and depth <= 0:
            if "=" in run and _LIST_GOES_ON.match(text, match.end()):
                run.append(token)  # x = 2, 3: a list, which states no one value
                continue
            close()
            continue
        if kind in ("other", "currency"):
            if kind == "other":
                close()
            continue
        if not run:
            if kind == "space":
                continue
            start = match.start()
        depth += {"open": 1, "close": -1}.get(kind, 0)
        run.append(token)
    close()
    return statements


def _segments(step: str) -> list[tuple[str, str]]:
    """("latex" | "plain", text) in order; a formula the step's start or end cuts is left out."""
    segments, position = [], 0
    for match in _LATEX.finditer(step):
        segments.append(("plain", step[position:match.start()]))
        segments.append(("latex", next(match.group(g) for g in "abcde" if match.group(g) is not None)))
        position = match.end()
    segments.append(("plain", step[position:]))
    kept = []
    for kind, text in segments:
        if kind == "plain":
            closer = None
            for closer in _CLOSERS.finditer(text):
                pass
            if closer:  # the end of a formula the step before began
                text = text[closer.end():]
            opener = _OPENERS.search(text)
            if opener:  # the start of a formula the next step ends
                text = text[:opener.start()]
        kept.append((kind, text))
    return kept


@lru_cache(maxsize=512)
def read_step(step: str, imaginary_i: bool = False) -> Stated:
    """What `step` states (shared: do not change it); nothing where it states no formula."""
    text = _CODE.sub(" ", step[:MAX_STEP_CHARS])
    if text and not text[-1].isspace() and not text.endswith((".", "!", "?", "\\]", "\\)", "$")):
        text = text[:text.rfind("\n") + 1]  # cut at the step's token cap: its last line may be unfinished
    text = _LIST_MARK.sub("", text.replace("**", ""))
    statements: list[_Statement] = []
    for kind, segment in _segments(text):
        statements += _latex_statements(segment) if kind == "latex" else _plain_statements(segment)
    stated, reader = Stated(formulas=len(statements)), _PartReader(imaginary_i)
    chain_result = standalone_result = None
    for statement in statements[:MAX_STATEMENTS]:
        read = [reader.read(part) for part in statement.parts]
        values = [value for value, _ in read]
        stated.values += [v for v in values if v is not None]
        if statement.kind == "value":
            if statement.cued and values[0] is not None:
                standalone_result = values[0]
            continue
        left, name = read[0]
        key = name or (left.key() if left is not None and left.symbols else None)
        if key is not None:
            stated.quantities.setdefault((statement.kind,) + key, []).extend(v for v in values[1:] if v is not None)
        if values[-1] is not None:
            chain_result = values[-1]
        if statement.kind == "chain":
            stated.equations += [(e, c) for e in values if e is not None and e.symbols
                                 for c in values if c is not None and not c.symbols]
            stated.equation = _equation(values)
    stated.result = chain_result if chain_result is not None else standalone_result
    numbers = numbers_in(text)
    stated.values += [Value(((complex(n),) * SAMPLE_POINTS,)) for n in numbers]
    stated.numbers = len(numbers)
    return stated


def _equation(values: list[Value | None]) -> tuple[Value, Value] | None:
    """(expression in letters, constant) where a chain's first part is one and its last the other."""
    first, last = values[0], values[-1]
    if first is None or last is None or len(values) < 2:
        return None
    if first.symbols and not last.symbols:
        return first, last
    if last.symbols and not first.symbols:
        return last, first
    return None


def gives_a_value(text: str, symbol: str) -> bool:
    """Whether `text` writes `symbol = ...` with the letter alone on the left (`a = 13`, `\\(x_{1} = 2\\)`,
    `y &= ...`, `\\(a\\) is 13`): a value the text may give it, which a step may substitute for it.
    `a + b = 13` gives none."""
    base, _, subscript = symbol.partition("_")
    if len(base) != 1:  # a name latex2sympy made (\overline{AB}): taken as given
        return True
    names = [re.escape(base)] + [re.escape("\\" + name) + "(?![A-Za-z])" for name, letter in _GREEK.items()
                                 if letter == base]
    pattern = "(?:" + "|".join(names) + ")"
    if subscript:
        pattern += r"\s*_\s*(?:\{\s*" + re.escape(subscript) + r"\s*\}|" + re.escape(subscript) + ")"
    closer = r"(?:\s*(?:\\\)|\$))?"  # \(a\) is 13
    for match in re.finditer(r"(?<![\w\\])" + pattern + r"(?![\w{_])" + closer
                             + r"\s*(?:&?\s*=(?!=)|(?:is|was|equals)\b)", text):
        before = text[:match.start()].rstrip()
        if not before.endswith(("+", "-", "*", "/", "^", "·", "×", "÷", "−", "\\cdot", "\\times")):
            return True
    return False


_TEXT_ONLY = re.compile(r"\s*(?:«[^«»]*»\s*)+")


class _PartReader:
    """Reads the parts of one step: each part's value, or the name a part in words gives a quantity."""

    def __init__(self, imaginary_i: bool):
        self.imaginary_i = imaginary_i
        self.sympy_parts = MAX_SYMPY_PARTS
        self.parts = MAX_PARTS

    def read(self, part: str) -> tuple[Value | None, tuple | None]:
        self.parts -= 1
        if self.parts < 0 or len(part) > MAX_PART_CHARS:
            return None, None
        try:
            plain = latex_to_plain(part)
        except Foreign:
            if self.sympy_parts <= 0:
                return None, None
            self.sympy_parts -= 1
            return sympy_value(part.strip(), self.imaginary_i), None
        except Unreadable:
            return None, None
        if _TEXT_ONLY.fullmatch(plain):  # \text{Perimeter of the hexagon}
            return None, ("text", " ".join(" ".join(re.findall(r"«([^«»]*)»", plain)).lower().split()))
        try:
            return evaluate(plain, self.imaginary_i), None
        except (Unreadable, RecursionError):
            return None, None
