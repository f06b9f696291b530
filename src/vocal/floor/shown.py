"""Names and text from files and other processes, made safe to print for a person (issue 37).

A session or agent name, a voice's folder, a tmux pane, an utterance kept in the history: each
comes from a file in the state directory or from a peer, which any process of the user (or an
agent it runs) could have written. Printed as it is, an escape sequence in it recolours the
terminal, moves the cursor over earlier lines, retitles the window or hides what follows, and a
name of a megabyte floods the screen. `shown_name` drops escape sequences, replaces the other
control characters with "?" and cuts the result to a bound, with an ellipsis.

`--json` output keeps the raw values, so that a script can pass a name back to vocal exactly:
`json.dumps` writes every control character but DEL as a `\\uXXXX` escape, and DEL alone does
nothing on a terminal.

Standard library only: on the `--help` and hook paths.
"""

from __future__ import annotations

import re

#: The most characters of a name shown (`vocal conch status`, voices, focus, control).
MAX_SHOWN_CHARS = 64
#: The most characters of a longer text shown on one line: an utterance in `vocal replay
#: --list`, a device's name, a voice's description, a peer's error.
MAX_SHOWN_TEXT_CHARS = 200
#: The most characters of each line of a text shown whole (a voice's persona).
MAX_SHOWN_LINE_CHARS = 1_000
ELLIPSIS = "…"
#: What an escape sequence can be (ECMA-48): CSI (ESC [ or 8-bit 0x9B, parameters, one final
#: byte); a control string (OSC, DCS, SOS, PM, APC: ESC ] P X ^ _ or their 8-bit forms) up to
#: BEL or ST (ESC \ or 0x9C), or to the end when unterminated; any other ESC and what follows
#: it up to a final byte (ESC ( B, ESC 7, ESC c).
_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f]).*?(?:\x07|\x1b\\|\x9c|\Z)"
    r"|\x1b[ -/]*[0-~]?",
    re.DOTALL,
)
#: Characters that are no part of a name's look: C0 and C1 controls, DEL, the bidirectional
#: overrides and isolates (they reorder what follows on screen), line and paragraph
#: separators, and the byte-order mark.
_CONTROL = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff]"
)


def shown_name(value: object, max_chars: int = MAX_SHOWN_CHARS) -> str:
    """`value` as text safe to print on a terminal: escape sequences removed, other control
    characters shown as "?", and at most `max_chars` characters (the last one "…" when cut)."""
    text = value if isinstance(value, str) else str(value)
    # Only a bounded prefix is looked at: a name of megabytes is cut before the regexes run.
    text = _CONTROL.sub("?", _ESCAPE.sub("", text[: max_chars * 16 + 1024]))
    if len(text) > max_chars:
        return text[: max_chars - 1] + ELLIPSIS
    return text


__all__ = [
    "ELLIPSIS",
    "MAX_SHOWN_CHARS",
    "MAX_SHOWN_LINE_CHARS",
    "MAX_SHOWN_TEXT_CHARS",
    "shown_name",
]
