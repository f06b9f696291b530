"""The Output contract (vocal.audio.output): the block-observer chain of a Player, and a
WavSink as an output. No sound device: the Player's callback is driven by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vocal.speaking.output import open_speech_output


def test_block_observers_run_in_order_after_the_reference() -> None:
    """The chain of vocal.audio.output: the reference first, then the observers in order, and
    a later observer sees what an earlier one (the floor guard) made of the block."""
    from types import SimpleNamespace

    from vocal.audio.player import Player

    seen: list[tuple[str, float]] = []

    def guard(block: np.ndarray) -> None:
        seen.append(("guard", float(block.max())))
        block[:] = 0.0

    player = Player(16_000, on_block=lambda b: seen.append(("tracker", player.played_frames)))
    player.add_block_observer(guard)
    player.add_block_observer(lambda b: seen.append(("render", float(b.max()))))
    player.play(np.ones(256, np.float32))
    out = np.zeros((256, 1), np.float32)
    clock = SimpleNamespace(outputBufferDacTime=0.0, currentTime=0.0)
    player._callback(out, 256, clock, SimpleNamespace(output_underflow=False))
    assert seen == [("tracker", 256), ("guard", 1.0), ("render", 0.0)]
    assert float(player.reference.read(0, 256).max()) == 1.0  # written before the chain ran


def test_a_wav_sink_is_an_output_with_nothing_to_flush(tmp_path: Path) -> None:
    from vocal.speaking.output import flush_output, tracker_of

    sink = open_speech_output(16_000, output=tmp_path / "out.wav")
    sink.play(np.ones(100, np.float32))
    assert flush_output(sink) == 0 and not sink.paused
    assert sink.consumed_frames == sink.played_frames == 100 and tracker_of(sink) is None
    sink.finish()
    assert sink.done and (tmp_path / "out.wav").exists()


def test_underflows_before_the_first_sound_are_counted_apart() -> None:
    """An underflow flagged before any queued audio was handed over ran dry into silence;
    from the callback after the first sound on, each is a glitch of the sound."""
    from types import SimpleNamespace

    from vocal.audio.player import Player

    player = Player(16_000)
    clock = SimpleNamespace(outputBufferDacTime=0.0, currentTime=0.0)
    out = np.zeros((256, 1), np.float32)

    def callback(underflow: bool) -> None:
        player._callback(out, 256, clock, SimpleNamespace(output_underflow=underflow))

    callback(False)
    callback(True)  # silence ran dry
    player.play(np.ones(512, np.float32))
    callback(True)  # the block that hands over the first sound: the dry spell came before it
    assert (player.underflows_before_audio, player.underflows) == (2, 0)
    callback(True)  # after the first sound
    assert (player.underflows_before_audio, player.underflows) == (2, 1)
