"""Errors that reach the user as one line, never as a traceback.

Below every layer (programs, verifiers, runtime, eval, cli): any of them may raise these.
"""

from pydantic import ValidationError


class LookaheadError(Exception):
    """A problem the user can act on: bad input, an unreachable server, a missing model."""


class ServerFailure(LookaheadError):
    """An SGLang server failed or timed out while a run was in progress."""


class TimeLimitExceeded(LookaheadError):
    """A run went past its deadline."""


class Cancelled(LookaheadError):
    """A run was stopped because nobody waits for its answer any more (the client went away)."""


def target_failed(error: BaseException) -> ServerFailure:
    """The error a run ends with when the target server fails: the answer cannot be trusted."""
    return ServerFailure(f"the target server failed: {first_line(error)}")


def first_line(error: BaseException) -> str:
    """The first line of an error's message, for one-line reports."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def validation_message(error: ValidationError) -> str:
    """A pydantic validation error as one line: where the first problem is, and what it is."""
    problem = error.errors()[0]
    where = ".".join(map(str, problem["loc"]))
    message = problem["msg"].removeprefix("Value error, ")
    return f"{where + ': ' if where else ''}{message}"


def validated(model, **values):
    """Build a pydantic model from user input; a validation error becomes a one-line LookaheadError."""
    try:
        return model(**values)
    except ValidationError as error:
        where = "" if error.errors()[0]["loc"] else "value: "
        raise LookaheadError(f"invalid {where}{validation_message(error)}") from None
