"""`vocal converse` end to end on the room harness: real streams, real AEC3, real models.

The reply is played by `vocal converse` (a subprocess) into this session's speaker sink; the
room (tests/harness/room.py) convolves it with an echo path, mixes in a person (espeak-ng) when
a test asks, and plays that into the room sink whose monitor is the microphone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.converse import (
    LONG_REPLY,
    NEAR_WORDS,
    barge_in,
    converse,
    quiet_after_person_s,
    words_in,
)
from harness.converse import near_wav as write_near_wav
from harness.room import loaded_machine, running_room, without_room_stall
from harness.runner import run_vocal, start_vocal
from harness.sounds import espeak
from vocal.audio.wav import read_wav, write_wav
from vocal.config import load_settings
from vocal.floor.conch.queue import Conch
from vocal.floor.control import find_endpoint, send_command
from vocal.hearing.endofturn import EndOfTurnOptions

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

#: ~3 s of hibari speech; words the person never says.
REPLY = "The build finished, and all forty two tests passed in the docs folder."
REPLY_WORDS = ("build", "finished", "forty", "passed", "docs", "folder")
# LONG_REPLY (~6 s, long enough to be cut), the person's NEAR and its NEAR_WORDS, converse() and
# the barge-in run are in harness.converse: the sound-server smoke test runs them too.


@pytest.fixture(scope="module")
def room(pulse):
    with running_room(pulse) as started:
        yield started


@pytest.fixture(scope="module")
def near_wav(tmp_path_factory) -> Path:
    return write_near_wav(tmp_path_factory.mktemp("near"))


def floor() -> Conch:
    return Conch.from_settings(load_settings())


def wait_for(predicate, timeout_s: float = 20.0, what: str = "it"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def wait_speaking(proc: subprocess.Popen) -> dict:
    """Wait until the converse process is playing its reply (by its control socket)."""

    def playing():
        if proc.poll() is not None:
            raise AssertionError(f"converse exited early: {proc.communicate()}")
        endpoint = find_endpoint(load_settings().run_dir, pid=proc.pid)
        if endpoint is None:
            return None
        status = send_command(endpoint, "status")
        speaking = status.get("converse") == "speaking" and status.get("played_s", 0) > 0.5
        return status if speaking else None

    return wait_for(playing, what="the reply to play")


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(p) for p in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


# -- echo only ----------------------------------------------------------------------------------
def test_echo_only_never_barges_in_nor_transcribes_the_reply(room) -> None:
    # A stall of the room process itself (it drops its backlog: an echo-path jump no real room
    # makes, invisible to the detector) repeats the run, as in tests/test_bargein.py.
    runs = 5
    for run in range(runs):
        code, result, err = without_room_stall(room, lambda: converse(REPLY))
        # What was heard, how, and the canceller's state: an exit 0 here is rare and was
        # not diagnosable from the exit code alone.
        seen = {k: result.get(k) for k in ("text", "interrupted", "end_reason", "tail_audio",
                                           "echo_profile", "counters")}  # fmt: skip
        assert code == 4, f"run {run}: exit {code}: {seen} {err}"
        assert result["interrupted"] is False, f"run {run}: false barge-in {result}"
        assert result["text"] == "" and not words_in(result["text"], REPLY_WORDS)
        assert result["mode"] == "barge-in" and result["aec"] is True
        assert result["heard_reply"] == result["reply"].strip()
        assert result["counters"]["input_overflows"] == 0
        assert result["counters"]["aec_errors"] == 0


# -- barge-in ------------------------------------------------------------------------------------
def test_near_end_speech_stops_the_reply_and_is_transcribed(room, near_wav) -> None:
    near_id, code, result, err = barge_in(room, near_wav)
    assert code == 0, err
    assert result["interrupted"] is True, result
    # Heard from the raw microphone minus the reply's fitted echo when the fit held (it did in
    # 10 of 12 benchmark runs), else from the canceller (vocal.duplex.echo_free.onset).
    audio = result["interruption_audio"]
    assert audio["source"] in ("raw", "canceller") and audio["fit_s"] is not None, audio
    if audio["source"] == "raw":
        assert audio["echo_removed_db"] >= 20.0, audio
    # Double talk clips words on this loaded machine (benchmarks/RESULTS.md: the keywords came
    # through in 8/8 runs there, but one test run heard "I'll need to end open"): at least one.
    assert words_in(result["text"], (*NEAR_WORDS, "file")), result
    assert not words_in(result["text"], ("branches", "release", "merged", "notes"))
    # What the person heard is a strict prefix of the reply.
    heard = result["heard_reply"]
    assert heard and len(heard) < len(result["reply"]), heard
    assert result["reply"].startswith(heard.split()[0])
    # The reply went quiet soon after the person began, on the room's clock. The issue's
    # target is 300 ms (benchmarks/converse measures it); generous here.
    quiet_s = quiet_after_person_s(room, near_id)
    assert quiet_s < 1.0, (quiet_s, result["timings"], result["counters"])
    assert result["counters"]["input_overflows"] == 0
    timings = result["timings"]
    assert timings["transcribe_s"] is not None and timings["end_to_text_s"] < 3.0


# -- backchannels --------------------------------------------------------------------------------
def short_word_over_reply(room, tmp_path: Path, word: str, *env: str) -> tuple[int, dict, str]:
    """`word` (espeak-ng) said 3 s into the long reply; repeated (up to 3 turns) while the
    detector did not hear it at all: a word this short over the echo is missed now and then
    (2 backchannels in 10 in benchmarks/converse), and that is not what these tests are about."""
    wav = tmp_path / f"{word.replace(' ', '-')}.wav"
    write_wav(wav, espeak(word))
    for _ in range(3):
        room.say(wav, delay_s=3.0, after="far")
        proc = start_vocal("converse", LONG_REPLY, "--json", "--no-speech-timeout", "1.5",
                           env=dict(e.split("=", 1) for e in env))  # fmt: skip
        out, err = proc.communicate(timeout=60)
        result = json.loads(out) if out.strip() else {}
        if result.get("interrupted") or result.get("backchannels"):
            return proc.returncode, result, err.decode()
    raise AssertionError(f"{word!r} was never heard over the reply: {result}")


def test_a_backchannel_pauses_the_reply_and_it_goes_on(room, tmp_path) -> None:
    code, result, err = short_word_over_reply(room, tmp_path, "okay")
    # Nobody answered after the reply: exit 4, and the "okay" is not the answer.
    assert code == 4, (err, result)
    assert result["interrupted"] is False and result["text"] == "", result
    heard = result["backchannels"]
    assert len(heard) == 1 and "ok" in heard[0]["text"].lower(), heard
    assert 0 < heard[0]["paused_s"] < 3.0 and heard[0]["speech_s"] < 1.0, heard
    assert 2.5 < heard[0]["at_s"] < 4.5, heard
    assert result["counters"]["backchannels"] == 1
    # The whole reply was played: the pause lost nothing.
    assert result["heard_reply"] == result["reply"].strip()
    assert [s["played"] for s in result["sentences"]] == [True] * len(result["sentences"])


def test_a_real_interruption_after_a_backchannel_still_stops_the_reply(
    room, tmp_path, near_wav
) -> None:
    """ "okay" 3 s in, then "please stop and open the settings file" 6 s in: the first pauses
    the reply and lets it go on, the second stops it and is transcribed (barge-in waits only
    1 s after such a resume, `BackchannelOptions.resume_hold_ms`)."""
    okay = tmp_path / "okay.wav"
    write_wav(okay, espeak("okay"))
    for _ in range(3):  # until the detector hears the "okay" (see short_word_over_reply)
        room.say(okay, delay_s=3.0, after="far")
        room.say(near_wav, delay_s=6.0, after="far")
        code, result, err = converse(LONG_REPLY)
        if result.get("backchannels"):
            break
    assert result.get("backchannels"), result
    assert code == 0 and result["interrupted"] is True, (err, result)
    assert words_in(result["text"], (*NEAR_WORDS, "file")), result["text"]
    assert "ok" not in result["text"].lower().split()[:1], result["text"]
    assert result["heard_reply"] != result["reply"].strip()


def test_a_short_stop_word_stops_the_reply(room, tmp_path) -> None:
    code, result, err = short_word_over_reply(room, tmp_path, "wait")
    assert code == 0 and result["interrupted"] is True, (err, result)
    assert "wait" in result["text"].lower() and not result["backchannels"], result
    assert len(result["heard_reply"]) < len(result["reply"]) * 2 // 3, result["heard_reply"]


def test_with_backchannels_off_any_barge_in_stops_the_reply(room, tmp_path) -> None:
    code, result, err = short_word_over_reply(room, tmp_path, "okay",
                                              "VOCAL_BARGE_IN_BACKCHANNELS=false")  # fmt: skip
    assert code == 0 and result["interrupted"] is True, (err, result)
    assert "ok" in result["text"].lower() and not result["backchannels"], result


def test_an_answer_begun_as_the_reply_ends_keeps_its_first_words(room, tmp_path) -> None:
    """The hand-over (issue 19): a real recording ("He turned sharply, and faced Gregson across
    the table.") starting 0.2 s before the reply's last sample. The room's tail used to be
    blanked and the answer came back "Turn sharply and face greggs in..."; it is now heard from
    the raw microphone minus the reply's fitted echo, where the fit holds (37-61 dB in 9 of 9
    benchmark runs starting 0.3 s before the end or later; a turn whose fit fell short is run
    again, up to three). On a loaded machine every try can be blanked (glitches move the echo
    under the fit: 22 of 30 kept at load 3.7-8.6, benchmarks/RESULTS.md "The hand-over"): the
    first words are then lost, as designed, and what still holds is asserted."""
    from harness.corpus import load_clips, normalize

    clip = next(c for c in load_clips() if c.id == "arctic-slt-a0009")
    reply_wav = tmp_path / "reply.wav"
    made = run_vocal("speak", "-o", str(reply_wav), REPLY)
    assert made.returncode == 0, made.stderr
    reply = read_wav(reply_wav)
    reply_s = reply.mono_samples.shape[0] / reply.sample_rate

    def run() -> tuple:
        room.say(clip.path, delay_s=reply_s - 0.2, after="far")
        return converse(REPLY, "--no-speech-timeout", "4", timeout_s=90)

    def handed_over(outcome: tuple) -> bool:
        return (outcome[1].get("tail_audio") or {}).get("source") == "raw"

    code, result, err = without_room_stall(room, run, attempts=3, clean=handed_over)
    assert code == 0 and result["interrupted"] is False, (err, result)
    words = normalize(result["text"])
    # Never the question's words, however loaded the machine.
    assert not words_in(result["text"], REPLY_WORDS), result["text"]
    if not handed_over((code, result, err)) and loaded_machine():
        assert "table" in words, result  # blanked: the rest of the answer is heard
        return
    assert handed_over((code, result, err)), result.get("tail_audio")
    assert words[:2] == ["he", "turned"], result["text"]


# -- half-duplex ---------------------------------------------------------------------------------
def test_half_duplex_never_hears_its_reply_and_hears_the_answer(room, near_wav) -> None:
    # The person talks over the reply (unheard: the microphone is shut) and again after it.
    room.say(near_wav, delay_s=1.0, after="far")
    code, result, err = converse(REPLY, "--no-barge-in")
    assert code == 4, err  # nothing after the reply: nobody spoke, as far as it knows
    assert result["mode"] == "half-duplex" and result["interrupted"] is False
    assert result["text"] == ""

    after_id = room.say(near_wav, delay_s=4.5, after="far")
    proc = start_vocal("converse", REPLY, "--no-barge-in", "--json", "--no-speech-timeout", "4")
    out, err = proc.communicate(timeout=60)
    result = json.loads(out)
    assert proc.returncode == 0, err.decode()
    assert room.find_event("near_start", id=after_id) is not None
    assert set(words_in(result["text"], NEAR_WORDS)) == set(NEAR_WORDS), result["text"]
    assert not words_in(result["text"], REPLY_WORDS), result["text"]


# -- the control channel -------------------------------------------------------------------------
def test_control_stop_ends_the_turn_with_a_marker(room) -> None:
    proc = start_vocal("converse", LONG_REPLY)
    wait_speaking(proc)
    endpoint = find_endpoint(load_settings().run_dir, pid=proc.pid)
    send_command(endpoint, "stop")
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "[stopped]"
    assert floor().status().holder is None
    assert os.listdir(load_settings().run_dir) == []


def test_control_skip_forward_cuts_to_listening(room, near_wav) -> None:
    proc = start_vocal("converse", LONG_REPLY, "--json", "--no-speech-timeout", "4")
    wait_speaking(proc)
    endpoint = find_endpoint(load_settings().run_dir, pid=proc.pid)
    near_id = room.say(near_wav, delay_s=0.8)
    send_command(endpoint, "skip_forward")
    out, err = proc.communicate(timeout=30)
    result = json.loads(out)
    assert proc.returncode == 0, err.decode()
    assert result["skipped"] is True and result["interrupted"] is False
    assert len(result["heard_reply"]) < len(result["reply"])
    assert room.find_event("near_start", id=near_id) is not None
    assert set(words_in(result["text"], NEAR_WORDS)) == set(NEAR_WORDS), result["text"]


def test_control_pause_holds_the_reply_silent_and_resume_finishes_it(room) -> None:
    from harness.speak_audio import Recorder

    recorder = Recorder().start()  # this process's default source: the speaker's monitor
    try:
        proc = start_vocal("converse", LONG_REPLY, "--json", "--no-speech-timeout", "1.5")
        wait_speaking(proc)
        endpoint = find_endpoint(load_settings().run_dir, pid=proc.pid)
        paused = send_command(endpoint, "pause")
        assert paused["state"] == "paused" and paused["paused"] is True, paused
        paused_at_s = time.monotonic()
        time.sleep(2.0)
        resumed = send_command(endpoint, "resume")
        resumed_at_s = time.monotonic()
        assert resumed["state"] == "playing" and resumed["paused"] is False, resumed
        out, err = proc.communicate(timeout=60)
    finally:
        recorder.stop()
    result = json.loads(out)
    # Nobody answered: the reply ran to its end.
    assert proc.returncode == 4, (err.decode(), result["text"], result["interrupted_at_s"],
                                  result["counters"], result["clock"])  # fmt: skip
    # Silent while paused, loud again after the resume, and no word was lost: the pause is not a
    # stop, and the microphone heard no barge-in meanwhile. The silence is measured in samples
    # around the pause rather than between two clock readings, whose edges a loaded machine
    # blurs (output latency, the monitor's blocks arriving in bursts): CI once found sound within
    # [pause + 0.15 s, resume - 0.05 s]. Unpaused, the reply's longest gap is ~0.5 s.
    quiet_s = recorder.longest_quiet_s(paused_at_s - 0.3, resumed_at_s + 0.3)
    assert quiet_s >= 1.7, (quiet_s, resumed_at_s - paused_at_s, recorder._mic.overflows)
    assert recorder.loud_between(resumed_at_s, resumed_at_s + 3.0)
    assert result["interrupted"] is False and result["skipped"] is False, (
        result["counters"], result["clock"], result["interrupted_at_s"])  # fmt: skip
    assert result["heard_reply"] == result["reply"].strip()
    assert floor().status().holder is None


# -- faults --------------------------------------------------------------------------------------
def test_sigterm_mid_reply_exits_130_and_cleans_up(room) -> None:
    proc = start_vocal("converse", LONG_REPLY)
    wait_speaking(proc)
    children = children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err.decode()
    assert b"terminated by SIGTERM" in err
    assert floor().status().holder is None
    assert os.listdir(load_settings().run_dir) == []
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]


def test_conch_bumped_mid_reply_exits_3(room) -> None:
    proc = start_vocal("converse", LONG_REPLY)
    wait_speaking(proc)
    bump = start_vocal("conch", "bump")
    bump.communicate(timeout=20)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 3, err.decode()
    assert os.listdir(load_settings().run_dir) == []


def _kill_stream(kind: str, pid: int) -> None:
    """Kill `pid`'s PulseAudio stream (`source-output`: its microphone, `sink-input`: its
    output), as when a USB device is unplugged: the stream is gone, not moved elsewhere."""
    listing = subprocess.run(["pactl", "list", f"{kind}s"], check=True, capture_output=True,
                             text=True, timeout=10).stdout  # fmt: skip
    for block in listing.split("\n\n"):
        number = re.search(r"#(\d+)", block)
        if number and f'application.process.id = "{pid}"' in block:
            # pactl has no kill command; pacmd (the same package) has.
            subprocess.run(["pacmd", f"kill-{kind}", number.group(1)], check=True, timeout=10)
            return
    raise AssertionError(f"no {kind} of pid {pid}")


def test_microphone_disappearing_mid_turn_exits_5(room) -> None:
    proc = start_vocal("converse", LONG_REPLY)
    wait_speaking(proc)
    _kill_stream("source-output", proc.pid)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 5, err.decode()
    assert b"microphone" in err
    assert floor().status().holder is None
    assert os.listdir(load_settings().run_dir) == []


def test_output_device_failing_mid_reply_exits_5(room) -> None:
    proc = start_vocal("converse", LONG_REPLY)
    wait_speaking(proc)
    _kill_stream("sink-input", proc.pid)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 5, err.decode()
    assert b"output" in err
    assert floor().status().holder is None
    assert os.listdir(load_settings().run_dir) == []


# -- bad input -----------------------------------------------------------------------------------
def test_bad_input_exits_2_before_touching_audio() -> None:
    from harness.runner import run_vocal

    assert run_vocal("converse", "   ").returncode == 2
    bad = run_vocal("converse", "hello", "--aec", "sometimes")
    assert bad.returncode == 2 and b"'--aec': 'sometimes' is not one of" in bad.stderr
    assert run_vocal("converse", "-", input=b"\x00\x01").returncode == 2
    assert floor().status().holder is None


# -- the end of the answer (issue 16) -------------------------------------------------------------
def corpus_turn(turn_id: str):
    """One real recording from the corpus (tests/harness/corpus.py)."""
    from harness.corpus import ensure_corpus, load_turns

    ensure_corpus()
    return {turn.id: turn for turn in load_turns()}[turn_id]


def test_a_person_pausing_mid_sentence_is_waited_for(room) -> None:
    """A real person's answer with a 1.2 s pause spliced mid-sentence, after the reply: the
    turn model holds the turn open through the pause (the 700 ms window would have cut it) and
    the transcript has the words after it."""
    from harness.corpus import word_error_rate

    turn = corpus_turn("sas-0870.cut11.paused1.2")  # "... consider how much | there might be"
    room.say(turn.path, delay_s=4.0, after="far")
    code, result, err = converse(REPLY, "--no-speech-timeout", "4", timeout_s=90)
    assert code == 0, err
    pauses = result["turn"]["pauses"]
    # Waited through: the person came back after a second or more of silence.
    assert any(p["resumed"] and p["silence_ms"] >= 1000 for p in pauses), pauses
    assert result["end_reason"] != "silence" or len(pauses) > 1
    assert word_error_rate(turn.text, result["text"]) <= 0.35, (turn.text, result["text"])
    assert not words_in(result["text"], REPLY_WORDS), result["text"]


def test_a_finished_answer_ends_after_the_shortest_wait(room) -> None:
    """A whole sentence: the voice, the full stop and the words (which read the reply as the
    question) end the answer after the shortest wait (the transcript and the words read while
    it runs; a loaded machine reads them later, and the pause is held until they are)."""
    turn = corpus_turn("arctic-slt-a0009.complete")
    room.say(turn.path, delay_s=4.0, after="far")
    code, result, err = converse(REPLY, "--no-speech-timeout", "4", timeout_s=90)
    assert code == 0, err
    assert result["end_reason"] == "turn_complete", result["turn"]
    # Sure, or nearly (a model still loading on a loaded machine leaves the other to decide):
    # far from the cap, and ended as soon as the wait was set and had passed.
    last = result["turn"]["pauses"][-1]
    options = EndOfTurnOptions()
    assert last["wait_ms"] < options.max_pause_ms / 2, last
    assert last["wait_ms"] >= options.finished_ms, last
    waited_s = max(last["wait_ms"], last["decided_ms"]) / 1000
    assert result["timings"]["endpoint_s"] < waited_s + 0.3, (result["timings"], last)
