"""An interruption's words, rebuilt from the raw microphone once a barge-in has stopped the reply.

Where the onset was lost (issue 19; room harness, hibari reply, "please stop and open the
settings file" 1.5-7 s in; benchmarks/RESULTS.md): AEC3's output came back "please top/up..."
in most runs. The person's "s" falls right after the reply stops, and for 0.1-0.2 s after that
AEC3's suppressor takes 40-60 dB out of the band above 3 kHz. The raw microphone keeps every
word, and the reply with them. A linear echo path fitted on the reply before the person started
(the blocks as played against the raw microphone, least squares: vocal.duplex.echo_free.echo_path)
takes the reply out and leaves the person alone.

So after a barge-in the endpointer hears the raw microphone minus the fitted echo, from the
pre-roll on (`EchoFreeOnset`), rather than AEC3's output. Where no fit removes at least
`MIN_ECHO_REMOVED_DB` (a loudspeaker that distorts, an output that slipped, too little reply
before the person spoke) it hears the canceller's output, as before.

`OnsetTaps` keeps the last seconds of both streams from the audio callbacks: the raw capture
(copied before the canceller cleans it in place) and the blocks as played, each with the count
of samples before it, so positions within a stream are exact and only the one mapping between
the two streams comes from the clock (the fitted delay absorbs its error).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vocal.duplex.echo_free.echo_follow import PathSteps, follow_path
from vocal.duplex.echo_free.echo_path import (
    LEAD_TAPS,
    SAMPLE_RATE,
    EchoPath,
    best_echo_path,
    echo_estimate,
    shifted_reference,
)
from vocal.duplex.echo_free.taps import StreamTap, clock_offset, joined, position_at

if TYPE_CHECKING:
    from vocal.audio.devices import Block

#: Below this much echo removed by the best fit, the canceller's output is used instead.
MIN_ECHO_REMOVED_DB = 20.0


class OnsetTaps:
    """The raw capture and the played blocks of a turn, kept for `EchoFreeOnset`.

    `capture` and `render` run in the audio callbacks (a copy and an append each). With the
    output's clock drift known (`drift_ppm`, an echo profile's), the played blocks are put on
    the capture's grid as that clock played them (`vocal.duplex.canceller.drift.warped`): at 100 ppm
    the echo moves 0.1 ms a second, and a fit on the blocks as handed over removed 1-8 dB of the
    echo half a second on where one on the drifting clock removed 28-47 dB (the harness's drifting
    room, offline, hibari's reply; benchmarks/RESULTS.md)."""

    def __init__(
        self,
        render_sample_rate: int,
        capture_sample_rate: int = SAMPLE_RATE,
        drift_ppm: float = 0.0,
    ) -> None:
        self.raw = StreamTap(capture_sample_rate)
        self.played = StreamTap(render_sample_rate)
        self.drift_ppm = drift_ppm

    def capture(self, block: np.ndarray) -> None:
        self.raw.add(block, time.monotonic())

    def render(self, block: np.ndarray) -> None:
        self.played.add(block, time.monotonic())

    def aligned(self) -> AlignedStreams | None:
        """The raw capture kept and the blocks as played on its grid; None before both ran."""
        from vocal.audio.wav import resample
        from vocal.duplex.canceller.drift import warped

        raw_blocks, played_blocks = self.raw.snapshot(), self.played.snapshot()
        if not raw_blocks or not played_blocks:
            return None
        rate, played_rate = self.raw.sample_rate, self.played.sample_rate
        base = raw_blocks[0][1]
        raw = joined(raw_blocks, base, self.raw.total)
        # The reply as played, on the raw stream's grid, through the clock.
        frame = round(
            (base - clock_offset(raw_blocks, played_blocks, rate, played_rate)) * played_rate / rate
        )
        count = math.ceil(raw.shape[0] * played_rate / rate) + played_rate
        played = joined(played_blocks, frame, frame + count)
        reference = played if played_rate == rate else resample(played, played_rate, rate)
        if self.drift_ppm:
            # Anchored at the newest capture: the path's delay there (the one a turn learns
            # from a fit) is the delay as the callbacks saw it, whatever the drift.
            reference = warped(reference, self.drift_ppm, raw.shape[0])
        return AlignedStreams(raw, reference, base, raw_blocks, rate)

    def rebuild(
        self, onset_s: float, reply_started_s: float | None, after_s: float | None = None
    ) -> EchoFreeOnset | None:
        """The raw capture with the reply's fitted echo taken out, fitted on the reply before
        `onset_s` and after `after_s` (a glitch moved the echo path before it); None when
        there was nothing to fit (see `EchoFreeOnset.usable`)."""
        streams = self.aligned()
        if streams is None:
            return None
        onset = streams.index(onset_s)
        starts = [t for t in (reply_started_s, after_s) if t is not None]
        earliest = max(0, streams.index(max(starts))) if starts else 0
        path = best_echo_path(
            streams.reference, streams.raw, onset, earliest=earliest, rate=streams.rate
        )
        if path is None:
            return None
        return EchoFreeOnset(self, streams.base, streams.reference, path, fitted_from=earliest)


@dataclass(frozen=True)
class AlignedStreams:
    """The raw capture (`raw`, from raw sample `base` of the stream on) and what was played
    over it (`reference`, on the same grid: a played sample sits where the capture stood when
    the output callback handed it over, so an echo comes `delay` samples after it)."""

    raw: np.ndarray
    reference: np.ndarray
    base: int
    raw_blocks: list[tuple[float, int, np.ndarray]]
    rate: int

    def index(self, at_s: float) -> int:
        """The index in `raw` of the sample captured at monotonic time `at_s`."""
        return round(position_at(self.raw_blocks, at_s, self.rate)) - self.base


class EchoFreeOnset:
    """Raw capture minus the fitted echo, block by block, for the blocks a Microphone hands
    out (matched to the raw tap by their stamps); the echo shifted where the path was followed
    to have moved (`steps`, vocal.duplex.echo_free.echo_follow: raw indices from base)."""

    def __init__(
        self,
        taps: OnsetTaps,
        base: int,
        reference: np.ndarray,
        path: EchoPath,
        steps: PathSteps | None = None,
        fitted_from: int = 0,
        moves: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self._taps, self._base, self._reference = taps, base, reference
        self.path = path
        self.steps = steps or PathSteps()
        #: The raw index (from base) the fit's stretches could start at (the reply's start).
        self.fitted_from = fitted_from
        #: The moves (raw index, samples) the reference was shifted by before it was fitted
        #: (`refitted`).
        self.moves = moves

    def followed(self, steps: PathSteps) -> EchoFreeOnset:
        """The same fit with the echo shifted by each step's samples from its index on."""
        return EchoFreeOnset(
            self._taps, self._base, self._reference, self.path, steps, self.fitted_from, self.moves
        )

    def refitted(self, onset_s: float) -> EchoFreeOnset | None:
        """The echo fitted again on the reply before `onset_s`, on the reference as the output
        played it: where this fit, followed, shows the echo moved (an output's latency moves
        in a reply's first seconds, even between two sentences), the reference is shifted to
        match, so that one path fits across the move (a stretch holding a 19-sample move fitted
        4-6 dB, either side alone 59 dB). None where nothing moved or nothing fits."""
        blocks = self._taps.raw.snapshot()
        if not blocks:
            return None
        onset = self.index_at(onset_s)
        steps = self.follow(self.fitted_from, onset)
        if not steps.steps:
            return None
        warped = shifted_reference(self._reference, self.path.lag + LEAD_TAPS, steps.steps)
        raw = joined(blocks, self._base, self._base + onset)
        path = best_echo_path(warped, raw, onset, earliest=self.fitted_from)
        if path is None:
            return None
        return EchoFreeOnset(
            self._taps, self._base, warped, path, fitted_from=self.fitted_from, moves=steps.steps
        )

    def estimate(self, start: int, stop: int) -> np.ndarray:
        """The fitted echo (steps applied) at raw samples `start` to `stop` (from base)."""
        pieces, at = [], start
        bounds = [i for i, _ in self.steps.steps if start < i < stop] + [stop]
        for bound in bounds:
            path = self.path
            shift = self.steps.shift_at(at)
            if shift:
                path = EchoPath(path.lag + shift, path.h, path.removed_db)
            pieces.append(echo_estimate(self._reference, path, at, bound))
            at = bound
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def follow(self, start: int, stop: int | None = None) -> PathSteps:
        """Where the echo moved from raw index `start` (from base) to `stop` (default: the
        newest capture), by the fitted echo's shift in windows (vocal.duplex.echo_free.echo_follow);
        `followed` applies it."""
        blocks = self._taps.raw.snapshot()
        if not blocks:
            return PathSteps()
        newest = blocks[-1][1] + blocks[-1][2].shape[0] - self._base
        stop = newest if stop is None else min(stop, newest)
        raw = joined(blocks, self._base, self._base + stop)
        return follow_path(raw, self.estimate, max(0, start), stop)

    def index_at(self, at_s: float) -> int:
        """The raw index (from base) of the sample captured at monotonic time `at_s`."""
        blocks = self._taps.raw.snapshot()
        return round(position_at(blocks, at_s, self._taps.raw.sample_rate)) - self._base

    @property
    def usable(self) -> bool:
        """Whether the fit removed enough echo to hear the person from the raw capture."""
        return self.path.removed_db >= MIN_ECHO_REMOVED_DB

    @property
    def removed_db(self) -> float:
        """Echo removed on the fit stretch, dB."""
        return round(self.path.removed_db, 1)

    @property
    def delay_ms(self) -> float:
        """The echo's delay from the output callback to the input callback, ms (what an echo
        profile keeps: vocal.duplex.canceller.profile)."""
        return round(self.path.delay_samples * 1000 / SAMPLE_RATE, 1)

    def raw_for(self, block: Block) -> tuple[int, np.ndarray] | None:
        """The raw record made in the same callback as a captured block (the last one stamped
        at or before it): (its first sample's index in the tap, its samples), or None if the
        tap no longer has it."""
        for stamp, before, samples in reversed(self._taps.raw.snapshot()):
            if stamp <= block.captured_at_s:
                if samples.shape[0] != block.samples.shape[0]:
                    return None
                return before - self._base, samples
        return None

    def samples_for(self, block: Block) -> np.ndarray | None:
        """The echo-free raw samples of a captured block (None if the tap no longer has it)."""
        found = self.raw_for(block)
        if found is None:
            return None
        start, samples = found
        return samples - self.estimate(start, start + samples.shape[0])


class OnsetFit:
    """A fit (`rebuild`, 0.3-0.5 s of CPU here) run in a thread from the moment a barge-in
    fires, so that it overlaps the person's words instead of delaying what follows them."""

    def __init__(self, rebuild: Callable[[], EchoFreeOnset | None]) -> None:
        self._rebuild = rebuild
        self._result: EchoFreeOnset | None = None
        #: How long the fit took (None until it has ended).
        self.fit_s: float | None = None
        self._thread = threading.Thread(target=self._run, name="vocal-onset-fit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self._result = self._rebuild()
        except Exception:  # a failed fit only means the canceller's output
            self._result = None
        self.fit_s = time.monotonic() - started

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout_s: float | None = None) -> EchoFreeOnset | None:
        """The fit, once it has ended (None: none possible, failed, or not within
        `timeout_s`)."""
        self._thread.join(timeout_s)
        return None if self._thread.is_alive() else self._result


__all__ = ["EchoFreeOnset", "OnsetFit", "MIN_ECHO_REMOVED_DB", "OnsetTaps"]
