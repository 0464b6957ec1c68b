"""Reading a request body within limits: its size, its nesting depth and the length of its integers.

Each limit turns a body that would cost memory, time or a RecursionError into a 400 or a 413;
a string that is not valid Unicode (a lone surrogate) is a 400 too.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from starlette.requests import ClientDisconnect, Request

from lookahead_reasoning.runtime.serve.jobs import client_closed
from lookahead_reasoning.runtime.serve.schemas import APIError

MAX_DEPTH = 32  # a chat request nests 3 deep; json's C parser recurses once per level
MAX_INT_DIGITS = 64  # int() of a string is quadratic in its length, and refuses over 4300 digits

_ESCAPE = re.compile(r"\\.", re.DOTALL)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING = re.compile(r'"[^"]*"')  # once escapes are gone, a string ends at the next quote
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_CHANGE = {"[": 1, "{": 1, "]": -1, "}": -1}


class _LongInteger(ValueError):
    pass


async def read_json(request: Request, max_bytes: int) -> Any:
    """The body parsed as JSON; APIError 413 when it is larger than `max_bytes`, 400 when it is not JSON."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    raw = bytearray()
    try:
        async for chunk in request.stream():  # a chunked body has no Content-Length: count as it comes
            raw += chunk
            if len(raw) > max_bytes:
                raise _too_large(max_bytes)
    except ClientDisconnect:
        raise client_closed() from None
    return parse_json(bytes(raw))


def parse_json(raw: bytes) -> Any:
    try:
        text = raw.decode(json.detect_encoding(raw))
    except UnicodeDecodeError:
        raise APIError(400, "the request body is not valid JSON") from None
    if nesting_depth(text) > MAX_DEPTH:
        raise APIError(400, f"the request body nests deeper than {MAX_DEPTH} levels")
    try:
        body = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError:
        raise APIError(400, "the request body is not valid JSON") from None
    except _LongInteger:
        raise APIError(400, f"the request body has an integer longer than {MAX_INT_DIGITS} digits") from None
    if _SURROGATE_ESCAPE.search(text):  # only a \uD800-\uDFFF escape can make one; a pair is fine
        where = _lone_surrogate(body)
        if where is not None:
            raise APIError(400, "the request body has a lone UTF-16 surrogate (\\ud800-\\udfff) in a string: "
                           "not valid Unicode", param=where or None)
    return body


def _lone_surrogate(value: Any, path: str = "") -> str | None:
    """Where (a dotted path, "" for the top) the first string with a lone surrogate is, or None.

    JSON lets a string escape half of a surrogate pair; Python keeps it, and it cannot be
    encoded as UTF-8 for the servers downstream. It is the client's input: a 400, not a failure there.
    (Recursion is safe: the body nests at most MAX_DEPTH deep by now.)
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _lone_surrogate(key) is not None:
            return path
        found = _lone_surrogate(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of JSON text nest (brackets inside strings do not count).

    Counted without recursion, in linear time (no regex here can backtrack), without a Python loop.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    return max(accumulate(map(_DEPTH_CHANGE.__getitem__, brackets)), default=0)


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise _LongInteger
    return int(digits)


def _too_large(max_bytes: int) -> APIError:
    return APIError(413, f"the request body is larger than {max_bytes} bytes")
