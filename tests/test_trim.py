"""Sentences cut to their sound and paused by vocal's choice (vocal.speaking.trim, issue 19):
on a synthetic sentence, then on hibari's real output through `vocal speak --output`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.heard import AUDIBLE, audible_pauses
from harness.runner import run_vocal
from vocal.audio.wav import read_wav
from vocal.speaking.trim import (
    CLAUSE_PAUSE_SHARE,
    KEEP_LEAD_MS,
    KEEP_TAIL_MS,
    pause_after_s,
    shape_sentence,
    sound_bounds,
)

RATE = 24_000


def padded_sentence(lead_s: float = 0.3, tail_s: float = 0.45) -> tuple[np.ndarray, int, int]:
    """Silence, a 30 ms breathy ramp from -90 to -30 dBFS, 0.5 s of a loud vowel-like tone that
    decays over 60 ms, silence: an engine's sentence. Also the ramp's first and the decay's last
    sample above 40 dB under the peak."""
    t = np.arange(round(0.5 * RATE)) / RATE
    vowel = 0.3 * np.sin(2 * np.pi * 220 * t) * np.minimum(1.0, np.exp(-(t - 0.44) / 0.012))
    ramp_t = np.arange(round(0.03 * RATE)) / RATE
    ramp = 10 ** ((-90 + 2000 * ramp_t) / 20) * np.sin(2 * np.pi * 3000 * ramp_t)
    lead, tail = np.zeros(round(lead_s * RATE)), np.zeros(round(tail_s * RATE))
    samples = np.concatenate([lead, ramp, vowel, tail]).astype(np.float32)
    loud = np.flatnonzero(np.abs(samples) >= 0.3 * 10 ** (-40 / 20))
    return samples, int(loud[0]), int(loud[-1])


def test_the_padding_goes_and_the_sound_stays() -> None:
    samples, first_loud, last_loud = padded_sentence()
    start, end = sound_bounds(samples, RATE)
    frame = RATE // 200
    assert first_loud - frame <= start <= first_loud and last_loud < end <= last_loud + frame
    shaped = shape_sentence(samples, RATE)
    lead, tail = round(KEEP_LEAD_MS * RATE / 1000), round(KEEP_TAIL_MS * RATE / 1000)
    assert shaped.size == pytest.approx(end - start + lead + tail, abs=1)
    # The sound itself is untouched, sample for sample, after the fade-in.
    np.testing.assert_array_equal(shaped[lead : lead + end - start], samples[start:end])
    # Faded both ends: no step a speaker would click on.
    assert abs(shaped[0]) < 1e-6 and abs(shaped[-1]) < 1e-4
    assert np.max(np.abs(np.diff(shaped))) <= np.max(np.abs(np.diff(samples))) + 1e-6


def test_the_pause_after_is_the_one_asked_for() -> None:
    samples, *_ = padded_sentence(lead_s=0.1, tail_s=0.9)
    for pause_s in (0.0, 0.25, 1.0):
        shaped = shape_sentence(samples, RATE, pause_after_s=pause_s)
        assert shaped.size == shape_sentence(samples, RATE).size + round(pause_s * RATE)
        assert not shaped[shaped.size - round(pause_s * RATE) :].any()


def test_which_pause_follows_which_sentence() -> None:
    assert pause_after_s(0.4, clause=False, last=False) == 0.4
    assert pause_after_s(0.4, clause=True, last=False) == pytest.approx(0.4 * CLAUSE_PAUSE_SHARE)
    assert pause_after_s(0.4, clause=True, last=True) == 0.0  # a reply of one split sentence
    assert pause_after_s(0.4, clause=False, last=True) == 0.0


def test_sound_from_the_first_sample_and_silence_are_left_alone() -> None:
    # Loud from the first sample to the last (espeak-ng's sentences start like this).
    t = np.arange(round(0.3 * RATE)) / RATE
    samples = (0.3 * np.sin(2 * np.pi * 220 * t + 0.5)).astype(np.float32)
    shaped = shape_sentence(samples, RATE)
    np.testing.assert_array_equal(shaped, samples)  # nothing cut, so nothing faded
    silence = np.zeros(RATE, np.float32)
    assert sound_bounds(silence, RATE) is None
    np.testing.assert_array_equal(shape_sentence(silence, RATE, pause_after_s=0.5), silence)


@pytest.mark.parametrize("pause_ms", [400, 100])
def test_hibari_starts_at_once_and_pauses_as_set(tmp_path: Path, pause_ms: int) -> None:
    """A reply of a split first clause and two sentences, as `vocal speak` writes it: sound
    within 60 ms (hibari pads 0.24-0.33 s), a half pause after the clause, the chosen pause
    between sentences (plus the faded tail and the onset below -40 dBFS), none at the end."""
    out = tmp_path / "reply.wav"
    text = "Hello there, I have finished the refactoring. Shall I open the pull request?"
    done = run_vocal("speak", "--engine", "hibari", "--json", "-o", str(out), text,
                     env={"VOCAL_SENTENCE_PAUSE_MS": str(pause_ms)})  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert [s["text"] for s in json.loads(done.stdout)["detail"]] == [
        "Hello there,", "I have finished the refactoring.", "Shall I open the pull request?",
    ]  # fmt: skip
    reply = read_wav(out)
    samples, rate = reply.mono_samples, reply.sample_rate
    first = int(np.flatnonzero(np.abs(samples) >= AUDIBLE)[0])
    gaps = audible_pauses(samples, rate)
    assert first / rate <= 0.06  # the kept 10 ms and the onset climbing to -40 dBFS
    clause, sentence = gaps[0], max(gaps)
    # Each pause is the chosen silence plus at most ~0.2 s of faded tail and soft onset.
    assert pause_ms / 2000 <= clause <= pause_ms / 2000 + 0.2, gaps
    assert pause_ms / 1000 <= sentence <= pause_ms / 1000 + 0.2, gaps
    last_audible = np.flatnonzero(np.abs(samples) >= AUDIBLE)[-1]
    assert (samples.size - last_audible) / rate <= 0.12


def test_a_pause_out_of_range_is_a_usage_error() -> None:
    done = run_vocal("speak", "--json", "-o", "/dev/null", "Hi there.",
                     env={"VOCAL_SENTENCE_PAUSE_MS": "-5"})  # fmt: skip
    assert done.returncode == 2
    assert "sentence_pause_ms" in done.stderr.decode().lower() or "SENTENCE_PAUSE" in (
        done.stderr.decode()
    )
