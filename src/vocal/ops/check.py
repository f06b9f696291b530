"""One line of `vocal doctor`'s report: a `Check` and its statuses.

Its own module so that the checks living beside the doctor (`echo_check`) and the doctor that
runs them both import it, not each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
STATUSES = (OK, WARN, FAIL, SKIP)


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report: `ok`; `warn` (works, but something is likely to
    surprise); `fail` (a turn will not work); `skip` (an earlier check failed). Every `warn`
    and `fail` carries the fix."""

    name: str
    status: str  # one of STATUSES
    detail: str
    fix: str | None = None
    #: Figures behind the line, for `--json` (left out when None).
    data: Mapping[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        if self.data is None:
            del out["data"]
        return out
