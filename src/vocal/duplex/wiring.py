"""The one place the echo canceller and the barge-in detector are wired to each other.

    guard = EchoGuard(EchoCanceller(render_sample_rate=rate))   # or EchoGuard(): no AEC
    mic = Microphone(16_000, on_block=guard.capture).open()     # cleaned capture
    player.add_block_observer(guard.render)                     # the reverse stream
    guard.watch(SileroVad(), player.stop, options, player=player, mic=mic)
    for block in mic.blocks():
        if guard.feed(block) is not None: ...                   # a barge-in

What the detector learns from the canceller: the far end's activity (its inhibit windows),
the attenuation and the echo levels (fast runs, the double-talk test), the glitches (the
canceller's late callbacks plus the output's underflows and the input's overflows), and the
capture delay (the cleaned signal comes out `capture_delay_frames` late). Without a
canceller (`--aec off`, headphones) the detector runs on the raw capture and none of that is
known. `vocal converse` and the room harness (tests/harness/room.py) both use it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.devices import Block
    from vocal.duplex.bargein.detector import (
        BargeIn,
        BargeInDetector,
        BargeInOptions,
        SpeechProbability,
    )
    from vocal.duplex.canceller.aec import EchoCanceller
    from vocal.duplex.echo_free.onset import EchoFreeOnset, OnsetTaps


#: The barge-in's tail window ends this long before the echo window does (300 ms against
#: `vocal.duplex.canceller.aec.ECHO_WINDOW_S`'s 0.4 s): kept when a long echo delay moves
#: the window.
TAIL_BEFORE_WINDOW_END_MS = 100


class _Underflows(Protocol):
    underflows: int


class _Overflows(Protocol):
    overflows: int


class EchoGuard:
    """Owns the canceller (None: no echo cancellation) and, once `watch` is called, the
    barge-in detector fed from it."""

    def __init__(self, canceller: EchoCanceller | None = None) -> None:
        self.canceller = canceller
        self.detector: BargeInDetector | None = None
        #: The raw capture and the played blocks, for an interruption's echo-free onset
        #: (vocal.duplex.echo_free.onset); only with a canceller (without one the capture is raw).
        self.taps: OnsetTaps | None = None
        if canceller is not None:
            from vocal.duplex.echo_free.onset import OnsetTaps

            drift_ppm = canceller.drift.drift_ppm if canceller.drift is not None else 0.0
            self.taps = OnsetTaps(
                canceller.render_sample_rate, canceller.capture_sample_rate, drift_ppm
            )

    # the audio callbacks
    def capture(self, block: np.ndarray) -> np.ndarray:
        """The microphone's `on_block`: the cleaned block (needs a canceller)."""
        assert self.canceller is not None, "capture() is the canceller's: none was given"
        if self.taps is not None:
            self.taps.capture(block)  # a copy: the canceller cleans the block in place
        return self.canceller.capture(block)

    def render(self, block: np.ndarray) -> None:
        """An output block observer: the block as played, to the canceller's reverse stream."""
        if self.canceller is not None:
            if self.taps is not None:
                self.taps.render(block)
            self.canceller.render(block)

    def echo_free_onset(self, onset_s: float, after_s: float | None = None) -> EchoFreeOnset | None:
        """After a barge-in: the raw capture with the reply's fitted echo taken out (see
        vocal.duplex.echo_free.onset), fitted after `after_s` if given; None without a canceller or
        with no reply to fit."""
        if self.taps is None or self.canceller is None:
            return None
        return self.taps.rebuild(onset_s, self.canceller.activity.first_loud_s, after_s)

    # the detector (the consumer thread)
    def watch(
        self,
        speech_probability: SpeechProbability,
        on_barge_in: Callable[[], object],
        options: BargeInOptions | None = None,
        *,
        player: _Underflows,
        mic: _Overflows,
        room_level_db: float | None = None,
    ) -> BargeInDetector:
        """Start a barge-in detector on the cleaned capture; `on_barge_in` stops the reply.
        `room_level_db`: the room's level a recent turn heard (vocal.duplex.bargein.room_level)."""
        import dataclasses

        from vocal.duplex.bargein.detector import BargeInDetector, BargeInOptions

        canceller = self.canceller
        options = options or BargeInOptions()
        if canceller is not None and canceller.stream_delay_ms is not None:
            # A long echo delay known (an echo profile): the room's tail after the far end
            # stops comes that much later, and the tail window follows it (today's 300 ms
            # against the default echo window's 0.4 s).
            tail_ms = round(1000 * canceller.echo_window_s[1]) - TAIL_BEFORE_WINDOW_END_MS
            if tail_ms > options.tail_inhibit_ms:
                options = dataclasses.replace(options, tail_inhibit_ms=tail_ms)
        self.detector = BargeInDetector(
            speech_probability,
            on_barge_in,
            options,
            activity=canceller.activity if canceller is not None else None,
            glitches=lambda: (
                (canceller.glitches if canceller is not None else 0)
                + player.underflows
                + mic.overflows
            ),
            attenuation=canceller.attenuation_db if canceller is not None else None,
            echo_levels=canceller.echo_levels_db if canceller is not None else None,
            room_level_db=room_level_db,
        )
        return self.detector

    def feed(self, block: Block) -> BargeIn | None:
        """Give a captured (cleaned) block to the detector; the `BargeIn` once it fired."""
        detector, canceller = self.detector, self.canceller
        assert detector is not None, "feed() before watch()"
        if canceller is not None and canceller.capture_delay_frames:
            detector.delay_frames = canceller.capture_delay_frames
        return detector.feed(block.samples, block.captured_at_s)

    def hold_after_resume(self) -> None:
        """The far end resumed after a pause: the canceller finds the echo path again, so
        barge-in waits (`BargeInOptions.resume_inhibit_ms`)."""
        detector = self.detector
        if detector is not None:
            detector.hold(detector.options.resume_inhibit_ms / 1000)

    @property
    def capture_delay_frames(self) -> int:
        """How late the cleaned capture comes out (0 without a canceller, or before it ran)."""
        canceller = self.canceller
        return (canceller.capture_delay_frames or 0) if canceller is not None else 0


__all__ = ["EchoGuard"]
