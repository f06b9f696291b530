"""`vocal converse --wake`, the hands-free turn (issue 39), without an audio stream: the wait
for the wake phrase and the answer after it, fed vocal's own voices through the real detector
and the real recognizer from a block source standing in for the microphone; the floor given
back before the wait; the flags, the no-TEXT rule and the exit codes.

The converse turn itself (which needs a speaker) is stood in for where a test needs one, by a
function that takes the floor in a real `Turn` and hears nobody; the turn on real streams is in
tests/test_wake_live.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.runner import run_vocal
from harness.wake_audio import WakeVoices, wake_scene
from harness.words import word_error_rate
from vocal.audio.devices import Block
from vocal.audio.wav import Audio
from vocal.config import Settings, load_settings
from vocal.duplex import hands_free
from vocal.duplex.hands_free import OneStream, converse_hands_free
from vocal.duplex.options import ConverseOptions, ConverseResult
from vocal.duplex.outcome import TurnParts, converse_result
from vocal.errors import UsageError
from vocal.floor.gates import set_muted
from vocal.floor.turn import Turn
from vocal.hearing.listening import ListenResult
from vocal.wake.gate import floor_busy

RATE = 16_000
REQUEST = "run the tests"
#: One word in three may differ in a short request heard by tiny.en (as tests/test_wake.py).
MAX_WER = 0.34
#: Nothing here opens a sound device, nor starts PortAudio or the speech worker early.
QUIET_START = {"VOCAL_EARLY_START": "0"}


@pytest.fixture(scope="module")
def voices(tts_cache: Path) -> WakeVoices:
    return WakeVoices(tts_cache)


class SceneSource:
    """Samples handed out as a microphone hands out blocks (512 frames), on the file's clock
    (`live` False); `on_block` runs before each block (a look at the floor)."""

    live = False
    sample_rate = RATE
    overflows = 0

    def __init__(self, samples: np.ndarray, on_block=None) -> None:
        self.samples, self.on_block = samples, on_block
        self.opened_at_s: float | None = None  # OneStream: when it starts reading
        self.reads = 0
        self.closed = False

    def blocks(self, timeout_s: float = 2.0):
        self.reads += 1
        for start in range(0, self.samples.shape[0], 512):
            if self.on_block is not None:
                self.on_block()
            block = self.samples[start : start + 512]
            if block.shape[0] < 512:
                block = np.concatenate([block, np.zeros(512 - block.shape[0], np.float32)])
            yield Block(block, time.monotonic())

    def close(self) -> None:
        self.closed = True


def nobody_answered(reply: str, started_at_s: float, end_reason: str = "no_speech", **kw):
    """A converse turn's result after saying `reply`, in which nobody spoke before
    `end_reason`; `kw` then sets fields of the result."""
    empty = Audio(np.zeros(0, np.float32), RATE)
    listened = ListenResult(
        text="",
        language=None,
        speech_heard=False,
        end_reason=end_reason,
        audio=empty,
        recording=empty,
        durations={},
        timings={},
        clock={},
    )
    parts = TurnParts(
        text=reply,
        voice=None,
        barge_in=True,
        use_aec=False,
        started_at_s=started_at_s,
        clock={"started": started_at_s},
    )
    result = converse_result(parts, listened, stopped=False, trace=False)
    for name, value in kw.items():
        setattr(result, name, value)
    return result


def hands_free_on(samples: np.ndarray, text: str = "", settings=None, **kw):
    """`converse_hands_free` waiting on `samples`: the result, the status lines, the wakes."""
    notes: list[str] = []
    woken: list = []
    source = kw.pop("source", None) or SceneSource(samples)
    result = converse_hands_free(
        text,
        ConverseOptions(),
        settings or load_settings(),
        timeout_s=kw.pop("timeout_s", 30.0),
        report=notes.append,
        on_wake=woken.append,
        source=source,
        **kw,
    )
    assert source.closed
    return result, notes, woken


# -- the wait and the answer -----------------------------------------------------------------------
def test_a_hands_free_start_takes_the_words_after_the_phrase(voices: WakeVoices) -> None:
    scene = wake_scene(1.0, voices.say("hibari", f"Hey Jarvis, {REQUEST}."), 2.0)
    result, notes, woken = hands_free_on(scene.samples)
    assert notes[0] == "listening for 'hey jarvis' (up to 30 s)"
    assert len(woken) == 1 and woken[0].detector == "micro"  # the cue's moment
    woke = result.woke
    assert woke is not None and woke["detector"] == "micro" and woke["phrase"] == "hey jarvis"
    assert woke["score"] > 0.9 and 0 <= woke["waited_s"] <= woke["woke_at_s"]
    assert result.speech_heard and word_error_rate(REQUEST, result.text) <= MAX_WER, result.text
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["woke"] == woke and payload["text"] == result.text
    assert payload["end_reason"] == "silence" and payload["reply"] == ""
    assert payload["stt_engine"] == "faster-whisper"


@pytest.mark.parametrize(
    "pause_s, no_speech_timeout_s, heard",
    [
        (2.0, 15.0, True),
        # The no-speech timeout counts from the phrase (the cue), not from where listening for
        # the answer began (~1.2 s after it, vocal.wake.request's first pause): 3.5 s after
        # the phrase is too late for a 3 s timeout, 2.4 s is in time.
        (2.4, 3.0, True),
        (3.5, 3.0, False),
    ],
)
def test_the_phrase_alone_is_followed_by_the_answer(
    voices: WakeVoices, pause_s: float, no_speech_timeout_s: float, heard: bool
) -> None:
    scene = wake_scene(
        1.0,
        voices.say("hibari", "Hey Jarvis."),
        pause_s,
        voices.say("hibari", "Run the tests."),
        2.0,
    )
    settings = load_settings(no_speech_timeout_s=no_speech_timeout_s)
    result, _, woken = hands_free_on(scene.samples, settings=settings)
    assert result.woke is not None and len(woken) == 1
    assert result.speech_heard is heard, (result.text, result.listen.end_reason)
    if heard:
        assert word_error_rate(REQUEST, result.text) <= MAX_WER, result.text
        assert "jarvis" not in result.text.lower()
        assert result.listen.end_reason != "no_speech"
    else:
        assert result.text == "" and result.listen.end_reason == "no_speech"


def test_a_phrase_heard_while_muted_is_ignored_till_the_timeout(
    voices: WakeVoices, vocal_home: Path
) -> None:
    set_muted(vocal_home, True)
    scene = wake_scene(1.0, voices.say("hibari", f"Hey Jarvis, {REQUEST}."), 4.0)
    result, notes, woken = hands_free_on(scene.samples, timeout_s=4.0)
    assert woken == [] and result.woke is None and not result.speech_heard
    assert result.wake_wait_s is not None and result.text == ""
    assert any(n.endswith("ignored: vocal is muted") for n in notes), notes
    assert result.to_dict()["woke"] is None


# -- the floor -----------------------------------------------------------------------------------
def test_the_floor_is_given_back_before_the_wait(voices: WakeVoices, monkeypatch) -> None:
    """The converse turn holds the floor and its control socket; neither is there while the
    wait reads a single block, so other agents may speak and the phrase is not ignored as this
    turn's own."""
    settings = load_settings()
    held: list[str | None] = []

    def speaks_and_hears_nobody(text, options, settings, *, report, started_at_s):
        with Turn(settings, kind="converse", warm_audio=False):
            held.append(floor_busy(settings))
        return nobody_answered(text, started_at_s)

    monkeypatch.setattr("vocal.duplex.converse.converse", speaks_and_hears_nobody)
    seen: list[str | None] = []
    scene = wake_scene(1.0, voices.say("hibari", f"Hey Jarvis, {REQUEST}."), 2.0)
    source = SceneSource(scene.samples, on_block=lambda: seen.append(floor_busy(settings)))
    result, notes, _ = hands_free_on(
        scene.samples, "Anything else?", settings=settings, source=source
    )
    assert held and held[0] is not None  # the turn held the floor (or ran its socket)
    assert seen and set(seen) == {None}, set(seen)
    assert notes[0] == "nobody spoke: listening for 'hey jarvis' (up to 30 s)"
    assert result.reply == "Anything else?" and result.woke is not None
    assert word_error_rate(REQUEST, result.text) <= MAX_WER, result.text


@pytest.mark.parametrize(
    "answered",
    [
        {"speech_heard": True, "text": "yes please"},
        {"stopped": True},
        {"end_reason": "requested"},  # `vocal control skip-forward` ended the listening
    ],
)
def test_no_wait_when_the_turn_did_not_end_on_its_timeout(monkeypatch, answered) -> None:
    def converse(text, options, settings, *, report, started_at_s):
        end_reason = answered.get("end_reason", "no_speech")
        rest = {k: v for k, v in answered.items() if k != "end_reason"}
        return nobody_answered(text, started_at_s, end_reason, **rest)

    monkeypatch.setattr("vocal.duplex.converse.converse", converse)
    source = SceneSource(np.zeros(RATE, np.float32))
    result, notes, _ = hands_free_on(source.samples, "Shall I?", source=source)
    assert source.reads == 0 and notes == []
    assert result.woke is None and result.wake_wait_s is None


@pytest.mark.parametrize(
    "options, phrase, timeout_s",
    [
        (ConverseOptions(push_to_talk=True), None, 30.0),
        (ConverseOptions(), "...", 30.0),
        (ConverseOptions(), None, 0.0),
        (ConverseOptions(), None, float("nan")),
    ],
)
def test_usage_errors_come_before_anything_is_said(
    monkeypatch, options, phrase: str | None, timeout_s: float
) -> None:
    def converse(*_a, **_k):
        raise AssertionError("the turn spoke before its options were checked")

    monkeypatch.setattr("vocal.duplex.converse.converse", converse)
    source = SceneSource(np.zeros(RATE, np.float32))
    with pytest.raises(UsageError):
        converse_hands_free(
            "Shall I?",
            options,
            load_settings(wake_phrase=phrase),
            timeout_s=timeout_s,
            report=None,
            source=source,
        )
    assert source.reads == 0 and source.closed


def test_one_stream_goes_on_where_its_last_reader_stopped() -> None:
    samples = np.arange(10 * 512, dtype=np.float32)
    stream = OneStream(SceneSource(samples), keep_blocks=4)
    first = stream.blocks()
    assert [next(first).samples[0] for _ in range(3)] == [0, 512, 1024]
    del first  # the wait for the phrase is over: the answer's listener reads on
    assert stream.replay(0.05) == pytest.approx(1024 / RATE)  # whole blocks, >= 50 ms
    assert [b.samples[0] for b in stream.blocks()][:4] == [512, 1024, 1536, 2048]


# -- the command ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["--wake", "--wake-timeout", "0"], "not in the range"),
        (["--wake", "--wake-timeout", "-1"], "not in the range"),
        (["--wake", "--wake-timeout", "86401"], "not in the range"),
        (["--wake", "--wake-timeout", "1e300"], "not in the range"),
        (["--wake", "--wake-timeout", "nan"], "not a finite number"),
        (["--wake-timeout", "5"], "--wake-timeout goes with --wake"),
        (["--wake", "--ptt"], "--ptt"),
    ],
)
def test_bad_wake_flags_exit_2(args: list[str], message: str) -> None:
    result = run_vocal("converse", *args, "Shall I?", env=QUIET_START)
    assert result.returncode == 2, result.stderr
    err = result.stderr.decode()
    assert message in err and err.count("\n") <= 2, err


def test_without_wake_an_empty_text_is_still_an_error() -> None:
    result = run_vocal("converse", input=b"", env=QUIET_START)
    assert result.returncode == 2 and b"nothing to say" in result.stderr


class Called:
    """Stands in for `converse_hands_free` in the command, returning `result`."""

    def __init__(self, result: ConverseResult) -> None:
        self.result, self.calls = result, []

    def __call__(self, text, options, settings, **kw):
        self.calls.append((text, kw))
        return self.result


def run_command(monkeypatch, capsys, result: ConverseResult, *args: str, tty: bool = False):
    """`vocal converse ARGS` in this process, the library standing in: exit code, stdout,
    stderr, the calls it got."""
    from vocal.cli import main

    called = Called(result)
    monkeypatch.setattr(hands_free, "converse_hands_free", called)

    class Terminal:
        def isatty(self) -> bool:
            return tty

    monkeypatch.setattr(sys, "stdin", Terminal())
    with pytest.raises(SystemExit) as ended:
        main(["converse", *args])
    out, err = capsys.readouterr()
    return ended.value.code, out, err, called.calls


def test_wake_with_no_text_on_a_terminal_starts_at_the_wait(monkeypatch, capsys) -> None:
    woke = {"detector": "micro", "phrase": "hey jarvis", "score": 0.99, "woke_at_s": 4.2}
    answered = nobody_answered("", 0.0, speech_heard=True, text=REQUEST)
    answered.woke = {**woke, "waited_s": 4.1}
    code, out, _, calls = run_command(monkeypatch, capsys, answered, "--wake", tty=True)
    assert code == 0 and out == f"{REQUEST}\n"
    ((text, kw),) = calls
    assert text == "" and kw["timeout_s"] == Settings.wake_timeout_s == 300.0
    assert callable(kw["on_wake"])  # the Wake cue
    code, out, _, _ = run_command(monkeypatch, capsys, answered, "--wake", "--json", tty=True)
    assert code == 0 and json.loads(out)["woke"] == answered.woke
    code, _, err, calls = run_command(monkeypatch, capsys, answered, tty=True)  # no --wake
    assert code == 2 and "give TEXT" in err and calls == []


def test_exit_4_says_whether_the_phrase_was_heard(monkeypatch, capsys) -> None:
    waited = nobody_answered("Shall I?", 0.0, wake_wait_s=12.0)
    code, out, err, _ = run_command(
        monkeypatch, capsys, waited, "--wake", "--wake-timeout", "12", "Shall I?"
    )
    assert code == 4 and out == ""
    assert "nobody spoke, and the wake phrase was not heard in 12 s" in err
    woke = {"detector": "micro", "phrase": "hey jarvis", "score": 0.99}
    alone = nobody_answered("Shall I?", 0.0, wake_wait_s=3.0)
    alone.woke = {**woke, "woke_at_s": 6.0, "waited_s": 3.0}
    code, _, err, _ = run_command(monkeypatch, capsys, alone, "--wake", "Shall I?")
    assert code == 4 and "nobody spoke after the wake phrase" in err
