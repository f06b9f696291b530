"""Push-to-talk (vocal.hearing.push_to_talk): keys read from a real terminal.

The key reader is driven through a pseudo-terminal; `vocal listen --ptt` runs in a tmux pane
(a real terminal, keys typed with `tmux send-keys`) while speech plays into the null sink.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import termios
import time
from collections.abc import Iterator

import pytest

from harness.listen_audio import join, play, silence, trimmed
from harness.tmux import PaneRun, Tmux, needs_tmux
from vocal.errors import EXIT_USAGE, UsageError
from vocal.hearing.listening import ListenOptions
from vocal.hearing.push_to_talk import PushToTalk, push_to_talk_options

HEARD = "Please open the file and read me the first line."
HEARD_WORDS = ("open", "file", "first", "line")


@pytest.fixture
def terminal() -> Iterator[tuple[int, str]]:
    """A pseudo-terminal: (the master end the test types into, the terminal's path)."""
    master, slave = os.openpty()
    try:
        yield master, os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


def wait_for(event, timeout_s: float = 2.0) -> bool:
    return event.wait(timeout_s)


@pytest.mark.parametrize("key", [b"\r", b"\n", b" "])
def test_enter_or_space_ends_the_recording(terminal, key: bytes) -> None:
    master, path = terminal
    ended = []
    with PushToTalk(on_done=lambda: ended.append(True), tty_path=path) as keys:
        os.write(master, b"x")  # other keys do nothing
        time.sleep(0.1)
        assert not keys.pressed
        os.write(master, key)
        assert wait_for(keys.done)
    assert ended == [True] and not keys.cancelled.is_set()


def test_esc_cancels_but_a_function_key_does_not(terminal) -> None:
    master, path = terminal
    with PushToTalk(tty_path=path) as keys:
        os.write(master, b"\x1b[A")  # the up arrow: Esc [ A
        time.sleep(0.3)
        assert not keys.pressed
        os.write(master, b"\x1b")
        assert wait_for(keys.cancelled)
    assert not keys.done.is_set()
    # The hook the recording loop runs raises once Esc was pressed.
    from vocal.errors import Interrupted

    with pytest.raises(Interrupted):
        keys.watching(None)()


def test_keys_typed_before_the_recording_do_not_count_and_the_terminal_is_restored(
    terminal,
) -> None:
    master, path = terminal
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY)
    try:
        before = termios.tcgetattr(fd)
        os.write(master, b"\r")  # typed while the reply played
        time.sleep(0.1)
        with PushToTalk(tty_path=path) as keys:
            assert not termios.tcgetattr(fd)[3] & termios.ICANON  # cbreak while reading
            time.sleep(0.2)
            assert not keys.pressed
        assert termios.tcgetattr(fd) == before
    finally:
        os.close(fd)


def test_no_terminal_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(UsageError, match="needs a terminal"):
        PushToTalk(tty_path=str(tmp_path / "no-tty")).__enter__()
    with pytest.raises(UsageError, match="not a terminal"):
        PushToTalk(tty_path=os.devnull).__enter__()
    # A process with no controlling terminal (cron, an agent's subprocess), stdin a pipe.
    result = subprocess.run([sys.executable, "-m", "vocal", "listen", "--ptt"], input=b"",
                            capture_output=True, start_new_session=True, timeout=60)  # fmt: skip
    assert result.returncode == EXIT_USAGE, result.stderr
    assert b"--ptt needs a terminal" in result.stderr


def test_push_to_talk_options_wait_for_the_key() -> None:
    options = push_to_talk_options(ListenOptions())
    endpoint = options.endpoint
    assert endpoint.min_silence_ms > endpoint.max_duration_s * 1000
    assert endpoint.no_speech_timeout_s > endpoint.max_duration_s
    assert options.vad and not options.end_of_turn.enabled


# -- vocal listen --ptt in a real terminal -------------------------------------------------------
def answered_then_key(tmux: Tmux, run: PaneRun, key: str, wait_s: float = 2.0) -> dict:
    """The person speaks `wait_s` after `run` started, pauses for 2 s (far past the 700 ms
    silence window and the turn model's verdict: still recording), then presses `key`; the
    turn's JSON, its words and end reason checked."""
    time.sleep(wait_s)
    assert run.running(), run.stderr()
    play(join(trimmed(HEARD), silence(0.1)))
    time.sleep(2.0)
    assert run.running(), f"ended on the pause: {run.stdout()} {run.stderr()}"
    tmux.send_keys(run.pane, key)
    assert run.wait() == 0, run.stderr()
    result = json.loads(run.stdout())
    assert result["end_reason"] == "key", result
    found = [w for w in HEARD_WORDS if w in result["text"].lower()]
    assert found == list(HEARD_WORDS), result["text"]
    return result


@needs_tmux
@pytest.mark.audio
def test_listen_ptt_waits_through_a_pause_for_the_key(tmux: Tmux) -> None:
    # 2 s: the microphone is open well within this (test_listen_stream.py).
    result = answered_then_key(tmux, tmux.start_vocal("listen", "--ptt", "--json"), "Enter")
    # The whole recording was kept until the key, the transcript from the speech alone.
    assert result["durations"]["recording_s"] > result["durations"]["speech_end_s"] + 1.5


@needs_tmux
@pytest.mark.audio
def test_listen_ptt_esc_cancels_with_nothing_printed(tmux: Tmux) -> None:
    run = tmux.start_vocal("listen", "--ptt", "--json", name="cancel")
    time.sleep(2.0)
    assert run.running(), run.stderr()
    tmux.send_keys(run.pane, "Escape")
    assert run.wait(timeout_s=20) == 130, run.stderr()
    assert run.stdout() == ""
    assert "cancelled" in run.stderr()


@needs_tmux
@pytest.mark.audio
@pytest.mark.usefixtures("shared_tts_cache")
def test_converse_ptt_answer_ends_on_the_key(tmux: Tmux) -> None:
    """The reply plays, then the answer is recorded through a pause until Space (half-duplex:
    the test's speaker sink is the microphone, so the reply must not be heard)."""
    run = tmux.start_vocal("converse", "--ptt", "--no-barge-in", "--json", "Okay.",
                           name="converse")  # fmt: skip
    # 5 s: start-up, the short reply, the microphone opened after it.
    answered_then_key(tmux, run, "Space", wait_s=5.0)
