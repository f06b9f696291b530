"""Transcripts said once (issue 36): the detector of a phrase said twice that the person did
not say twice (pure logic), and the engines' retry and repair on real loops of tiny.en.

The loops are real: tiny.en, in vocal's short encoder window, hears espeak-ng saying "open the
config file" (en-us, 160 words a minute, 0.3 s of silence on each side) as "Open the config
file Open the config file" (it did for every tail from 0.2 to 0.5 s, with and without a
-70 dBFS noise floor), and a held-out LibriVox recording at a pause as its last clause twice;
`benchmarks/decode --parts repeats` lists every loop found on the corpus and the spoken
commands."""

from __future__ import annotations

import pytest

from harness.listen_audio import join, silence, trimmed
from harness.words import word_error_rate
from vocal.audio.wav import Audio
from vocal.stt.repeats import find_repeat, find_repeats, mend, remove_repeats

LOOPED = [
    # (what Whisper printed, what it should have printed)
    ("Run the tests. Run the tests.", "Run the tests."),
    ("7 of clubs 7 of clubs", "7 of clubs"),
    ("run the test and if not run the test and if not", "run the test and if not"),
    ("Open the config file Open the config file", "Open the config file"),
    ("Stop the server. Stop the server. Stop the server.", "Stop the server."),
    (
        "Okay, fix the lint errors, fix the lint errors and push.",
        "Okay, fix the lint errors and push.",
    ),
    ("Open the file, open the file.", "Open the file."),
    ("Merge it, merge it!", "Merge it!"),
]
SAID = [
    # Things people say: one word again, two-word interjections, repeated words apart.
    "No, no.",
    "Yes yes yes, go ahead.",
    "That is very very good.",
    "Bye bye.",
    "No no no no, not that one.",
    "Go, go, go!",
    "Thank you, thank you.",
    "Hold on, hold on, let me think.",
    "Come on come on come on.",
    "Stop. Stop.",
    "Had had the wrong idea.",
    "Set x to x plus one.",
    "Eight of spades, four of clubs, seven of hearts.",
    "Over and over again, step by step, one by one.",
    "The test of the test suite failed.",
    "Open the file and then open the other file.",
]


@pytest.mark.parametrize(("heard", "meant"), LOOPED)
def test_a_phrase_said_twice_is_found_and_said_once(heard: str, meant: str) -> None:
    assert find_repeat(heard) is not None, heard
    assert remove_repeats(heard) == meant
    assert find_repeat(remove_repeats(heard)) is None


@pytest.mark.parametrize("text", SAID)
def test_what_people_say_twice_stays(text: str) -> None:
    assert find_repeat(text) is None, text
    assert remove_repeats(text) == text


def test_the_repeat_found_says_where_and_how_often() -> None:
    repeat = find_repeat("Please stop the server. Stop the server. Stop the server now.")
    assert repeat is not None
    assert (repeat.start, repeat.length, repeat.count, repeat.phrase) == (
        1,
        3,
        3,
        "stop the server.",
    )
    assert repeat.end == 10
    # The shortest unit that repeats: "a b" three times, not "a b a b" and the rest.
    assert [(r.length, r.count) for r in find_repeats("red blue red blue red blue")] == [(2, 3)]
    # Two separate loops in one transcript are both cut.
    assert (
        remove_repeats("Close it close it and then push it push it.")
        == "Close it and then push it."
    )


def test_an_interjection_said_over_and_over_is_a_loop() -> None:
    assert find_repeat("Thank you. Thank you. Thank you.") is None
    assert find_repeat("Thank you. " * 4) is not None, "four times is Whisper, not a person"


def test_a_retry_decides_what_is_kept() -> None:
    looped = "Run the tests. Run the tests."
    assert mend(looped, "Run the tests.") == ("Run the tests.", "retried")
    assert mend(looped, None) == ("Run the tests.", "removed"), "no retry: cut to one copy"
    assert mend(looped, looped) == ("Run the tests.", "removed"), "the retry looped too"
    # A two-word phrase that the retry says twice again was said twice: kept as heard.
    said = "Declare a pointer to pointer to char."
    assert find_repeat(said) is not None
    assert mend(said, said) == (said, None)
    assert mend(said, "Declare a pointer to char.") == ("Declare a pointer to char.", "retried")


def test_the_corpus_references_hold_no_repeat() -> None:
    """Real sentences (readers, ARCTIC, Sphinx's test speakers): none is flagged."""
    from harness.corpus import load_clips

    clips = load_clips()
    assert clips
    assert [c.text for c in clips if find_repeat(c.text)] == []


# -- the engines on a real loop --------------------------------------------------------------
LOOP_TEXT = "open the config file"


@pytest.fixture(scope="module")
def looping_audio():
    return join(silence(0.3), trimmed(LOOP_TEXT), silence(0.3))


def test_faster_whisper_retries_a_looping_decode(looping_audio) -> None:
    from vocal.stt import load_stt

    result = load_stt("faster-whisper").transcribe(looping_audio)
    segment = result.segments[0]
    assert find_repeat(segment["heard"]) is not None, "tiny.en looped: the first decode repeats"
    assert result.repaired == "retried"
    assert find_repeat(result.text) is None, result.text
    assert word_error_rate(LOOP_TEXT, result.text) == 0, result.text


def test_a_retry_that_still_repeats_is_cut_to_one_copy(
    looping_audio, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vocal.stt import faster_whisper, load_stt

    monkeypatch.setattr(faster_whisper, "RETRY_REPETITION_PENALTY", 1.0)  # the same decode
    result = load_stt("faster-whisper").transcribe(looping_audio)
    assert result.repaired == "removed"
    assert find_repeat(result.text) is None, result.text
    assert word_error_rate(LOOP_TEXT, result.text) == 0, result.text


def test_a_held_out_recording_that_looped_is_heard_once() -> None:
    """A LibriVox reader (held out of all tuning), with a 2 s pause spliced mid-sentence: at
    its third pause vocal's endpointer hands the early transcriber "Pity the world, or else
    this glutton be, To eat the world's due", which tiny.en decoded as "... to eat the
    world's do to eat the world's do"."""
    from harness.corpus import ensure_corpus, load_turns
    from vocal.audio.file_devices import WavSource
    from vocal.audio.vad import EndpointOptions
    from vocal.hearing.listening import ListenOptions, record
    from vocal.stt import load_stt

    ensure_corpus()
    (turn,) = [t for t in load_turns("paused", "heldout") if t.id == "sonnet1-13-14.cut8.paused2.0"]
    at_pauses = []
    record(
        WavSource(turn.path),
        options=ListenOptions(endpoint=EndpointOptions(min_silence_ms=30_000)),
        on_pause=lambda endpointer: at_pauses.append(endpointer.utterance().copy()),
    )
    result = load_stt("faster-whisper").transcribe(Audio(at_pauses[2], 16_000))
    assert find_repeat(result.segments[0]["heard"]) is not None, "tiny.en looped"
    assert result.repaired == "retried"
    assert find_repeat(result.text) is None, result.text
    said = "Pity the world, or else this glutton be, To eat the world's due"
    assert word_error_rate(said, result.text) <= 0.2, result.text


@pytest.mark.parametrize(
    ("said", "kept", "how"),
    [
        # Said twice by the person: the retry agrees, so the two-word phrase stays.
        ("declare a pointer to pointer to char", "pointer to pointer to char", None),
        # A three-word phrase said twice is cut all the same: people rarely do, loops do.
        ("open the file, open the file", "Open the file.", "removed"),
    ],
)
def test_what_the_retry_still_repeats(said: str, kept: str, how: str | None) -> None:
    from vocal.stt import load_stt

    result = load_stt("faster-whisper").transcribe(join(silence(0.3), trimmed(said), silence(0.3)))
    assert kept.lower() in result.text.lower(), result.text
    assert result.repaired == how


def test_a_runaway_decode_is_retried_before_the_30s_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A short-window decode that compresses like a loop is decoded again with the penalty,
    which costs no 30 s encoding (the first decode is made to look like one here: on the spoken
    commands it was "Once you finish the refactor Run the benchmark again Run the benchmark
    again Run ...")."""
    import faster_whisper.transcribe

    from vocal.stt import load_stt

    real = faster_whisper.transcribe.get_compression_ratio
    ratios = iter([3.0])
    monkeypatch.setattr(
        faster_whisper.transcribe,
        "get_compression_ratio",
        lambda text: next(ratios, None) or real(text),
    )
    text = "Yes, go ahead."
    result = load_stt("faster-whisper").transcribe(join(silence(0.3), trimmed(text), silence(0.2)))
    assert result.segments[0]["window_s"] == 10.0, "the short window kept"
    assert result.repaired == "retried"
    assert word_error_rate(text, result.text) == 0, result.text


def test_the_30s_window_repairs_too(looping_audio, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 30 s window path (long turns, and the fallback) has the same check: made to loop
    here by a retry-free decode that repeats (a patched model call)."""
    from vocal.stt import load_stt

    engine = load_stt("faster-whisper")
    engine.short_window = False
    calls = []

    def decode_full(samples, duration_s, repetition_penalty=1.0):  # noqa: ANN001, ANN202
        calls.append(repetition_penalty)
        text = " ".join(["Open the config file."] * (2 if repetition_penalty == 1.0 else 1))
        return [{"start": 0.0, "end": duration_s, "text": text, "no_speech_prob": 0.0}], "en"

    monkeypatch.setattr(engine, "_decode_full", decode_full)
    result = engine.transcribe(looping_audio)
    assert calls == [1.0, pytest.approx(1.1)]
    assert result.text == "Open the config file."
    assert result.repaired == "retried"
    assert result.segments[0]["heard"] == "Open the config file. Open the config file."


def test_every_decode_is_capped_in_proportion_to_the_audio() -> None:
    from vocal.stt.faster_whisper import MAX_LENGTH, MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, token_cap

    assert token_cap(1.0) == 24 and token_cap(5.0) == 56
    assert token_cap(60.0) == token_cap(30.0) == MAX_NEW_TOKENS, "a 30 s window at most"
    assert MAX_PROMPT_TOKENS + 1 + 4 + MAX_NEW_TOKENS <= MAX_LENGTH


def test_the_30s_window_is_capped_with_the_longest_hints() -> None:
    """faster-whisper refuses a prompt plus cap past Whisper's 448 tokens: the full window
    with hints of the most prompt tokens still transcribes."""
    from vocal.stt import load_stt

    sentence = "Please open the file and read me the first line."
    engine = load_stt("faster-whisper", hints=" ".join(["vocal parser config"] * 200))
    engine.short_window = False
    result = engine.transcribe(join(silence(0.3), trimmed(sentence), silence(0.3)))
    assert word_error_rate(sentence, result.text) <= 0.2, result.text


def test_mlx_whisper_cuts_a_repeated_phrase_to_one_copy() -> None:
    """mlx-whisper's result (its 30 s window did not loop on the loops above, and it has no
    repetition penalty to retry with): a repeat across its segments is cut out."""
    from vocal.stt.mlx_whisper import said_once

    result = {
        "text": " Open the config file. Open the config file.",
        "segments": [
            {"start": 0.0, "end": 1.5, "text": " Open the config file.", "no_speech_prob": 0.1},
            {"start": 1.5, "end": 3.0, "text": " Open the config file.", "no_speech_prob": 0.2},
        ],
        "language": "en",
    }
    text, segments = said_once(result)
    assert text == "Open the config file."
    assert segments == [
        {
            "start": 0.0,
            "end": 3.0,
            "text": "Open the config file.",
            "no_speech_prob": 0.1,
            "repaired": "removed",
            "heard": "Open the config file. Open the config file.",
        }
    ]
    plain = {"text": " No, no.", "segments": [{"start": 0.0, "end": 1.0, "text": " No, no."}]}
    kept = {"start": 0.0, "end": 1.0, "text": "No, no.", "no_speech_prob": None}
    assert said_once(plain) == ("No, no.", [kept])
