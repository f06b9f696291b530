"""Who was heard when: speech found in the recording of the speaker sink's monitor.

Each process's speech is found by cross-correlation with the same text rendered to a file by
the same engine (espeak-ng is deterministic), so each speaker's interval on the monitor is known
without trusting the processes' word for it (the speak-turn, pieces and hooks tests).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.conch_audio import MonitorRecorder
from vocal.audio.wav import read_wav
from vocal.config import load_settings
from vocal.speaking.speak import SpeakOptions, speak

MONITOR_RATE = 16_000
#: A 10 ms monitor block with speech in it (espeak speech: RMS 0.02-0.2; the null sink's
#: monitor is exact zeros when nothing plays).
SOUND_RMS = 0.003


#: Audible, as issue 19 measures what a person hears: a sample above -40 dBFS.
AUDIBLE = 10 ** (-40 / 20)
#: A pause between sentences: at least this long below AUDIBLE between two audible samples.
MIN_PAUSE_S = 0.12


def first_audible(recorder: MonitorRecorder, after_s: float) -> float | None:
    """The monotonic time of the first audible sample the monitor recorded after `after_s`
    (a sample's time: its block's capture time, less the samples after it)."""
    for samples, captured_at_s in zip(recorder.blocks, recorder.times, strict=False):
        if captured_at_s < after_s:
            continue
        loud = np.flatnonzero(np.abs(samples) >= AUDIBLE)
        if loud.size:
            return captured_at_s - (samples.size - 1 - int(loud[0])) / MONITOR_RATE
    return None


def audible_pauses(samples: np.ndarray, sample_rate: int) -> list[float]:
    """Seconds of every pause (see MIN_PAUSE_S) between the audible samples of a reply."""
    steps = np.diff(np.flatnonzero(np.abs(samples) >= AUDIBLE)) / sample_rate
    return [float(step) for step in steps if step >= MIN_PAUSE_S]


def rendered(text: str, tmp_path: Path) -> np.ndarray:
    """What `vocal speak --engine espeak-ng TEXT` plays, at the monitor's rate, without the
    engine's leading and trailing silence."""
    path = tmp_path / f"ref-{abs(hash(text))}.wav"
    speak(text, SpeakOptions(engine="espeak-ng", output=path), load_settings(), report=None)
    return trimmed(read_wav(path).resample(MONITOR_RATE).mono_samples)


def trimmed(samples: np.ndarray) -> np.ndarray:
    loud = np.flatnonzero(np.abs(samples) > 0.01)
    return samples[loud[0] : loud[-1] + 1]


def monitor(recorder: MonitorRecorder) -> tuple[np.ndarray, float]:
    """The whole recording and the monotonic time of its first sample."""
    samples = np.concatenate(recorder.blocks)
    first_block = recorder.blocks[0].shape[0]
    return samples, recorder.times[0] - first_block / MONITOR_RATE


def block_rms(recorder: MonitorRecorder) -> tuple[np.ndarray, np.ndarray]:
    """(block end times, RMS per block)."""
    rms = np.array([float(np.sqrt(np.mean(np.square(b)))) for b in recorder.blocks])
    return np.array(recorder.times), rms


def locate(recording: np.ndarray, reference: np.ndarray) -> tuple[int, float]:
    """Where `reference` starts in `recording` (samples) and the normalized correlation there."""
    n = recording.shape[0] + reference.shape[0]
    size = 1 << (n - 1).bit_length()
    spectrum = np.fft.rfft(recording, size) * np.conj(np.fft.rfft(reference, size))
    xcorr = np.fft.irfft(spectrum, size)[: recording.shape[0] - reference.shape[0] + 1]
    energy = np.concatenate([[0.0], np.cumsum(np.square(recording, dtype=np.float64))])
    window = energy[reference.shape[0] :] - energy[: -reference.shape[0]]
    window = window[: xcorr.shape[0]]
    ncc = xcorr / (np.linalg.norm(reference) * np.sqrt(np.maximum(window, 1e-12)))
    best = int(np.argmax(ncc))
    return best, float(ncc[best])


#: Each utterance is found by its first this-many seconds (a clear onset), and its end by its
#: last ones, searched for just after where it should end. On this loaded 2-core machine output
#: underflows put gaps inside speakers' audio (seen: 2-86 ms), which blur a whole-clip
#: correlation (down to 0.14) and shift the end; short pieces are seldom hit.
HEAD_S = 0.1
TAIL_S = 0.2
#: The head's correlation with the monitor where it was found (measured 0.80-1.0).
MIN_SCORE = 0.7


def heard_intervals(recorder: MonitorRecorder, references: list[np.ndarray]
                    ) -> list[tuple[float, float | None, float]]:  # fmt: skip
    """For each reference: the monotonic time its head was heard, the time its tail ended
    (None when an underflow blurred the tail: the caller falls back on the speaker's own
    clock), and the head's correlation there."""
    recording, t0 = monitor(recorder)
    head, tail = round(HEAD_S * MONITOR_RATE), round(TAIL_S * MONITOR_RATE)
    found = []
    for reference in references:
        head_at, head_score = locate(recording, reference[:head])
        low = max(0, head_at + reference.shape[0] - tail - round(0.05 * MONITOR_RATE))
        high = head_at + reference.shape[0] + round(0.25 * MONITOR_RATE)
        tail_at, tail_score = locate(recording[low:high], reference[-tail:])
        end = t0 + (low + tail_at + tail) / MONITOR_RATE if tail_score >= MIN_SCORE else None
        found.append((t0 + head_at / MONITOR_RATE, end, head_score))
    return found
