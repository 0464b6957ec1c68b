"""Errors that reach the user as one line, never as a traceback."""


class LookaheadError(Exception):
    """A problem the user can act on: bad input, an unreachable server, a missing model."""


class ServerFailure(LookaheadError):
    """An SGLang server failed or timed out while a run was in progress."""


class TimeLimitExceeded(LookaheadError):
    """A run went past its deadline."""


def target_failed(error: BaseException) -> ServerFailure:
    """The error a run ends with when the target server fails: the answer cannot be trusted."""
    return ServerFailure(f"the target server failed: {first_line(error)}")


def first_line(error: BaseException) -> str:
    """The first line of an error's message, for one-line reports."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
