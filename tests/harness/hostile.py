"""Run `vocal` against hostile input as an attacker or a clumsy user would (issue 37).

`run_hostile` starts `python -m vocal ARGS` under a 4 GB address-space cap (`ulimit -v`) and
checks the promise every hostile case shares: it ends within its deadline, with its exit code
and one `vocal: error:` line (or, for a warning that lets the command go on, the exit code
asked for), never a traceback or "unexpected".
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

#: The address space a hostile case runs in (`ulimit -v 4194304`): issue 37's bound.
ADDRESS_SPACE_BYTES = 4 << 30


@dataclass(frozen=True)
class HostileResult:
    """What a hostile run did: exit code, output, and how long it took (s)."""

    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def error_lines(self) -> list[str]:
        """stderr's non-empty lines."""
        return [line for line in self.stderr.splitlines() if line.strip()]


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def run_hostile(
    *args: str,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    stdin: int | None = None,
    timeout_s: float = 60.0,
    entry: tuple[str, ...] = ("-m", "vocal"),
) -> HostileResult:
    """`vocal ARGS` under the 4 GB cap; killed (and the test failed) after `timeout_s`.
    `entry`: how the interpreter starts vocal (the lean cue: `("-c", "import vocal.cuehook")`)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    started_s = time.monotonic()
    done = subprocess.run(
        [sys.executable, *entry, *args],
        input=input,
        stdin=stdin if input is None else None,
        capture_output=True,
        env=full_env,
        timeout=timeout_s,
        preexec_fn=_cap_memory,
    )
    return HostileResult(
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
        time.monotonic() - started_s,
    )


def assert_one_line_error(
    result: HostileResult, code: int, *fragments: str, within_s: float | None = None
) -> None:
    """Exit `code`, one `vocal: error:` line holding each of `fragments`, no traceback, and
    (if given) within `within_s`."""
    lines = result.error_lines
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr, result.stderr
    assert len(lines) == 1 and lines[0].startswith("vocal: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], result.stderr
    if within_s is not None:
        assert result.elapsed_s < within_s, f"took {result.elapsed_s:.1f} s: {result.stderr}"


__all__ = ["ADDRESS_SPACE_BYTES", "HostileResult", "assert_one_line_error", "run_hostile"]
