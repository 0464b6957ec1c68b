"""Reading a sandbox run to its end: stdout, stderr and the grading report, with bounded memory."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

OUTPUT_CAP = 1 << 20  # bytes of stdout + stderr kept; more and the run is killed
REPORT_CAP = 4096  # bytes of the harness's report kept


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # run_python: exit status 0 within the limits; run_tests: every test passed, proven by the token
    status: str  # passed, failed, timeout, output-limit
    returncode: int | None
    output: str  # the tail of stdout, then the tail of stderr
    stdout: str = ""  # the tail of stdout alone
    report: str = ""  # what the grading harness wrote on its report pipe (run_tests)


def collect(process: subprocess.Popen, timeout_s: float, report_fd: int | None = None) -> SandboxResult:
    """Read stdout and stderr (and the report pipe) until they close, the wall clock runs out or the output
    cap is reached."""
    deadline = time.monotonic() + timeout_s
    kept = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
    report = bytearray()
    status = None
    total = 0
    exited_at = None
    try:
        with selectors.DefaultSelector() as selector:
            for fd in [*kept, *([report_fd] if report_fd is not None else [])]:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map() and status is None:
                now = time.monotonic()
                if now >= deadline:
                    status = "timeout"
                    break
                if exited_at is None and process.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > 1.0:  # something it left behind holds the pipe
                    break
                for key, _ in selector.select(min(deadline - now, 0.1)):
                    try:
                        chunk = os.read(key.fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    if key.fd == report_fd:
                        report += chunk[:REPORT_CAP - len(report)]
                        continue
                    room = OUTPUT_CAP - total
                    kept[key.fd] += chunk[:room]
                    total += len(chunk)
                    if total > OUTPUT_CAP:
                        status = "output-limit"
                        break
    finally:
        kill_group(process)
        process.wait()
        process.stdout.close()
        process.stderr.close()
    if status is None:
        status = "passed" if process.returncode == 0 else "failed"
    stdout, stderr = (kept[f].decode("utf-8", "replace") for f in kept)
    if status == "output-limit":
        stderr += f"\nsandbox: killed after more than {OUTPUT_CAP} bytes of output"
    elif status == "timeout":
        stderr += f"\nsandbox: killed after {timeout_s:g} s"
    output = (stdout[-1000:] + ("\n" if stdout and not stdout.endswith("\n") else "") + stderr[-1000:])
    return SandboxResult(status == "passed", status, process.returncode, output, stdout[-4000:],
                         report.decode("utf-8", "replace"))


def kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
