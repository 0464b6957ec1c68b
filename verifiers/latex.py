"""LaTeX in the plain syntax expressions.py evaluates, and latex2sympy for the LaTeX beyond it.

`latex_to_plain` reads the common LaTeX of reasoning steps: fractions, roots, powers and subscripts,
products, `\\left`/`\\right`, `\\text` (units in a value, or a quantity's name), greek letters, the
elementary functions (`\\sin^2 x`, `\\log_2 8`), `|..|`, floors and ceilings, binomials, degrees and
percent. A part with another command goes to latex2sympy, the LaTeX parser math-verify uses, and its
sympy expression is evaluated at the same sample points (a few milliseconds; a step hands it few parts).
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from lookahead_reasoning.verifiers.expressions import SAMPLE_POINTS, Unreadable, Value, point, symbol_name, value_of

MAX_SYMPY_CHARS = 160


_GREEK = {name: chr(0x3B1 + i) for i, name in enumerate(
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho varsigma "
    "sigma tau upsilon phi chi psi omega".split())}
_GREEK.update(varepsilon="ε", vartheta="θ", varphi="φ")
_COMMANDS = {
    "times": "*", "cdot": "*", "ast": "*", "div": "/", "%": "%", "$": "", "pi": "pi",
    "left": "", "right": "", "big": "", "Big": "", "bigl": "", "bigr": "", "Bigl": "", "Bigr": "",
    "displaystyle": "", ",": " ", ";": " ", ":": " ", "!": "", " ": " ", "quad": " ", "qquad": " ",
    "mid": "|", "vert": "|", "lvert": "|", "rvert": "|", "lfloor": "floor(", "rfloor": ")",
    "lceil": "ceil(", "rceil": ")", "circ": "°", "degree": "°",
}
_LATEX_FUNCTIONS = {"sqrt", "sin", "cos", "tan", "sec", "csc", "cot", "ln", "log", "exp",
                    "arcsin", "arccos", "arctan"}
_TEXT_COMMANDS = {"text", "textbf", "textit", "mathrm", "mbox", "textrm", "mathit", "mathbf"}
_FRACTIONS = {"frac", "dfrac", "tfrac", "cfrac"}
_BINOMIALS = {"binom", "dbinom", "tbinom"}
# A value these stand in has no one number (1.333..., x = \pm 2, a set, infinity), or one this gate does not
# work out (sums, products, integrals, limits).
_UNREADABLE = {"ldots", "cdots", "dots", "dotsc", "pm", "mp", "infty", "{", "}", "cup", "cap", "emptyset",
               "sum", "prod", "int", "iint", "oint", "lim"}
_COMMAND = re.compile(r"\\([A-Za-z]+|.)")


class Foreign(Exception):
    """LaTeX beyond what this module reads: latex2sympy's turn."""


def latex_to_plain(latex: str) -> str:
    """LaTeX in the plain syntax `evaluate` reads; Foreign where a command is not known here."""
    out, i = [], 0
    while i < len(latex):
        c = latex[i]
        if c == "\\":
            match = _COMMAND.match(latex, i)
            if not match:
                raise Foreign("a lone backslash")
            name, i = match.group(1), match.end()
            if name in _FRACTIONS or name in _BINOMIALS:
                first, i = _argument(latex, i)
                second, i = _argument(latex, i)
                a, b = latex_to_plain(first), latex_to_plain(second)
                out.append(f"(({a})/({b}))" if name in _FRACTIONS else f"binom({a},{b})")
            elif name == "sqrt":
                root = None
                if latex.startswith("[", i):
                    end = latex.find("]", i)
                    if end < 0:
                        raise Foreign("unclosed root")
                    root, i = latex[i + 1:end], end + 1
                body, i = _argument(latex, i)
                body = latex_to_plain(body)
                out.append(f"sqrt({body})" if root is None else f"(({body})^(1/({latex_to_plain(root)})))")
            elif name in _TEXT_COMMANDS:
                body, i = _argument(latex, i)
                if name in ("mathbf", "mathit", "mathrm") and len(body) == 1 and body.isalpha():
                    out.append(body)
                    continue
                out.append(f"«{body}»")
                if latex[i:].lstrip().startswith("^"):  # \text{cm}^2: the power of a unit
                    _, i = _argument(latex, latex.index("^", i) + 1)
            elif name == "boxed":
                body, i = _argument(latex, i)
                out.append(f"({latex_to_plain(body)})")
            elif name in _LATEX_FUNCTIONS:
                if not latex[i:].lstrip().startswith("_"):
                    out.append(f" {name} ")  # \sin^2 x: the parser reads the power
                elif name == "log":  # \log_2 8 = ln 8 / ln 2
                    base, i = _argument(latex, latex.index("_", i) + 1)
                    out.append(f" (1/ln({latex_to_plain(base)}))*ln ")
                else:
                    raise Foreign(f"\\{name} with a subscript")
            elif name in _GREEK:
                out.append(_GREEK[name] if name != "pi" else " pi ")
            elif name in _COMMANDS:
                out.append(_COMMANDS[name])
                if name in ("left", "right") and latex.startswith(".", i):
                    i += 1
            elif name in _UNREADABLE:
                raise Unreadable(f"\\{name}")
            else:
                raise Foreign(f"\\{name}")
        elif c == "{":
            out.append("(")
            i += 1
        elif c == "}":
            out.append(")")
            i += 1
        elif c == "_":
            body, i = _argument(latex, i + 1)
            out.append("_{" + re.sub(r"[\s{}\\]", "", body) + "}")
        elif c in "&~":
            out.append(" ")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _argument(latex: str, i: int) -> tuple[str, int]:
    """The braced group (or single character or command) at i, and the index after it."""
    while i < len(latex) and latex[i] == " ":
        i += 1
    if i >= len(latex):
        raise Foreign("missing argument")
    if latex[i] != "{":
        match = _COMMAND.match(latex, i)
        if match:
            return match.group(0), match.end()
        return latex[i], i + 1
    depth = 0
    for j in range(i, len(latex)):
        depth += {"{": 1, "}": -1}.get(latex[j], 0)
        if depth == 0:
            return latex[i + 1:j], j + 1
    raise Foreign("unclosed {")


_SYMPY_SKIPS = ("Integral", "Sum", "Product", "Limit", "Derivative")


@lru_cache(maxsize=1)
def latex_parser():
    """latex2sympy and sympy, imported once and their parser's tables warmed on one expression (a few hundred
    milliseconds: a gate does it when it is built, not in the middle of a round); None where they cannot
    be imported."""
    try:
        import sympy
        from latex2sympy2_extended import latex2sympy
    except ImportError:
        return None
    try:
        latex2sympy("\\overline{AB} + \\hat{x}^{2} \\cdot \\frac{1}{2}")
    except Exception:  # noqa: BLE001  warming only
        pass
    return latex2sympy, sympy


@lru_cache(maxsize=1024)
def sympy_value(latex: str, imaginary_i: bool) -> Value | None:
    """A part beyond latex_to_plain: parsed by latex2sympy, evaluated through sympy at the sample points."""
    loaded = latex_parser()
    if loaded is None or len(latex) > MAX_SYMPY_CHARS or latex.count("^") > 3:
        return None
    latex2sympy, sympy = loaded
    try:
        expression = latex2sympy(latex, is_real=not imaginary_i)
        items = list(expression) if isinstance(expression, sympy.Tuple) else [expression]
        if not all(isinstance(item, sympy.Expr) for item in items) or any(
                item.has(*(getattr(sympy, name) for name in _SYMPY_SKIPS)) for item in items):
            return None
        symbols = {s: symbol_name(_GREEK.get(s.name, s.name)) for item in items for s in item.free_symbols}
        samples = []
        for item in items:
            component = []
            for k in range(SAMPLE_POINTS):
                z = complex(item.evalf(15, subs={s: point(n, k).real for s, n in symbols.items()}))
                if not (math.isfinite(z.real) and math.isfinite(z.imag)):
                    return None
                component.append(z)
            samples.append(tuple(component))
        return value_of(tuple(samples), set(symbols.values()))
    except Exception:  # noqa: BLE001  anything latex2sympy or sympy cannot do states nothing
        return None


