"""Run the `lookahead` CLI in this process (no interpreter start-up, no second SGLang import)."""

from dataclasses import dataclass

from lookahead_reasoning.cli.app import main


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def invoke(capsys, *args: str) -> Outcome:
    """`lookahead ARGS` through the real entry point; output as `capsys` captured it."""
    capsys.readouterr()  # drop what earlier code printed
    try:
        main(list(args))
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    out = capsys.readouterr()
    return Outcome(code, out.out, out.err)


def one_line_error(outcome, fragment: str) -> None:
    """The command failed with exactly one line on stderr, `error: ...` naming `fragment`, and nothing on stdout."""
    assert outcome.returncode != 0
    lines = [l for l in outcome.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]
    assert outcome.stdout == ""
