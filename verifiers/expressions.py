"""The value of one formula part in plain syntax: `(-4 - 2)^2`, `6 * 3s`, `sqrt(117)`, `(-3, 2)`, `2i^2`.

A constant is evaluated to a complex number; an expression with letters at fixed sample points, two per
letter and the same in every step. Equal values then mean equal mathematics with near certainty:
1/2 equals 0.5, `(x+1)^2` equals `x^2+2x+1`, and `6s` differs from `18s`. It costs microseconds per part
and cannot hang: powers, factorials, nesting and lengths are bounded. What has no one value (sets, lists,
inequalities) raises Unreadable. latex.py brings LaTeX to this syntax.
"""

from __future__ import annotations

import cmath
import math
import re
import zlib
from dataclasses import dataclass

SAMPLE_POINTS = 2
MAX_PART_CHARS = 240  # a longer part of a chain states nothing
MAX_DEPTH = 40  # nesting of brackets and powers


class Unreadable(Exception):
    """A part that states nothing comparable."""


@dataclass(frozen=True)
class Value:
    """A stated value: one tuple of samples per component (a point (a, b) has two), the letters it uses,
    and the slack a decimal carries (0.333 stands for anything that rounds to it)."""

    samples: tuple[tuple[complex, ...], ...]
    symbols: frozenset[str] = frozenset()
    slack: float = 0.0

    def comparable(self, other: Value) -> bool:
        return self.symbols == other.symbols and len(self.samples) == len(other.samples)

    def equals(self, other: Value) -> bool:
        slack = max(self.slack, other.slack)
        return self.comparable(other) and all(
            abs(a - b) <= slack + 1e-9 * max(1.0, abs(a), abs(b))
            for mine, theirs in zip(self.samples, other.samples) for a, b in zip(mine, theirs))

    def key(self) -> tuple:
        """The value as a name: an expression on the left of `=` names a quantity by what it is."""
        rounded = tuple(tuple((round(z.real, 8), round(z.imag, 8)) for z in c) for c in self.samples)
        return ("expr", tuple(sorted(self.symbols)), rounded)


_FUNCTIONS = {
    "sqrt": cmath.sqrt, "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "ln": cmath.log,
    "log": cmath.log10, "exp": cmath.exp, "arcsin": cmath.asin, "arccos": cmath.acos, "arctan": cmath.atan,
    "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z), "cot": lambda z: 1 / cmath.tan(z),
    "abs": abs, "floor": lambda z: math.floor(_real(z)), "ceil": lambda z: math.ceil(_real(z)),
}
_TRIG = {"sin", "cos", "tan", "sec", "csc", "cot"}
_TOKEN = re.compile(r"""
    \s*(?:
    (?P<num>\d+(?:,\d{3})+(?![\d])(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)
  | (?P<text>«[^«»]*»)
  | (?P<func>(?:sqrt|arcsin|arccos|arctan|sin|cos|tan|sec|csc|cot|ln|log|exp|abs|floor|ceil|binom)(?![A-Za-z]))
  | (?P<pi>pi(?![A-Za-z])|π)
  | (?P<name>[A-Za-zα-ωΑ-Ω](?:_(?:\{[^{}]*\}|[A-Za-z0-9]))?)
  | (?P<op>\*\*|[-+*/^()|,!%°√²³])
    )""", re.X)


def _real(z: complex) -> float:
    if abs(z.imag) > 1e-9 * max(1.0, abs(z)):
        raise Unreadable("not a real number")
    return z.real


def point(name: str, k: int) -> complex:
    """The value of letter `name` at sample point k: fixed, so that every step reads the same numbers."""
    return complex(0.31 + (zlib.crc32(f"{name}/{k}".encode()) % 100003) / 100003 * 1.4)


def symbol_name(raw: str) -> str:
    return raw.replace("{", "").replace("}", "").replace(" ", "")


class _Parser:
    """Recursive descent over one part's tokens; every rule returns the samples of what it read."""

    def __init__(self, text: str, imaginary_i: bool):
        self.tokens: list[tuple[str, str]] = []
        position, text = 0, text.strip()
        while position < len(text):
            match = _TOKEN.match(text, position)
            if not match or match.end() == position:
                raise Unreadable(f"cannot read {text[position:position + 10]!r}")
            position = match.end()
            kind = match.lastgroup
            if kind != "text":
                self.tokens.append((kind, match.group(kind)))
            elif text[position:].lstrip().startswith("("):  # \text{lcm}(a, b): a function this cannot evaluate
                raise Unreadable(f"the function {match.group(kind)}")
            # other words in \text{} are units or names, not values
        self.position, self.depth, self.bars = 0, 0, 0
        self.imaginary_i = imaginary_i
        self.symbols: set[str] = set()
        self.trig = self.degrees = False

    def read(self) -> Value:
        if not self.tokens:
            raise Unreadable("empty")
        value = self.sum()
        if self.position != len(self.tokens):  # a top-level list among them: x = 2, 3 has no one value
            raise Unreadable(f"left over: {self.tokens[self.position:]}")
        if self.trig and self.degrees:
            raise Unreadable("degrees inside trigonometry")
        samples = value if isinstance(value[0], tuple) else (value,)
        for component in samples:
            for z in component:
                if not (math.isfinite(z.real) and math.isfinite(z.imag)):
                    raise Unreadable("not finite")
        return value_of(samples, self.symbols)

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self, op: str) -> bool:
        token = self._peek()
        if token and token[0] == "op" and token[1] == op:
            self.position += 1
            return True
        return False

    def _nest(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unreadable("too deep")

    def sum(self):
        value = self.term()
        while True:
            if self._take("+"):
                value = _lift(lambda a, b: a + b, value, self.term())
            elif self._take("-"):
                value = _lift(lambda a, b: a - b, value, self.term())
            else:
                return value

    def _starts_factor(self) -> bool:
        token = self._peek()
        if token is None:
            return False
        kind, text = token
        if kind == "op":
            return text in ("(", "√") or (text == "|" and self.bars == 0)
        return True

    def term(self):
        value = self.unary()
        while True:
            if self._take("*"):
                value = _lift(lambda a, b: a * b, value, self.unary())
            elif self._take("/"):
                value = _lift(lambda a, b: a / b, value, self.unary())
            elif self._starts_factor():  # 3s, 2(x + 1), bi
                value = _lift(lambda a, b: a * b, value, self.power())
            else:
                return value

    def unary(self):
        if self._take("-"):
            return _lift(lambda a: -a, self.unary())
        if self._take("+"):
            return self.unary()
        return self.power()

    def power(self):
        base = self.postfix()
        if self._take("^") or self._take("**"):
            self._nest()
            exponent = self.unary()
            self.depth -= 1
            return _lift(_pow, base, exponent)
        return base

    def postfix(self):
        value = self.primary()
        while True:
            if self._take("!"):
                value = _lift(_factorial, value)
            elif self._take("%"):
                value = _lift(lambda a: a / 100, value)
            elif self._take("²"):
                value = _lift(lambda a: a * a, value)
            elif self._take("³"):
                value = _lift(lambda a: a * a * a, value)
            elif self._take("°"):
                self.degrees = True
            else:
                return value

    def primary(self):
        token = self._peek()
        if token is None:
            raise Unreadable("missing operand")
        kind, text = token
        self.position += 1
        if kind == "num":
            return _constant(complex(float(text.replace(",", ""))))
        if kind == "pi":
            return _constant(complex(math.pi))
        if kind == "name":
            return self._name(text)
        if kind == "func":
            return self._function(text)
        if text == "(":
            self._nest()
            items = [self.sum()]
            while self._take(","):
                items.append(self.sum())
            if not self._take(")"):
                raise Unreadable("unclosed (")
            self.depth -= 1
            if len(items) == 1:
                return items[0]
            if any(isinstance(item[0], tuple) for item in items):
                raise Unreadable("nested tuple")
            return tuple(items)  # a point: a tuple of components
        if text == "|":
            self._nest()
            self.bars += 1
            inner = self.sum()
            self.bars -= 1
            if not self._take("|"):
                raise Unreadable("unclosed |")
            self.depth -= 1
            return _lift(abs, inner)
        if text == "√":
            return _lift(cmath.sqrt, self.power())
        raise Unreadable(f"unexpected {text!r}")

    def _name(self, text: str):
        if text == "i" and self.imaginary_i:
            return _constant(1j)
        if text == "e":
            return _constant(complex(math.e))
        name = symbol_name(text)
        self.symbols.add(name)
        return tuple(point(name, k) for k in range(SAMPLE_POINTS))

    def _function(self, name: str):
        self.trig |= name in _TRIG
        if name == "binom":
            arguments = self.primary()
            if not isinstance(arguments[0], tuple) or len(arguments) != 2:
                raise Unreadable("binom takes two arguments")
            return _lift(_binomial, *arguments)
        power = None
        if self._take("^") or self._take("**"):  # sin^2 x = (sin x)^2
            power = self.primary()
            if isinstance(power[0], tuple) or any(abs(p + 1) < 1e-12 for p in power):
                raise Unreadable("sin^-1 (an inverse or a reciprocal), or a tuple as a power")
        token = self._peek()
        if token == ("op", "("):
            argument = self.primary()
        else:  # \sin 2x: the factors that follow, up to the next operator or function
            argument = self.power()
            while self._starts_factor() and self._peek()[0] != "func":
                argument = _lift(lambda a, b: a * b, argument, self.power())
        value = _lift(_FUNCTIONS[name], argument)
        return value if power is None else _lift(_pow, value, power)


def value_of(samples: tuple[tuple[complex, ...], ...], symbols: set[str]) -> Value:
    """A Value; one whose letters cancel (sin^2 x + cos^2 x, x - x) is the constant it is at every point."""
    if symbols and all(abs(z - c[0]) <= 1e-9 * max(1.0, abs(z)) for c in samples for z in c):
        symbols = set()
    return Value(samples, frozenset(symbols))


def _constant(z: complex):
    return (z,) * SAMPLE_POINTS


def _lift(function, *values):
    """`function` applied at each sample point; tuples (points) take no arithmetic."""
    if any(isinstance(v[0], tuple) for v in values):
        raise Unreadable("arithmetic on a tuple")
    try:
        return tuple(complex(function(*(v[k] for v in values))) for k in range(SAMPLE_POINTS))
    except (ArithmeticError, ValueError, TypeError) as error:
        raise Unreadable(str(error)) from None


def _pow(base: complex, exponent: complex) -> complex:
    if abs(exponent) > 1e4 or (abs(base) > 1e3 and abs(exponent) > 100):
        raise Unreadable("power too large")
    if exponent.imag == 0 and exponent.real == int(exponent.real) and base != 0:
        return base ** int(exponent.real)
    return base ** exponent


def _factorial(z: complex) -> float:
    n = _real(z)
    if n != int(n) or not 0 <= n <= 170:
        raise Unreadable("factorial of a non-integer or a large number")
    return float(math.factorial(int(n)))


def _binomial(n: complex, k: complex) -> float:
    n_, k_ = _real(n), _real(k)
    if n_ != int(n_) or k_ != int(k_) or not 0 <= n_ <= 1000:
        raise Unreadable("binomial of non-integers")
    return float(math.comb(int(n_), int(k_))) if k_ >= 0 else 0.0


_DECIMAL = re.compile(r"\s*[-+]?\s*\d*\.(\d{2,})\s*")  # 0.333 stands for 1/3, 3.14 for pi; 0.5 for itself


def evaluate(plain: str, imaginary_i: bool) -> Value:
    """The value of a part written in plain syntax (LaTeX is converted first); Unreadable if it has none."""
    if len(plain) > MAX_PART_CHARS:
        raise Unreadable("too long")
    value = _Parser(plain, imaginary_i).read()
    decimal = _DECIMAL.fullmatch(plain)
    if decimal:
        return Value(value.samples, value.symbols, 0.5 * 10 ** -len(decimal.group(1)))
    return value
