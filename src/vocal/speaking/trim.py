"""Each synthesized sentence without the engine's own silence, and a pause of vocal's choosing.

Engines pad: hibari starts every sentence with ~0.3 s of near-silence and ends it with ~0.45 s
(espeak-ng and piper with 0-50 ms and 140-300 ms), so the first thing a person heard was a third
of a second of nothing, and the pause between two sentences was whatever two paddings added up
to. `shape_sentence` cuts both down to the sound itself, keeping a few milliseconds on either
side with a short fade (so nothing clicks and a soft onset is not clipped), and then adds the
pause the caller asks for (`Settings.sentence_pause_ms`) after every sentence but the last.

It runs after the speech check (`vocal.speaking.check`), which needs the quiet to tell speech from
noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Sound starts at the first 5 ms frame whose peak is within this many dB of the sentence's peak.
#: 40 dB under hibari's -11 dBFS peaks is about -51 dBFS: its breathy onsets climb from -100 to
#: -40 dBFS over ~0.1 s, and what lies below -50 is not heard over any room.
SOUND_BELOW_PEAK_DB = 40.0
#: Kept before the first loud frame, the first half of it faded in (raised cosine). Every
#: millisecond here is on the person's clock before the first word.
KEEP_LEAD_MS = 10.0
#: Kept after the last loud frame (a decaying vowel), the last half of it faded out.
KEEP_TAIL_MS = 40.0
_FRAME_MS = 5.0
#: The pause after the first clause of a reply (split off to start sooner), as a share of
#: the pause between sentences: a comma's pause, not a full stop's.
CLAUSE_PAUSE_SHARE = 0.5


def pause_after_s(sentence_pause_s: float, *, clause: bool, last: bool) -> float:
    """The silence after one sentence: none after the reply's last (a turn listens next), a
    share after a first clause split off to start sooner, else the pause between sentences."""
    if last:
        return 0.0
    return sentence_pause_s * CLAUSE_PAUSE_SHARE if clause else sentence_pause_s


def sound_bounds(samples: np.ndarray, sample_rate: int) -> tuple[int, int] | None:
    """`(start, end)` sample indices of the sentence's sound (first to last loud 5 ms frame,
    end exclusive), or None when nothing is loud (silence)."""
    import numpy as np

    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    if peak <= 0.0:
        return None
    frame = max(1, round(_FRAME_MS * sample_rate / 1000))
    count = -(-samples.size // frame)
    padded = np.zeros(count * frame, np.float32)
    padded[: samples.size] = np.abs(samples)
    levels = padded.reshape(count, frame).max(axis=1)
    loud = np.flatnonzero(levels >= peak * 10 ** (-SOUND_BELOW_PEAK_DB / 20))
    return int(loud[0]) * frame, min(samples.size, (int(loud[-1]) + 1) * frame)


def shape_sentence(
    samples: np.ndarray, sample_rate: int, *, pause_after_s: float = 0.0
) -> np.ndarray:
    """`samples` cut to their sound (keeping `KEEP_LEAD_MS` and `KEEP_TAIL_MS` around it,
    faded), followed by `pause_after_s` of silence. Samples with no sound come back as they are.
    """
    import numpy as np

    bounds = sound_bounds(samples, sample_rate)
    if bounds is None:
        return samples
    lead = round(KEEP_LEAD_MS * sample_rate / 1000)
    tail = round(KEEP_TAIL_MS * sample_rate / 1000)
    start, end = max(0, bounds[0] - lead), min(samples.size, bounds[1] + tail)
    pause = max(0, round(pause_after_s * sample_rate))
    shaped = np.zeros(end - start + pause, np.float32)
    shaped[: end - start] = samples[start:end]
    # Fades only where something was cut: a sentence that starts at its first sample keeps it.
    if start > 0:
        _fade(shaped[: min(lead // 2, end - start)], rising=True)
    if end < samples.size:
        _fade(shaped[max(0, end - start - tail // 2) : end - start], rising=False)
    return shaped


def _fade(segment: np.ndarray, *, rising: bool) -> None:
    """Multiply `segment` in place by a raised-cosine ramp up (or down)."""
    import numpy as np

    n = segment.size
    if n == 0:
        return
    ramp = 0.5 - 0.5 * np.cos(np.pi * (np.arange(n, dtype=np.float32) + 0.5) / n)
    segment *= ramp if rising else ramp[::-1]


__all__ = [
    "CLAUSE_PAUSE_SHARE",
    "KEEP_LEAD_MS",
    "KEEP_TAIL_MS",
    "SOUND_BELOW_PEAK_DB",
    "pause_after_s",
    "shape_sentence",
    "sound_bounds",
]
