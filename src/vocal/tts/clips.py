"""Reference clips for cloned voices: read any audio file, check it and convert it (issue 5).

A clip must hold 5–9 s of speech once leading and trailing silence is trimmed, not clipped, not
silent, and judged speech by Silero VAD; it is stored as mono 16-bit at the cloning engine's
rate (`CLONE_SAMPLE_RATE`) with its loudness normalised. The voice store (vocal.tts.voices)
calls `prepare_clip` when a voice is added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vocal.audio.wav import Audio, check_audio_limits, read_wav
from vocal.errors import AudioFormatError, UsageError

if TYPE_CHECKING:
    pass

#: The cloning engine's sample rate (vocal.tts.chatterbox_model.SAMPLE_RATE is this one): stored
#: clips are converted to it.
CLONE_SAMPLE_RATE = 24_000


# Clip rules (issue 5). Chatterbox conditions on up to 10 s of reference and clones poorly
# from under 5 s; 5–9 s of speech leaves room for the kept margins.
MIN_SPEECH_S = 5.0
MAX_SPEECH_S = 9.0
FRAME_S = 0.02
#: A clip whose loudest 20 ms frame is below this is silent.
SILENT_DBFS = -50.0
#: Frames this far below the loudest one are silence when trimming (and never below -80 dBFS).
TRIM_BELOW_PEAK_DB = 35.0
TRIM_FLOOR_DBFS = -80.0
#: Silence kept before and after the speech, so the first and last phonemes are whole.
MARGIN_S = 0.15
#: Clipping: samples at full scale in runs of 3 or more (a single full-scale peak is legal);
#: more than 0.1% of the speech so marked means the recording was clipped.
CLIP_LEVEL = 0.999
CLIP_RUN = 3
MAX_CLIPPED_FRACTION = 0.001
#: Loudness: the speech's RMS is brought to -20 dBFS (a usual level for speech references),
#: then lowered if needed to keep peaks under -1 dBFS.
TARGET_RMS_DBFS = -20.0
PEAK_CEILING_DBFS = -1.0


def _db(value: float) -> float:
    return 20.0 * math.log10(max(value, 1e-12))


def _gain(db: float) -> float:
    return 10.0 ** (db / 20.0)


# -- clips ------------------------------------------------------------------------------------
class ClipError(UsageError):
    """A reference clip that cannot make a voice; the message says why."""


@dataclass(frozen=True)
class ClipReport:
    """What `prepare_clip` measured and did."""

    source_duration_s: float
    source_sample_rate: int
    source_channels: int
    speech_s: float
    stored_duration_s: float
    speech_rms_dbfs: float
    gain_db: float
    sample_rate: int = CLONE_SAMPLE_RATE


def read_clip(path: Path) -> Audio:
    """Any audio file vocal can read: WAV through vocal.audio.wav, FLAC/OGG/MP3 through
    soundfile."""
    try:
        return read_wav(path)
    except AudioFormatError as wav_error:
        if "no RIFF/WAVE header" not in str(wav_error):
            raise ClipError(str(wav_error)) from None
    try:
        import soundfile

        info = soundfile.info(str(path))
    except Exception:
        raise ClipError(
            f"{path}: not an audio file vocal can read",
            hint="use a WAV, FLAC, OGG or MP3 recording of 5–9 s of speech",
        ) from None
    # The same limits as a WAV's, from the header, before decoding (issue 17).
    try:
        check_audio_limits(str(path), sample_rate=int(info.samplerate), frames=int(info.frames))
    except AudioFormatError as exc:
        raise ClipError(str(exc)) from None
    try:
        samples, sample_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception:
        raise ClipError(
            f"{path}: not an audio file vocal can read",
            hint="use a WAV, FLAC, OGG or MP3 recording of 5–9 s of speech",
        ) from None
    if samples.shape[0] == 0:
        raise ClipError(f"{path}: the file holds no audio")
    return Audio(samples, int(sample_rate))


def _frame_rms(samples: np.ndarray, frame: int) -> np.ndarray:
    count = len(samples) // frame
    if count == 0:
        return np.zeros(0, np.float32)
    frames = samples[: count * frame].reshape(count, frame).astype(np.float64)
    return np.sqrt(np.mean(frames * frames, axis=1))


def _clipped_fraction(samples: np.ndarray) -> float:
    """The share of samples that sit in runs of >= CLIP_RUN at full scale, per channel."""
    flagged = 0
    for channel in samples.T:
        pinned = np.abs(channel) >= CLIP_LEVEL
        if not pinned.any():
            continue
        # Run lengths of consecutive pinned samples.
        edges = np.diff(np.concatenate(([0], pinned.view(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        runs = ends - starts
        flagged += int(runs[runs >= CLIP_RUN].sum())
    return flagged / max(samples.size, 1)


#: The share of a clip's loud span that Silero VAD must judge speech (p >= 0.5). A 7 s sine
#: tone passed the loudness checks as "7.0 s of speech" (issue 17); read speech scores well
#: above half, with breaths and pauses below.
MIN_VOICED_SHARE = 0.3


def _voiced_share(samples_24k: np.ndarray) -> float:
    """The share of 32 ms chunks Silero VAD judges speech, on the clip at 16 kHz."""
    from vocal.audio.vad import SileroVad

    samples = Audio(samples_24k, CLONE_SAMPLE_RATE).resample(16_000).mono_samples
    probabilities = SileroVad().probabilities(samples)
    return float(np.mean(probabilities >= 0.5)) if probabilities.size else 0.0


def prepare_clip(audio: Audio, *, name: str = "the clip") -> tuple[Audio, ClipReport]:
    """Validate a reference clip and convert it: mono, 24 kHz, trimmed, loudness-normalised.

    Raises `ClipError` (exit 2) for a silent, clipped, too short or too long clip, with the
    measured figure in the message.
    """
    if audio.frames == 0:
        raise ClipError(f"{name}: the file holds no audio")
    if _clipped_fraction(audio.samples) > MAX_CLIPPED_FRACTION:
        share = _clipped_fraction(audio.samples) * 100
        raise ClipError(
            f"{name} is clipped ({share:.1f}% of its samples sit at full scale)",
            hint="record it again with a lower input level",
        )
    mono = audio.to_mono().resample(CLONE_SAMPLE_RATE).mono_samples
    frame = round(FRAME_S * CLONE_SAMPLE_RATE)
    rms = _frame_rms(mono, frame)
    loudest = float(rms.max()) if rms.size else 0.0
    if loudest < _gain(SILENT_DBFS):
        raise ClipError(
            f"{name} is silent (its loudest moment is {_db(loudest):.0f} dBFS)",
            hint="record 5–9 s of speech",
        )
    threshold = max(loudest * _gain(-TRIM_BELOW_PEAK_DB), _gain(TRIM_FLOOR_DBFS))
    voiced = np.flatnonzero(rms > threshold)
    first, last = int(voiced[0]), int(voiced[-1])
    speech_s = (last - first + 1) * FRAME_S
    if speech_s < MIN_SPEECH_S:
        raise ClipError(
            f"{name} holds {speech_s:.1f} s of speech; a voice needs {MIN_SPEECH_S:g}–"
            f"{MAX_SPEECH_S:g} s",
            hint="record a longer take (a sentence or two)",
        )
    if speech_s > MAX_SPEECH_S:
        raise ClipError(
            f"{name} holds {speech_s:.1f} s of speech; a voice needs {MIN_SPEECH_S:g}–"
            f"{MAX_SPEECH_S:g} s",
            hint="cut it to one or two clean sentences, e.g. `sox in.wav out.wav trim 0 8`",
        )
    voiced_share = _voiced_share(mono[first * frame : (last + 1) * frame])
    if voiced_share < MIN_VOICED_SHARE:
        raise ClipError(
            f"{name} is not speech: Silero VAD hears a voice in {voiced_share:.0%} of it "
            "(a tone, music or noise)",
            hint="record 5–9 s of speech",
        )
    margin = round(MARGIN_S * CLONE_SAMPLE_RATE)
    start = max(0, first * frame - margin)
    end = min(len(mono), (last + 1) * frame + margin)
    trimmed = mono[start:end].astype(np.float32)
    voiced_rms = rms[first : last + 1]
    voiced_rms = voiced_rms[voiced_rms > threshold]
    speech_rms = float(np.sqrt(np.mean(np.square(voiced_rms))))
    gain_db = TARGET_RMS_DBFS - _db(speech_rms)
    peak = float(np.max(np.abs(trimmed)))
    gain_db = min(gain_db, PEAK_CEILING_DBFS - _db(peak))
    stored = Audio(trimmed * np.float32(_gain(gain_db)), CLONE_SAMPLE_RATE)
    report = ClipReport(
        source_duration_s=audio.duration_s,
        source_sample_rate=audio.sample_rate,
        source_channels=audio.channels,
        speech_s=round(speech_s, 2),
        stored_duration_s=round(stored.duration_s, 2),
        speech_rms_dbfs=round(_db(speech_rms) + gain_db, 1),
        gain_db=round(gain_db, 1),
    )
    return stored, report


__all__ = [
    "CLONE_SAMPLE_RATE",
    "ClipError",
    "ClipReport",
    "MIN_VOICED_SHARE",
    "prepare_clip",
    "read_clip",
]
