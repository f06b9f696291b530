"""Names shown to people carry no terminal escape codes and are bounded (issue 37).

A session or agent name reaches `vocal conch status` from the conch's files, which any process
of the user (or an agent) writes: `\\e]0;...\\a` retitled the window, `\\e[2J` cleared the
screen, a newline forged a line of its own. Every place that prints a name or text from a file
or a peer goes through vocal.floor.shown.shown_name; `--json` keeps the raw value (json.dumps
escapes control characters), so scripts can pass a name back exactly.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from harness.hostile import run_hostile
from vocal.audio.wav import Audio
from vocal.config import load_settings
from vocal.floor.conch.queue import Conch
from vocal.floor.history import History
from vocal.floor.shown import ELLIPSIS, MAX_SHOWN_CHARS, shown_name

#: A name that retitles the window, paints red, clears the screen, forges a line, reverses the
#: text after it (U+202E), and uses 8-bit CSI and DEL.
EVIL = "evil\x1b]0;pwned\x07\x1b[31mred\x1b[0m\x1b[2J\nforged\u202eright\x9b31mC1\x7fend"
#: Any escape or control character a terminal acts on.
ACTED_ON = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain-name_1.2", "plain-name_1.2"),
        ("ünïcödé 名前", "ünïcödé 名前"),
        ("\x1b[1;31mred\x1b[0m", "red"),
        ("a\x1b]0;title\x07b", "ab"),
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("a\x1bPdcs\x1b\\b", "ab"),
        ("a\x9b2Jb\x9dosc\x9cc", "abc"),
        ("tab\there\nnew\rline\x7f", "tab?here?new?line?"),
        ("\u202eevil\u2066x\u2069", "?evil?x?"),
        ("unterminated\x1b]0;title", "unterminated"),
        ("lone escape \x1b", "lone escape "),
        (None, "None"),
        (42, "42"),
    ],
)
def test_shown_name_strips_what_a_terminal_acts_on(raw: object, shown: str) -> None:
    assert shown_name(raw) == shown


def test_shown_name_is_bounded_with_an_ellipsis() -> None:
    assert shown_name("x" * MAX_SHOWN_CHARS) == "x" * MAX_SHOWN_CHARS
    cut = shown_name("y" * (MAX_SHOWN_CHARS + 1))
    assert len(cut) == MAX_SHOWN_CHARS and cut.endswith(ELLIPSIS)
    started = time.monotonic()
    huge = shown_name("\x1b[31m" + "z" * 50_000_000)  # a name of 50 MB costs nothing
    assert time.monotonic() - started < 2.0
    assert huge == "z" * (MAX_SHOWN_CHARS - 1) + ELLIPSIS


def _lines_safe(text: str) -> None:
    assert not ACTED_ON.search(text), repr(text)
    for line in text.splitlines():
        assert len(line) < 4 * MAX_SHOWN_CHARS, line


def test_conch_status_shows_names_stripped_and_bounded() -> None:
    settings = load_settings()
    conch = Conch.from_settings(settings)
    conch.wait_remote(EVIL, agent=EVIL + "x" * 10_000)  # the holder
    conch.wait_remote("s2" + "\x1b[2J" * 3, agent="\x1b]0;t\x07waiter")  # waits
    result = run_hostile("conch", "status", timeout_s=60)
    assert result.returncode == 0, result.stderr
    _lines_safe(result.stdout)
    assert "speaking: evilred" in result.stdout and ELLIPSIS in result.stdout
    assert "waiter (session s2, no process)" in result.stdout
    raw = run_hostile("conch", "status", "--json", timeout_s=60)
    assert not ACTED_ON.search(raw.stdout.replace("\n", ""))  # JSON escapes them ...
    assert json.loads(raw.stdout)["holder"]["session"] == EVIL  # ... and keeps them


def test_conch_wait_and_errors_show_names_safely() -> None:
    result = run_hostile("conch", "wait", "--session", EVIL, "--agent", EVIL, timeout_s=60)
    assert result.returncode == 0, result.stderr
    _lines_safe(result.stdout)
    second = run_hostile("conch", "wait", "--session", "other", "--callback", timeout_s=60)
    assert second.returncode == 3
    _lines_safe(second.stdout + second.stderr)
    # A path in an error message: still one line, nothing acted on.
    missing = run_hostile("listen", "--input", f"/nonexistent/{EVIL}.wav", timeout_s=60)
    assert missing.returncode == 2 and len(missing.error_lines) == 1
    _lines_safe(missing.stderr)


def test_replay_list_shows_text_and_names_safely() -> None:
    history = History.from_settings(load_settings())
    audio = Audio(np.zeros(1600, np.float32), 16_000)
    history.record(audio, text=EVIL * 20, voice=EVIL, session=EVIL, agent=EVIL)
    result = run_hostile("replay", "--list", timeout_s=60)
    assert result.returncode == 0, result.stderr
    _lines_safe(result.stdout)
    assert "[evilred" in result.stdout


def test_voices_list_shows_folder_names_safely(vocal_home: Path) -> None:
    (vocal_home / "voices" / EVIL).mkdir(parents=True)
    result = run_hostile("voices", "list", timeout_s=60)
    assert result.returncode == 0, result.stderr
    _lines_safe(result.stdout)
    assert "evilred" in result.stdout


def test_control_status_shows_a_peers_reply_safely(capsys: pytest.CaptureFixture) -> None:
    from vocal.commands.control import _print_status

    _print_status(
        {
            "ok": True,
            "pid": 7,
            "kind": EVIL,
            "session": EVIL,
            "state": EVIL,
            "utterance": {"id": 1, "text": EVIL},
        }
    )
    _print_status({"ok": False, "pid": EVIL, "error": EVIL * 100})
    _lines_safe(capsys.readouterr().out)
