"""The end-of-turn stage (vocal.hearing.endofturn): the text rule, the combination, the features,
the real Smart Turn model, and the judge driving a real `Endpointer`.

The judge's logic is driven with a deterministic VAD confidence (one number per chunk) and
given signals (a P(complete), a transcript), so every path is checked exactly; the model
itself is the real ONNX file vocal's package ships (src/vocal/hearing/models). Real speech is
judged in test_turns_corpus.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from vocal.audio.vad import CHUNK_FRAMES, Endpointer, EndpointOptions, EndReason
from vocal.errors import EngineError
from vocal.hearing.endofturn import (
    EndOfTurnOptions,
    PauseJudge,
    Signals,
    Verdict,
    text_verdict,
    wait_for,
)
from vocal.hearing.rhythm import Rhythm
from vocal.hearing.smart_turn import (
    MODEL_ENV,
    PACKAGED_MODEL,
    SmartTurn,
    find_turn_model,
    log_mel_features,
)

RATE = 16_000
CHUNK_MS = CHUNK_FRAMES * 1000 / RATE


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Go forward ten meters.", Verdict.COMPLETE),
        ("Yes.", Verdict.COMPLETE),
        ("What should I do next?", Verdict.COMPLETE),
        ("I think we should.", Verdict.UNFINISHED),  # a modal: the issue's own example
        ("He has read many", Verdict.UNDECIDED),  # "many" can end one: left to the audio
        ("which forced the", Verdict.UNFINISHED),
        ("Open the file and", Verdict.UNFINISHED),
        ("Let me think,", Verdict.UNFINISHED),
        ("So the plan is...", Verdict.UNFINISHED),
        ("the end of", Verdict.UNFINISHED),
        ("okay", Verdict.UNDECIDED),  # no punctuation, no telling word
        ("", Verdict.UNDECIDED),
        ("...", Verdict.UNDECIDED),
    ],
)
def test_text_verdict(text: str, verdict: Verdict) -> None:
    assert text_verdict(text) is verdict


OPTIONS = EndOfTurnOptions()
SURE = Signals(audio_p=0.99, text=Verdict.COMPLETE, words_p=0.9)
CAP = OPTIONS.max_pause_ms


@pytest.mark.parametrize(
    ("signals", "wait_ms", "verdict"),
    [
        (SURE, OPTIONS.finished_ms, Verdict.COMPLETE),  # every signal says finished
        (Signals(0.99, Verdict.UNFINISHED, None), CAP, Verdict.UNFINISHED),  # "... and the"
        (Signals(0.99, Verdict.COMPLETE, 0.001), CAP, Verdict.UNFINISHED),  # the words veto
        (Signals(None, None, None), 700, Verdict.UNDECIDED),  # nothing known: the window
        (Signals(None, Verdict.COMPLETE, None), 700, Verdict.UNDECIDED),  # a full stop alone
        (Signals(0.1, Verdict.COMPLETE, 0.9), CAP, Verdict.UNDECIDED),  # the voice: unfinished
        # No full stop ("ten of clubs"): half as sure, the wait midway on the log scale.
        (
            Signals(0.99, Verdict.UNDECIDED, 0.9),
            (OPTIONS.finished_ms * CAP) ** 0.5,
            Verdict.UNDECIDED,
        ),
    ],
)
def test_wait_for(signals: Signals, wait_ms: float, verdict: Verdict) -> None:
    got_ms, got_verdict = wait_for(signals, OPTIONS, silence_ms=700)
    assert got_ms == pytest.approx(wait_ms) and got_verdict is verdict


@pytest.mark.parametrize("field", ["audio_p", "words_p"])
def test_the_surer_a_signal_the_shorter_the_wait(field: str) -> None:
    """Graded, not a switch: the wait never grows as one signal grows surer, and it moves
    over the whole range between the shortest wait and the cap."""
    band = {
        "audio_p": np.linspace(OPTIONS.audio_unfinished, OPTIONS.audio_finished, 21),
        "words_p": np.geomspace(OPTIONS.words_unfinished, OPTIONS.words_finished, 21),
    }[field]
    waits = []
    for value in [0.0, *band, 1.0]:
        signals = Signals(**{**SURE.__dict__, field: float(value)})
        waits.append(wait_for(signals, OPTIONS, silence_ms=700)[0])
    assert all(a >= b for a, b in zip(waits, waits[1:], strict=False))
    assert waits[0] == CAP and waits[-1] == OPTIONS.finished_ms
    assert len(set(waits)) > 10


@pytest.mark.parametrize(
    "bad",
    [
        {"audio_finished": float("nan")},
        {"audio_unfinished": 1.5},
        {"audio_unfinished": 0.9, "audio_finished": 0.5},
        {"words_unfinished": 0.0},
        {"check_ms": -1},
        {"check_ms": 3000, "max_pause_ms": 2000},
        {"finished_ms": 0},
        {"finished_ms": 3000},
    ],
)
def test_options_refuse_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        EndOfTurnOptions(**bad)


def test_features_match_whispers_feature_extractor() -> None:
    """The numpy features equal faster-whisper's Whisper feature extractor on the normalized,
    8 s window (Smart Turn v3's input)."""
    from faster_whisper.feature_extractor import FeatureExtractor

    samples = (np.random.default_rng(0).standard_normal(3 * RATE) * 0.1).astype(np.float32)
    window = np.pad(samples, (8 * RATE - samples.shape[0], 0))
    normalized = (window - window.mean()) / np.sqrt(window.var() + 1e-7)
    reference = FeatureExtractor(feature_size=80, chunk_length=8)(normalized, padding=0)
    features = log_mel_features(samples)
    assert features.shape == (80, 800) and features.dtype == np.float32
    np.testing.assert_allclose(features, reference[:, :800], atol=1e-5)
    # Longer input keeps only its last 8 s.
    longer = np.concatenate([np.ones(RATE, np.float32), window])
    np.testing.assert_allclose(log_mel_features(longer), features, atol=1e-5)


def test_smart_turn_model_loads_and_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MODEL_ENV, raising=False)
    model = SmartTurn()
    assert model.model_path == find_turn_model() == PACKAGED_MODEL
    p = model.probability(np.zeros(RATE, np.float32))
    assert 0.0 <= p <= 1.0


def test_the_packaged_model_is_the_file_its_readme_names() -> None:
    # Provenance and licence sit beside the model; the sha256 ties the README to the bytes.
    folder = PACKAGED_MODEL.parent
    digest = hashlib.sha256(PACKAGED_MODEL.read_bytes()).hexdigest()
    assert digest in (folder / "README.md").read_text()
    assert "BSD 2-Clause License" in (folder / "LICENSE").read_text()


def test_the_model_path_variable_overrides_the_packaged_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = tmp_path / "turn.onnx"  # found, not loaded: SmartTurn checks what it loads
    other.touch()
    monkeypatch.setenv(MODEL_ENV, str(other))
    assert find_turn_model() == other
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "missing.onnx"))
    with pytest.raises(EngineError, match="no such file"):
        find_turn_model()


# -- the judge on a real endpointer --------------------------------------------------------------
def chunks(*levels: float) -> np.ndarray:
    return np.repeat(np.asarray(levels, np.float32), CHUNK_FRAMES)


class Model:
    """A fixed P(complete), or P(end) of the words, per pause in order (the real models are
    tested above and in test_words_model.py)."""

    def __init__(self, *probabilities: float) -> None:
        self.probabilities = list(probabilities)
        self.calls: list[tuple[str, str | None]] = []

    def probability(self, samples: np.ndarray) -> float:
        self.calls.append(("audio", None))
        return self.probabilities.pop(0)

    def p_end(self, words: str, context: str | None = None) -> float:
        self.calls.append((words, context))
        return self.probabilities.pop(0)


class Texts:
    """Early transcripts by pause; `arrive_after` polls before a live text is there."""

    def __init__(self, *texts: str | None, arrive_after: int = 0) -> None:
        self.texts = list(texts)
        self.arrive_after = arrive_after
        self.polls = 0
        self.keys: list[tuple[int, int]] = []

    def text(self, key: tuple[int, int], wait: bool) -> tuple[bool, str | None]:
        if key not in self.keys:
            self.keys.append(key)
            self.polls = 0
        index = self.keys.index(key)
        if index >= len(self.texts) or self.texts[index] is None:
            return False, None
        self.polls += 1
        if not wait and self.polls <= self.arrive_after:
            return True, None
        return True, self.texts[index]


def judged(samples: np.ndarray, model: Model | None, texts: Texts, *, wait: bool = True,
           words: Model | None = None, rhythm: Rhythm | None = None,
           context: str | None = None) -> tuple[Endpointer, PauseJudge]:  # fmt: skip
    endpointer = Endpointer(lambda chunk: float(chunk[0]), EndpointOptions(min_silence_ms=700))
    judge = PauseJudge(OPTIONS, model=lambda: model, texts=texts, words=lambda: words,
                       context=context, rhythm=rhythm, wait=wait)  # fmt: skip
    for start in range(0, samples.shape[0], CHUNK_FRAMES):  # block by block, as record() does
        endpointer.feed(samples[start : start + CHUNK_FRAMES])
        judge.update(endpointer)
        if endpointer.done:
            break
    judge.close()
    return endpointer, judge


SPEECH = [0.9] * 20


def silence_chunks(ms: float) -> list[float]:
    return [0.0] * int(-(-ms // CHUNK_MS))


def ended_after_ms(e: Endpointer) -> float:
    return (e.end_frame - e.speech_end_frame) * 1000 / RATE


def test_a_sure_turn_ends_after_the_shortest_wait_not_at_the_check() -> None:
    words = Model(0.9)
    e, judge = judged(chunks(*SPEECH, *silence_chunks(3000)), Model(0.99), Texts("Go ahead."),
                      words=words, context="Shall I?")  # fmt: skip
    assert e.end_reason is EndReason.TURN_COMPLETE
    assert OPTIONS.finished_ms <= ended_after_ms(e) < OPTIONS.finished_ms + CHUNK_MS
    pause = judge.pauses[0]
    assert pause.verdict == "complete" and pause.audio_p == 0.99 and pause.words_p == 0.9
    assert words.calls == [("Go ahead.", "Shall I?")]  # the agent's line is the context


def test_unfinished_turn_waits_through_a_pause_and_the_cap_ends_it() -> None:
    samples = chunks(*SPEECH, *silence_chunks(1200), *SPEECH, *silence_chunks(4000))
    e, judge = judged(samples, Model(0.1, 0.05), Texts("I think we should", "the end"))
    assert [p.verdict for p in judge.pauses] == ["unfinished", "undecided"]
    assert judge.pauses[0].resumed and not judge.pauses[1].resumed
    assert e.end_reason is EndReason.TURN_COMPLETE  # a graded wait, at the cap here
    assert CAP <= ended_after_ms(e) < CAP + CHUNK_MS


def test_the_words_hold_a_pause_that_voice_and_full_stop_call_finished() -> None:
    """'Merge the pull request and then.' sounds final and has its full stop; the words'
    model knows better, and the pause is waited through to the cap."""
    samples = chunks(*SPEECH, *silence_chunks(1500), *SPEECH, *silence_chunks(3000))
    e, judge = judged(samples, Model(0.95, 0.99), Texts("Merge it and then.", "Close it."),
                      words=Model(0.002, 0.9))  # fmt: skip
    assert judge.pauses[0].verdict == "unfinished" and judge.pauses[0].resumed
    assert e.end_reason is EndReason.TURN_COMPLETE and len(judge.pauses) == 2


def test_a_last_word_that_cannot_end_a_sentence_is_never_asked_of_the_words() -> None:
    words = Model()
    e, judge = judged(chunks(*SPEECH, *silence_chunks(3000)), Model(0.95),
                      Texts("which forced the"), words=words)  # fmt: skip
    assert judge.pauses[0].verdict == "unfinished" and judge.pauses[0].text_verdict == "unfinished"
    assert e.end_reason is EndReason.MAX_PAUSE and words.calls == []


def test_live_judge_holds_until_the_text_and_the_words_arrive() -> None:
    """Live: no wait is set until the text is there (three blocks late here) and the words'
    model has read it; the turn then ends as soon as the silence has lasted the wait."""
    e, judge = judged(chunks(*SPEECH, *silence_chunks(3000)), Model(0.99),
                      Texts("Go ahead.", arrive_after=3), words=Model(0.9), wait=False)  # fmt: skip
    assert e.end_reason is EndReason.TURN_COMPLETE
    decided_ms = judge.pauses[0].decided_ms
    assert decided_ms is not None and decided_ms >= OPTIONS.check_ms + 2 * CHUNK_MS
    assert ended_after_ms(e) < max(decided_ms, OPTIONS.finished_ms) + 2 * CHUNK_MS


def test_no_model_and_no_transcript_is_the_silence_window() -> None:
    e, judge = judged(chunks(*SPEECH, *silence_chunks(3000)), None, Texts(None))
    assert e.end_reason is EndReason.TURN_COMPLETE
    assert 700 <= ended_after_ms(e) < 700 + CHUNK_MS
    assert judge.pauses[0].audio_p is None and judge.pauses[0].verdict == "undecided"


def test_speech_resuming_during_a_hold_keeps_the_turn() -> None:
    samples = chunks(*SPEECH, *silence_chunks(2000), *SPEECH, *silence_chunks(1000))
    e, judge = judged(samples, Model(0.1, 0.99), Texts("and then", "we are done."),
                      words=Model(0.9))  # fmt: skip
    assert e.end_reason is EndReason.TURN_COMPLETE
    assert e.speech_end_frame == (20 + len(silence_chunks(2000)) + 20) * CHUNK_FRAMES
    assert judge.pauses[-1].verdict == "complete"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Go ahead.", EndReason.TURN_COMPLETE),
        ("and then the", EndReason.MAX_PAUSE),
    ],
)
def test_a_transcript_slower_than_the_wait_is_still_waited_for(
    text: str, reason: EndReason
) -> None:
    """Live, on a loaded machine Whisper can take longer than the shortest wait: the pause is
    held open until the text arrives (~1 s here), and then its wait applies."""
    e, judge = judged(chunks(*SPEECH, *silence_chunks(4000)), Model(0.99),
                      Texts(text, arrive_after=30), words=Model(0.9), wait=False)  # fmt: skip
    assert e.end_reason is reason, judge.pauses
    decided_ms = judge.pauses[0].decided_ms
    assert decided_ms is not None and decided_ms > 900
    if reason is not EndReason.MAX_PAUSE:  # ended as soon as the text was read
        assert ended_after_ms(e) < decided_ms + 2 * CHUNK_MS


def test_the_persons_long_pauses_lengthen_the_wait() -> None:
    """A speaker who came back after 0.9 s of silence is given longer than that at the next
    sure pause (the rhythm's floor), where a new speaker would have been cut at the shortest
    wait; and the turn's pauses are what the rhythm keeps."""
    samples = chunks(*SPEECH, *silence_chunks(900), *SPEECH, *silence_chunks(3000))
    rhythm = Rhythm()
    e, judge = judged(samples, Model(0.1, 0.99), Texts("I went to", "the shop."),
                      words=Model(0.9), rhythm=rhythm)  # fmt: skip
    assert judge.pauses[0].resumed and rhythm.resumed_ms and rhythm.longest_ms >= 900
    assert ended_after_ms(e) >= 1.25 * 900
    assert judge.pauses[1].rhythm_floor_ms == pytest.approx(1.25 * rhythm.longest_ms)
