"""`vocal wake` (issue 39) without an audio stream: both detectors on the phrase said by vocal's
own voices and on speech without it, the sound-alike matcher, the words after the phrase, the
floor and mute gates, and `vocal wake --input FILE` end to end.

The bundled detector is pymicro-wakeword's models, heard here in hibari's and piper's voices:
espeak-ng's "hey jarvis" is not heard by them (at best 0.09 over 45 voice and speed variants,
against a cutoff of 0.97) and its "hey mycroft" only now and then (0.89-0.99 around a cutoff of
0.95), so espeak-ng speaks to the any-phrase detector only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from harness.corpus import ensure_corpus, load_clips
from harness.runner import run_vocal
from harness.wake_audio import WakeScene, WakeVoices, wake_scene
from harness.words import word_error_rate
from vocal.audio.vad import EndpointOptions, SileroVad
from vocal.audio.wav import read_wav
from vocal.config import load_settings
from vocal.errors import UsageError
from vocal.stt import load_stt
from vocal.wake.detection import Detection
from vocal.wake.gate import WakeGate, floor_busy
from vocal.wake.micro import MicroWakeDetector, bundled_model
from vocal.wake.recent import RecentAudio
from vocal.wake.request import GATED_TAIL_MS, RequestOptions, hear_request
from vocal.wake.soundalike import after_phrase, find_phrase, sound_key
from vocal.wake.spotter import WhisperPhraseDetector
from vocal.wake.turn import choose_detector
from vocal.wake.waiting import wait_for_phrase

pytest.importorskip("pymicro_wakeword", reason="vocal[wake] (pymicro-wakeword) is not installed")

RATE = 16_000
#: microWakeWord fires 0.05-0.09 s after the last sound of "hey jarvis" and 0.1 s before that of
#: "hey mycroft" (its "t", measured on hibari and piper): the window it must fire in, after it.
FIRES_WITHIN_S = (-0.2, 0.3)
REQUEST = "run the tests"
#: One word in three may differ in a short request heard by tiny.en.
MAX_WER = 0.34


@pytest.fixture(scope="module")
def voices(tts_cache: Path) -> WakeVoices:
    return WakeVoices(tts_cache)


@pytest.fixture(scope="module")
def whisper():
    """The embedded Whisper tiny.en as `vocal wake` loads it, "hey computer" as its prompt."""
    return load_stt("faster-whisper", "tiny.en", hints="hey computer")


def blocks_of(samples: np.ndarray, size: int = 512):
    from vocal.audio.devices import Block

    for start in range(0, samples.shape[0], size):
        yield Block(samples[start : start + size], float(start) / RATE)


def detections(detector, samples: np.ndarray) -> list[Detection]:
    found = [d for b in blocks_of(samples) if (d := detector.feed(b.samples)) is not None]
    last = detector.finish()
    return found + ([last] if last is not None else [])


# -- the sound-alike matcher ---------------------------------------------------------------------
def test_sound_keys_keep_consonants_by_sound() -> None:
    assert sound_key("jarvis") == sound_key("Jarvas") == "JRFS"
    assert sound_key("okay") == sound_key("OK") == "AK"
    assert sound_key("phone") == sound_key("fone") and sound_key("vocal") == sound_key("focal")
    assert sound_key("knock") == "NK" and sound_key("city")[0] == "S"


@pytest.mark.parametrize(
    "text, phrase, after",
    [
        ("Hey Jarvis, run the tests.", "hey jarvis", "run the tests."),
        ("A Jarvis! Run the tests", "hey jarvis", "Run the tests"),  # one slip allowed
        ("Hey, Travis! Run the tests", "hey jarvis", None),  # ... in the call word only
        ("hi jarvis", "hey jarvis", ""),
        ("So, hey Jarvis, stop.", "hey jarvis", "stop."),  # words before it go with it
        ("OK, Nabu. Lights on.", "okay nabu", "Lights on."),
        ("Hey computer... open the config file", "hey computer", "open the config file"),
        ("Hey Jarvis.", "hey jarvis", ""),
        ("Please run the tests.", "hey jarvis", None),
        ("Hey, nobody.", "okay nabu", None),  # a short key allows no slip
        ("Have the jars arrived?", "hey jarvis", None),
    ],
)
def test_after_phrase(text: str, phrase: str, after: str | None) -> None:
    assert after_phrase(text, phrase) == after


def test_sound_alike_edits_fall_in_the_call_word_not_the_name() -> None:
    """Prompted with the phrase, Whisper spells the name as given and slips on "hey": these
    are its slips in benchmarks/RESULTS.md "wake" (21 of 183 detections, none in the name),
    and an edit in the name is how these sentences passed for "hey jarvis" there."""
    for heard in ("they computer", "a computer run the test", "pay computer", "k computer"):
        assert find_phrase(heard, "hey computer") is not None, heard
    for heard in ("k jarvis", "a Jarvis", "pay jarvis", "thing jarvis", "10 jarvis"):
        assert find_phrase(heard, "hey jarvis") is not None, heard
    for heard in ("He serves the static files.", "he drives the release", "Hey service is up"):
        assert find_phrase(heard, "hey jarvis") is None, heard
    assert find_phrase("hey my craft, stop", "hey mycroft") is not None  # the name split
    assert find_phrase("commuter", "computer") is not None  # one word: its edit anywhere


def test_the_closest_run_of_words_wins() -> None:
    match = find_phrase("hey travis, no, hey jarvis, go", "hey jarvis")
    assert match is not None and match.distance == 0 and match.score == 1.0
    assert after_phrase("hey travis, no, hey jarvis, go", "hey jarvis") == "go"


# -- choosing a detector -------------------------------------------------------------------------
def test_bundled_phrases_have_their_model() -> None:
    assert bundled_model("Hey Jarvis!") == "hey_jarvis"
    assert bundled_model("hey_mycroft") == "hey_mycroft"
    assert bundled_model("OK Nabu") == bundled_model("okay nabu") == "okay_nabu"
    assert bundled_model("hey computer") is None
    assert choose_detector("hey jarvis") == ("micro", None)
    assert choose_detector("hey jarvis", "whisper") == ("whisper", None)
    assert choose_detector("hey computer") == ("whisper", None)
    with pytest.raises(UsageError):
        choose_detector("hey computer", "micro")
    with pytest.raises(UsageError):
        choose_detector("hey jarvis", "snowboy")


def test_auto_falls_back_to_whisper_without_the_wake_extra(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pymicro_wakeword" else real(name, *a),
    )
    kind, note = choose_detector("hey jarvis")
    assert kind == "whisper" and "vocal[wake]" in note


# -- the bundled detector ------------------------------------------------------------------------
@pytest.mark.parametrize("phrase", ["hey jarvis", "hey mycroft"])
@pytest.mark.parametrize("voice", ["hibari", "piper-joe"])
def test_micro_hears_its_phrase_in_vocal_voices(
    voices: WakeVoices, voice: str, phrase: str
) -> None:
    said = voices.say(voice, f"{phrase.title()}, {REQUEST}.")
    scene = wake_scene(1.0, voices.say(voice, f"{phrase.title()}."), 2.0, said, 1.0)
    found = detections(MicroWakeDetector(phrase), scene.samples)
    assert len(found) == 2, found  # once each time it is said, not again while it fades
    assert all(d.detector == "micro" and d.score > 0.9 for d in found)
    fired_after_s = found[0].end_frame / RATE - scene.spans[0][1]  # the phrase alone
    assert FIRES_WITHIN_S[0] < fired_after_s < FIRES_WITHIN_S[1], fired_after_s
    start_s, end_s = scene.spans[1]  # the phrase and the request: heard before its end
    assert start_s < found[1].end_frame / RATE < end_s - 0.3


def test_micro_is_not_woken_without_its_phrase(voices: WakeVoices) -> None:
    ensure_corpus()
    clips = [read_wav(c.path).to_mono().resample(RATE).mono_samples for c in load_clips()]
    own = [
        voices.say(v, "Please run the tests and then push the branch.")
        for v in ("hibari", "piper-joe")
    ]
    speech = np.concatenate(
        [part for clip in clips + own for part in (clip, np.zeros(RATE // 2, np.float32))]
    )
    detector = MicroWakeDetector("hey jarvis")
    assert detections(detector, speech) == []
    assert detector.best_score < 0.5


# -- the any-phrase detector ---------------------------------------------------------------------
@pytest.mark.parametrize("voice", ["hibari", "espeak-ng"])
def test_whisper_hears_a_custom_phrase(voices: WakeVoices, whisper, voice: str) -> None:
    scene = wake_scene(1.0, voices.say(voice, "Hey computer."), 1.5)
    found = detections(WhisperPhraseDetector("hey computer", whisper), scene.samples)
    assert len(found) == 1, found
    detection = found[0]
    assert detection.detector == "whisper" and "computer" in detection.heard.lower()
    start_s, end_s = scene.spans[0]
    assert detection.start_frame / RATE < start_s < end_s <= detection.end_frame / RATE + 0.05


def test_whisper_hears_a_phrase_said_in_one_breath_with_the_request(
    voices: WakeVoices, whisper
) -> None:
    said = voices.say("hibari", "Hey computer, please open the config file and set the timeout.")
    scene = wake_scene(1.0, said, 1.5)
    detector = WhisperPhraseDetector("hey computer", whisper)
    found = detections(detector, scene.samples)
    assert len(found) == 1
    # Heard within its window, before the sentence ends.
    assert found[0].end_frame / RATE < scene.spans[0][1] - 0.5, detector.checks


def test_whisper_is_not_woken_by_real_speech(whisper) -> None:
    ensure_corpus()
    clips = load_clips()[:8]  # ~40 s of LibriVox and ARCTIC speech (the full corpus: RESULTS)
    speech = np.concatenate(
        [
            part
            for c in clips
            for part in (
                read_wav(c.path).to_mono().resample(RATE).mono_samples,
                np.zeros(RATE // 2, np.float32),
            )
        ]
    )
    detector = WhisperPhraseDetector("hey computer", whisper)
    assert detections(detector, speech) == []
    assert len(detector.checks) >= len(clips)  # Whisper did listen to every clip


# -- after the phrase ----------------------------------------------------------------------------
def request_after(scene: WakeScene, detector, stt, options: RequestOptions | None = None) -> tuple:
    """Wait for the phrase in `scene`, then hear the request, as `listen_for_wake` does."""
    blocks = blocks_of(scene.samples)
    recent = RecentAudio(8.0)
    gate = WakeGate(lambda: None)
    waited = wait_for_phrase(blocks, detector, gate=gate, recent=recent, lookback_s=1.5)
    assert waited.detection is not None, "the phrase was not heard"
    options = options or RequestOptions(endpoint=EndpointOptions())
    request = hear_request(
        blocks,
        waited.detection,
        phrase=detector.phrase,
        recent=recent,
        stt=stt,
        confidence=SileroVad(),
        options=options,
    )
    return waited, request


@pytest.mark.parametrize("voice", ["hibari", "piper-joe"])
def test_the_request_after_the_phrase(voices: WakeVoices, voice: str) -> None:
    stt = load_stt("faster-whisper", "tiny.en", hints="hey jarvis")
    scene = wake_scene(1.0, voices.say(voice, f"Hey Jarvis, {REQUEST}."), 2.0)
    _, request = request_after(scene, MicroWakeDetector("hey jarvis"), stt)
    assert request.transcribed and request.end_reason == "silence"
    assert word_error_rate(REQUEST, request.text) <= MAX_WER, (request.heard, request.text)
    assert request.speech_end_frame / RATE == pytest.approx(scene.spans[0][1], abs=0.25)


def test_the_phrase_alone_is_an_empty_request(voices: WakeVoices) -> None:
    stt = load_stt("faster-whisper", "tiny.en", hints="hey jarvis")
    scene = wake_scene(1.0, voices.say("hibari", "Hey Jarvis."), 3.0)
    waited, request = request_after(scene, MicroWakeDetector("hey jarvis"), stt)
    assert request.text == "" and request.end_reason == "nothing_after"
    assert not request.transcribed  # nothing said after it: Whisper not asked
    # The pause after the phrase may last first_pause_ms (1.2 s) before it is given up.
    assert (request.end_frame - request.speech_end_frame) / RATE == pytest.approx(1.2, abs=0.05)
    # Silero's end of speech is within nothing_after_ms of where the model fired.
    assert abs(request.speech_end_frame - waited.detection.end_frame) / RATE < 0.25


@pytest.mark.parametrize("pause_s, heard", [(0.9, True), (2.0, False)])
def test_a_request_after_a_pause_for_the_cue(
    voices: WakeVoices, pause_s: float, heard: bool
) -> None:
    stt = load_stt("faster-whisper", "tiny.en", hints="hey jarvis")
    parts = (
        1.0,
        voices.say("hibari", "Hey Jarvis."),
        pause_s,
        voices.say("hibari", "Run the tests."),
        1.5,
    )
    _, request = request_after(wake_scene(*parts), MicroWakeDetector("hey jarvis"), stt)
    if heard:
        assert word_error_rate(REQUEST, request.text) <= MAX_WER, (request.heard, request.text)
    else:
        assert request.text == "" and request.end_reason == "nothing_after"


def test_the_any_phrase_path_cuts_the_request_from_its_own_transcript(
    voices: WakeVoices, whisper
) -> None:
    scene = wake_scene(
        1.0,
        voices.say("hibari", "Hey computer."),
        0.5,
        voices.say("hibari", "Open the config file."),
        2.0,
    )
    _, request = request_after(scene, WhisperPhraseDetector("hey computer", whisper), whisper)
    assert word_error_rate("open the config file", request.text) <= MAX_WER, request


#: Other people talking, as benchmarks/wake's chatter room has them: under the person's speech.
CHATTER_UNDER_DB = 15.0


@pytest.fixture(scope="module")
def babble() -> np.ndarray:
    """Six corpus voices talking at once (the room harness's chatter), at unit RMS."""
    from harness.room_effects import chatter_loop, corpus_speech

    ensure_corpus()
    return chatter_loop(corpus_speech(), seed=11).astype(np.float32)


def among_talkers(scene: WakeScene, said: np.ndarray, babble: np.ndarray) -> WakeScene:
    level = np.float32(np.sqrt(np.mean(said**2)) / 10 ** (CHATTER_UNDER_DB / 20))
    samples = scene.samples + np.resize(babble, scene.samples.shape[0]) * level
    return WakeScene(samples.astype(np.float32), scene.spans)


def test_a_request_among_other_talkers_ends_when_the_person_stops(
    voices: WakeVoices, babble: np.ndarray
) -> None:
    """Silero calls babble speech: without the gate the request runs on into the talk after
    it (in benchmarks/wake's chatter room most ran to the input's end; live, to
    `max_seconds`); gated by the level of the stream heard before the phrase, it ends at the
    person's pause, their words kept."""
    stt = load_stt("faster-whisper", "tiny.en", hints="hey jarvis")
    said = voices.say("hibari", f"Hey Jarvis, {REQUEST}.")
    scene = among_talkers(wake_scene(3.0, said, 5.0), said, babble)
    last_sound = scene.spans[0][1]
    ends = {}
    for margin_db in (10.0, None):
        options = RequestOptions(endpoint=EndpointOptions(), room_margin_db=margin_db)
        _, request = request_after(scene, MicroWakeDetector("hey jarvis"), stt, options)
        assert word_error_rate(REQUEST, request.text) <= MAX_WER, (request.heard, request.text)
        ends[margin_db] = request.end_frame / RATE - last_sound
        if margin_db is None:
            assert request.room_floor_db is None and request.room_gated_chunks == 0
            continue
        assert request.end_reason == "silence", request
        assert request.room_floor_db is not None and request.room_gated_chunks > 0
        # What Whisper heard reaches past the word's soft end, which the gate held back.
        heard_to_s = request.speech_end_frame / RATE + (200 + GATED_TAIL_MS) / 1000
        assert heard_to_s >= last_sound, (request.speech_end_frame / RATE, last_sound)
    # Gated, the turn ended within the silence window of the last word; ungated, the babble
    # after it held the endpointer on.
    assert ends[10.0] <= 1.0 and ends[None] - ends[10.0] >= 0.5, ends


def test_the_room_gate_is_read_before_the_phrase_and_only_where_the_phrase_stood_out() -> None:
    """`room_gate_before`: the floor is the stream before the phrase; no gate with too little
    of it kept, where Silero did not call the room speech (a fan: nothing to hold back), nor
    where the phrase was no louder than the room (the person far away, or talking all
    along)."""
    from harness.listen_audio import noise
    from vocal.wake.request import room_gate_before

    def heard(*parts: np.ndarray) -> RecentAudio:
        recent = RecentAudio(8.0)
        for part in parts:
            recent.add(part)
        return recent

    room, loud = noise(2.0, -40.0, seed=1), noise(0.8, -20.0, seed=2)
    phrase_end = room.shape[0] + loud.shape[0]
    micro = Detection("micro", 0.99, phrase_end)  # began PHRASE_S before its end
    gate = room_gate_before(micro, heard(room, loud), 10.0)
    assert gate is not None and gate.floor_db == pytest.approx(-40.0, abs=0.5)
    assert gate.gate_db == pytest.approx(-30.0, abs=0.5)
    whisper = Detection("whisper", 0.9, phrase_end, start_frame=room.shape[0])
    assert room_gate_before(whisper, heard(room, loud), 10.0) is not None
    assert room_gate_before(micro, heard(room, loud), None) is None  # the gate off
    talkers, fan = (lambda chunk: 0.9), (lambda chunk: 0.1)
    assert room_gate_before(micro, heard(room, loud), 10.0, talkers) is not None
    assert room_gate_before(micro, heard(room, loud), 10.0, fan) is None
    short = noise(0.3, -40.0, seed=3)
    early = Detection("micro", 0.99, short.shape[0] + loud.shape[0])
    assert room_gate_before(early, heard(short, loud), 10.0) is None  # too little room heard
    near = noise(0.8, -33.0, seed=4)  # 7 dB above the room: no gate
    assert room_gate_before(micro, heard(room, near), 10.0) is None


# -- the gates -----------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_gate_ignores_a_phrase_while_vocal_is_busy_and_just_after() -> None:
    clock, state, asked = Clock(), {"busy": None}, []

    def probe() -> str | None:
        asked.append(clock.now)
        return state["busy"]

    gate = WakeGate(probe, poll_s=0.2, after_busy_s=0.5, clock=clock)
    assert gate.blocked(since_s=99.0) is None
    state["busy"] = "session-a holds the floor"
    clock.now += 0.1
    assert gate.poll() is None  # not due: read at most every poll_s
    clock.now += 0.15
    assert gate.poll() == "session-a holds the floor"
    state["busy"] = None
    clock.now += 0.1
    # It let go unseen since the last poll: a phrase begun 0.1 s ago is the reply's tail.
    assert gate.blocked(since_s=clock.now - 0.1) == "session-a holds the floor (just before)"
    clock.now += 1.0
    assert gate.blocked(since_s=clock.now - 0.3) is None
    assert len(asked) == 4  # first phrase, the due poll, and the two phrases (forced)


def test_floor_busy_reads_mute_the_conch_and_running_turns(vocal_home: Path) -> None:
    from vocal.floor.conch.queue import Conch
    from vocal.floor.gates import set_muted

    settings = load_settings()
    assert floor_busy(settings) is None
    set_muted(vocal_home, True)
    assert floor_busy(settings) == "vocal is muted"
    set_muted(vocal_home, False)
    conch = Conch.from_settings(settings)
    held = conch.acquire(session="agent-a")
    assert floor_busy(settings) == "agent-a holds the floor"
    conch.release(held.token)
    assert floor_busy(settings) is None
    run_dir = settings.run_dir
    run_dir.mkdir(parents=True, mode=0o700)
    (run_dir / f"{os.getpid()}.json").write_text(json.dumps({"pid": os.getpid(), "kind": "speak"}))
    assert floor_busy(settings) == f"vocal speak (pid {os.getpid()}) is running"


class Scripted:
    """A detector that hears the phrase at the given stream frames."""

    name, phrase = "micro", "hey jarvis"

    def __init__(self, *frames: int) -> None:
        self.frames, self.fed = list(frames), 0

    def feed(self, samples: np.ndarray) -> Detection | None:
        self.fed += samples.shape[0]
        if self.frames and self.fed >= self.frames[0]:
            return Detection("micro", 0.99, self.frames.pop(0))
        return None

    def finish(self) -> Detection | None:
        return None

    def close(self) -> None:
        pass


def test_a_phrase_heard_while_busy_is_ignored_and_the_next_one_wakes() -> None:
    busy_until = {"frame": 3 * RATE}
    fed = {"frames": 0}

    def probe() -> str | None:
        return "vocal is muted" if fed["frames"] < busy_until["frame"] else None

    clock = Clock()
    gate = WakeGate(probe, poll_s=0.2, after_busy_s=0.5, clock=clock)
    blocks = list(blocks_of(np.zeros(10 * RATE, np.float32)))
    ignored = []

    def stream():
        for block in blocks:
            fed["frames"] += block.samples.shape[0]
            clock.now = 100.0 + fed["frames"] / RATE
            yield block.__class__(block.samples, clock.now)

    detector = Scripted(2 * RATE, 6 * RATE)
    waited = wait_for_phrase(
        stream(),
        detector,
        gate=gate,
        recent=RecentAudio(8.0),
        lookback_s=1.0,
        on_ignored=ignored.append,
    )
    assert waited.end_reason == "phrase" and waited.detection.end_frame == 6 * RATE
    assert [e["reason"] for e in ignored] == ["vocal is muted"] and ignored[0]["at_s"] == 2.0


def wait_on(seconds: float, timeout_s: float) -> tuple[str, float]:
    silence = np.zeros(round(seconds * RATE), np.float32)
    gate = WakeGate(lambda: None)
    waited = wait_for_phrase(
        blocks_of(silence),
        Scripted(),
        gate=gate,
        recent=RecentAudio(8.0),
        lookback_s=1.0,
        timeout_s=timeout_s,
    )
    return waited.end_reason, waited.frames / RATE


def test_the_wait_times_out_on_the_stream_clock() -> None:
    reason, listened_s = wait_on(5.0, timeout_s=2.0)
    assert reason == "timeout" and listened_s == pytest.approx(2.0, abs=0.04)
    assert wait_on(1.0, timeout_s=2.0)[0] == "end_of_input"


def test_recent_audio_keeps_the_last_seconds() -> None:
    recent = RecentAudio(1.0)
    starts = range(0, 3 * RATE, 512)
    for start in starts:
        recent.add(np.arange(start, start + 512, dtype=np.float32))
    assert recent.end_frame == len(starts) * 512
    assert recent.end_frame - recent.start_frame >= RATE
    span = recent.span(recent.end_frame - 1000, recent.end_frame - 10)
    assert span[0] == recent.end_frame - 1000 and span.shape[0] == 990
    assert recent.span(0, 100).shape[0] == 0  # long gone


# -- the command ---------------------------------------------------------------------------------
def wake_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict | None, str]:
    result = run_vocal("wake", "--json", *args, env=env)
    out = result.stdout.decode().strip()
    return result.returncode, (json.loads(out) if out else None), result.stderr.decode()


def test_wake_prints_the_request_after_the_bundled_phrase(
    voices: WakeVoices, tmp_path: Path
) -> None:
    scene = wake_scene(1.5, voices.say("hibari", f"Hey Jarvis, {REQUEST}."), 2.0)
    code, out, err = wake_json("--input", str(scene.write(tmp_path / "in.wav")))
    assert code == 0, err
    assert out["woke"] and out["detector"] == "micro" and out["phrase"] == "hey jarvis"
    assert out["score"] > 0.9 and out["ignored"] == []
    assert word_error_rate(REQUEST, out["text"]) <= MAX_WER, out
    assert 1.5 < out["woke_at_s"] < scene.spans[0][1]  # heard before the request ended
    plain = run_vocal("wake", "--input", str(tmp_path / "in.wav"))
    assert plain.returncode == 0 and word_error_rate(REQUEST, plain.stdout.decode()) <= MAX_WER


def test_wake_hears_a_custom_phrase(voices: WakeVoices, tmp_path: Path) -> None:
    """The phrase from the wake_phrase setting (here its environment variable)."""
    scene = wake_scene(1.0, voices.say("hibari", "Hey computer, open the config file."), 2.0)
    path = scene.write(tmp_path / "in.wav")
    code, out, err = wake_json("--input", str(path), env={"VOCAL_WAKE_PHRASE": "Hey  computer"})
    assert code == 0, err
    assert out["detector"] == "whisper" and out["phrase"] == "Hey computer"
    assert word_error_rate("open the config file", out["text"]) <= MAX_WER, out
    # The request began in the stretch Whisper heard: its end is the silence window's, not
    # the longer first pause after a phrase said alone.
    assert out["end_reason"] == "silence"
    durations = out["durations"]
    assert durations["listened_s"] - durations["speech_end_s"] == pytest.approx(0.7, abs=0.1)


def test_wake_exits_4_when_the_phrase_never_comes(voices: WakeVoices, tmp_path: Path) -> None:
    scene = wake_scene(
        1.0, voices.say("hibari", "Please run the tests and then push the branch."), 2.0
    )
    path = scene.write(tmp_path / "in.wav")
    result = run_vocal("wake", "--input", str(path), "--timeout", "2")
    assert result.returncode == 4 and result.stdout == b""
    assert b"was not heard in 2 s" in result.stderr
    code, out, _ = wake_json("--input", str(path))  # the whole file: the input ends
    assert code == 4 and out["woke"] is False and out["text"] is None
    assert out["end_reason"] == "end_of_input"
    assert out["durations"]["listened_s"] == pytest.approx(scene.samples.shape[0] / RATE, abs=0.05)


def test_wake_ignores_the_phrase_while_muted(voices: WakeVoices, tmp_path: Path) -> None:
    scene = wake_scene(1.0, voices.say("hibari", "Hey Jarvis."), 1.5)
    path = scene.write(tmp_path / "in.wav")
    assert run_vocal("mute").returncode == 0
    code, out, err = wake_json("--input", str(path))
    assert code == 4 and [e["reason"] for e in out["ignored"]] == ["vocal is muted"]
    assert "ignored: vocal is muted" in err
    assert run_vocal("unmute").returncode == 0
    assert wake_json("--input", str(path))[0] == 0


@pytest.mark.parametrize(
    "args",
    [
        [""],
        ["hey computer", "--detector", "micro"],
        ["--detector", "snowboy"],
        ["--timeout", "0"],
        ["--timeout", "nan"],
    ],
)
def test_wake_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    wav = wake_scene(0.5).write(tmp_path / "x.wav")
    result = run_vocal("wake", *args, "--input", str(wav))
    assert result.returncode == 2, result.stderr
    assert result.stderr.decode().count("\n") <= 2
