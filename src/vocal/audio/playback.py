"""Play an `Audio` to the speaker or to a WAV file through one owned output.

The output is a `Player` (a PortAudio stream vocal owns: kill handle, pause, reference PCM) or,
with `--output FILE`, a `WavSink` with the same interface.
"""

from __future__ import annotations

from pathlib import Path

from vocal.audio.devices import BlockHook
from vocal.audio.file_devices import WavSink
from vocal.audio.player import Player
from vocal.audio.wav import Audio


def open_output(
    sample_rate: int,
    *,
    output: str | Path | None = None,
    device: str | int | None = None,
    volume: float = 1.0,
    on_block: BlockHook | None = None,
) -> Player | WavSink:
    """An opened output at `sample_rate`: a WAV file if `output` is given, else the speaker.

    `on_block` runs in the speaker's audio callback on each block played (see `Player`).
    """
    if output is not None:
        return WavSink(output, sample_rate, volume=volume).open()
    return Player(sample_rate, device=device, volume=volume, on_block=on_block).open()


def play_audio(
    audio: Audio,
    *,
    output: str | Path | None = None,
    device: str | int | None = None,
    volume: float = 1.0,
) -> int:
    """Play `audio` (mono mix) to the end and return the frames played.

    Ctrl-C stops playback within one block before the interrupt propagates.
    """
    sink = open_output(audio.sample_rate, output=output, device=device, volume=volume)
    try:
        sink.play(audio.mono_samples)
        sink.finish()
        # Wait in short slices so Ctrl-C is seen at once (Event.wait is not interruptible).
        while not sink.wait(0.05):
            pass
    except BaseException:
        sink.stop()
        raise
    finally:
        sink.close()
    return sink.played_frames
