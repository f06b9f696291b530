"""Echo cancellation: WebRTC AEC3 through `livekit.rtc.AudioProcessingModule`.

One APM for the whole process (`shared_apm`), fed in exact 10 ms frames: every block the output
callback plays goes to `process_reverse_stream`, every block the input callback captures goes
through `process_stream` and comes back cleaned. `EchoCanceller` holds that wiring; its two
methods are the audio-callback hooks of `vocal.audio.devices`:

    aec = EchoCanceller(render_sample_rate=player_rate)
    Player(player_rate, on_block=aec.render)       # the reverse (far-end) stream
    Microphone(16_000, on_block=aec.capture)       # returns the cleaned block

Why the callbacks: feeding the reference from a buffer in the capture thread put the reference
after its echo; in the callbacks it always reaches AEC3 before its echo is captured, and AEC3's
delay estimator finds the rest.

Blocks need not be multiples of 10 ms: render remainders wait in a one-frame buffer, and
captured samples come out `capture_delay_frames` late, the least delay that returns every
block whole and cleaned. Buffers are allocated once; the callbacks copy into them.

Output rates: AEC3 resamples a reverse stream at another rate itself, as long as a 10 ms frame
is a whole number of samples. Rates with none (22 050 and 11 025 Hz: espeak-ng's and piper's)
would drift off the echo, so their samples are repeated 2 or 4 times into 44.1 kHz frames: no
latency (a streaming resampler's delay would put the reference behind its echo), and AEC3's
own resampling removes the images.

Once the far end has been quiet for `RAW_WHEN_QUIET_S`, `capture` hands back the raw samples:
AEC3's suppressor keeps colouring near-end speech after the echo is gone, and Whisper lost an
interruption's words to it. `EchoCanceller.attenuation_db` tells, per captured block, how much
the canceller took out; the barge-in detector fires sooner while it is high.

The measurements behind each choice are in docs/design.md ("Measured facts behind the
constants").

`erle_db` and `convergence_time_s` measure what the canceller achieves (benchmarks/aec).
"""

from __future__ import annotations

import collections
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vocal.audio.room_gate import mean_square_db
from vocal.duplex.canceller.aec_frames import (
    CAPTURE_SAMPLE_RATE,
    ENERGY_FLOOR,
    Frame,
    RenderActivity,
    frame_frames,
    repeat_factor,
)
from vocal.duplex.canceller.drift import compensator_for
from vocal.errors import EngineError

#: AEC3 works on 10 ms frames, exactly.
FRAME_MS = 10
#: After the far end has been quiet this long its echo has died away (output latency ~40 ms +
#: room ~30-80 ms + reverberant tail; the barge-in detector's tail window, 300 ms, covered every
#: residual seen), and `capture` hands back raw samples: see EchoCanceller's raw_when_quiet_s.
RAW_WHEN_QUIET_S = 0.4
#: Captured blocks whose levels `EchoCanceller.attenuation_db` keeps (32 ms each: ~2 s).
LEVELS_KEPT = 64
#: Played blocks whose levels `EchoCanceller.echo_levels_db` keeps (~10-20 ms each: >= 1.2 s).
RENDER_LEVELS_KEPT = 128
#: Where the echo of a played block can be in the capture, relative to the capture stamp: from
#: the output callback to the microphone callback it took 0.12-0.16 s on the room harness
#: (PulseAudio's output latency + the room's 50 ms + its tail; benchmarks/converse traces);
#: `echo_levels_db` takes the loudest played block in this window, so a wider one only makes
#: the echo predicted louder (a person must stand out more), never missed.
ECHO_WINDOW_S = (0.04, 0.4)
#: With the echo's delay known (an echo profile's `stream_delay_ms`), the window is placed
#: around it: from this much before it (the delay jitters by a block or two between
#: streams) to this much after (the room's tail), never narrower than `ECHO_WINDOW_S`'s top.
#: A 600 ms room puts the echo past 0.4 s, where the default window would predict none.
ECHO_WINDOW_AROUND_DELAY_S = (0.12, 0.27)
#: A block quieter than this (energy summed over its frames; ~-90 dBFS over 32 ms) has nothing
#: to attenuate.
_SILENT_ENERGY = 1e-9 * 512
#: The cleaned energy's floor, in frames of `ENERGY_FLOOR`: a suppressor's exact zeros give
#: a finite attenuation (~100 dB).
_SILENT_FLOOR_FRAMES = 512
#: A callback later than its block's duration plus this is a glitch: the stream stalled, the
#: echo path moved, and AEC3 re-converges (~0.7 s measured on the room harness after a 130 ms
#: output stall; PortAudio's underflow flag did not report it through ALSA's pulse plugin).
CALLBACK_GLITCH_S = 0.04


@dataclass(frozen=True)
class AecOptions:
    """How the process's APM is configured. Noise suppression and the high-pass filter are on:
    docs/design.md measured ~33 dB ERLE with AEC alone and ~45 dB with both."""

    noise_suppression: bool = True
    high_pass_filter: bool = True
    auto_gain_control: bool = False


_apm_lock = threading.Lock()
_apm: Any = None
_apm_options: AecOptions | None = None


def shared_apm(options: AecOptions = AecOptions()) -> Any:
    """The process's one `AudioProcessingModule` (created on first use, ~0.3 s to import
    livekit: start it off the critical path). Its adaptive filter carries over from sentence to
    sentence, so the canceller converges once per process, not once per sentence."""
    global _apm, _apm_options
    with _apm_lock:
        if _apm is None:
            _apm = fresh_apm(options)
            _apm_options = options
        elif options != _apm_options:
            raise ValueError(f"the process's APM already runs with {_apm_options}")
        return _apm


def fresh_apm(options: AecOptions = AecOptions()) -> Any:
    """An `AudioProcessingModule` of its own, configured as `shared_apm`'s: for running the
    canceller again offline on recorded streams (`vocal doctor --echo`), beside the process's."""
    try:
        from livekit.rtc.apm import AudioProcessingModule
    except ImportError as exc:  # pragma: no cover - livekit is a hard dependency
        raise EngineError(
            f"echo cancellation needs livekit ({exc})", hint="pip install livekit"
        ) from None
    return AudioProcessingModule(
        echo_cancellation=True,
        noise_suppression=options.noise_suppression,
        high_pass_filter=options.high_pass_filter,
        auto_gain_control=options.auto_gain_control,
    )


def _reset_shared_apm() -> None:
    """Forget the process's APM (tests and benchmarks that need a fresh, unconverged one)."""
    global _apm, _apm_options
    with _apm_lock:
        _apm, _apm_options = None, None


#: A known echo delay longer than this is mostly taken off the reverse stream by vocal itself
#: (`reference_shift_ms`): AEC3's delay estimator does not reach that far (on the room harness
#: a 600 ms room, 670 ms from callback to callback, was cancelled by 11 dB; pywebrtc-audio #5
#: saw 0.1 dB at 600 ms), and a hint (`set_stream_delay_ms`) alone did not bring it back.
SHIFT_ABOVE_MS = 250
#: What the shift leaves for AEC3 to find: the delay moves between streams by a block or two,
#: and a reference that comes after its echo is the one thing no canceller recovers from.
SHIFT_LEAVES_MS = 120


def reference_shift_ms(stream_delay_ms: int | None) -> int:
    """How much `EchoCanceller` delays the reverse stream itself for a known echo delay (whole
    10 ms frames; 0 when short or unknown)."""
    if stream_delay_ms is None or stream_delay_ms <= SHIFT_ABOVE_MS:
        return 0
    return (stream_delay_ms - SHIFT_LEAVES_MS) // FRAME_MS * FRAME_MS


def echo_window_s(stream_delay_ms: int | None) -> tuple[float, float]:
    """Where the echo of a played block can be in the capture (see `ECHO_WINDOW_S`), for an
    echo delay known in advance (None: unknown)."""
    if stream_delay_ms is None:
        return ECHO_WINDOW_S
    delay_s = stream_delay_ms / 1000
    before_s, after_s = ECHO_WINDOW_AROUND_DELAY_S
    return max(0.02, delay_s - before_s), max(ECHO_WINDOW_S[1], delay_s + after_s)


class EchoCanceller:
    """The callback-side wiring of the process's APM: `render` for what is played, `capture`
    for what is recorded.

    `render` runs in the output callback, `capture` in the input callback (two threads: each
    method touches only its own buffers; livekit's FFI keeps the APM behind a mutex). Neither
    raises: an APM error is counted in `errors` and the block passes through unchanged, because
    an exception in a PortAudio callback would kill the stream.

    Args:
        render_sample_rate: the Player's rate.
        capture_sample_rate: the Microphone's rate (16 kHz in vocal).
        options: the APM's configuration (must match the process's APM if one exists).
        stream_delay_ms: the echo's delay from an echo profile (vocal.duplex.canceller.profile;
            None: unknown, the default). It places the window `echo_levels_db` predicts the
            echo from (`echo_window_s`) and the raw hand-back after it. A delay longer than
            `SHIFT_ABOVE_MS` is mostly taken off by delaying the reverse stream itself
            (`reference_shift_ms`), and AEC3 is told the rest (`set_stream_delay_ms`: the
            initial alignment of its render buffer).
        drift_ppm: the profile's output clock drift (ppm), compensated (`drift.compensator_for`).
        glitch_slack_s: how much later than its block's duration a callback may come before it
            counts as a glitch (`glitches`). A stream with a deep buffer absorbs stalls up to
            that buffer's length: pass about its latency.
        raw_when_quiet_s: once the far end has been quiet this long (its echo has died away),
            `capture` hands back the raw samples instead of the cleaned ones (same delay, so
            the stream stays continuous; also before anything has played); None: always
            cleaned (ERLE measurements). AEC3's suppressor and noise
            suppression keep colouring near-end speech after the echo is gone: on the room
            harness the person's words after a barge-in came out 4-6 dB down and Whisper's
            word error rate on them rose from ~0 (raw) to 0.08-0.75 (cleaned). APM still
            processes every frame, so it stays current if the far end resumes.
        apm: an APM to use instead of the process's (tests).
    """

    def __init__(
        self,
        *,
        render_sample_rate: int = CAPTURE_SAMPLE_RATE,
        capture_sample_rate: int = CAPTURE_SAMPLE_RATE,
        options: AecOptions = AecOptions(),
        stream_delay_ms: int | None = None,
        drift_ppm: float = 0.0,
        glitch_slack_s: float = CALLBACK_GLITCH_S,
        raw_when_quiet_s: float | None = RAW_WHEN_QUIET_S,
        apm: Any = None,
        log_levels: bool = False,
    ) -> None:
        if frame_frames(capture_sample_rate) is None:
            raise ValueError(f"capture rate {capture_sample_rate} Hz has no whole 10 ms frame")
        self.apm = apm if apm is not None else shared_apm(options)
        self.render_sample_rate = render_sample_rate
        self.capture_sample_rate = capture_sample_rate
        self.stream_delay_ms = stream_delay_ms
        self.echo_window_s = echo_window_s(stream_delay_ms)
        self.errors = 0
        self.last_error: str | None = None
        self.render_frames = 0  # 10 ms frames given to the reverse stream
        self.activity = RenderActivity()
        #: Callbacks that came late (see CALLBACK_GLITCH_S), output and input.
        self.glitch_slack_s = glitch_slack_s
        # The echo outlasts the far end by its delay: with a long one known, raw samples wait
        # until its window has passed too.
        if raw_when_quiet_s is not None and stream_delay_ms is not None:
            raw_when_quiet_s = max(raw_when_quiet_s, self.echo_window_s[1])
        self.raw_when_quiet_s = raw_when_quiet_s
        self.raw_frames = 0  # 10 ms frames handed back raw (see raw_when_quiet_s)
        self.render_glitches = 0
        self.capture_glitches = 0
        self._last_render_s: float | None = None
        self._last_capture_s: float | None = None
        self.capture_frames = 0  # 10 ms frames cleaned
        # Render: a rate with a whole 10 ms frame goes to AEC3 as it is; 22 050 and 11 025 Hz
        # with each sample repeated (see the module docstring); anything odder through soxr.
        self._resampler: Any = None
        self._repeat = repeat_factor(render_sample_rate) or 1
        self._repeated = np.zeros(0, np.float32)
        self.drift = compensator_for(drift_ppm, render_sample_rate)  # None: no drift to follow
        if repeat_factor(render_sample_rate) is None:
            import soxr

            self._resampler = soxr.ResampleStream(
                render_sample_rate, CAPTURE_SAMPLE_RATE, 1, dtype="float32", quality="QQ"
            )
            self._render = Frame(CAPTURE_SAMPLE_RATE)
        else:
            self._render = Frame(render_sample_rate * self._repeat)
        self._render_pending = np.zeros(self._render.frames, np.float32)
        # The reverse stream's own delay line (`reference_shift_ms`): 10 ms frames in a ring,
        # each frame handed to AEC3 that many frames after it was played.
        self.reference_shift_ms = reference_shift_ms(stream_delay_ms)
        # AEC3 is told the delay only with the shift, as what is left of it. A short delay
        # is its own to find: told it (10 runs each, benchmarks/converse), ERLE 1 s into a reply
        # was 42 against 45 dB on the design room and 26 against 41 dB with clock drift.
        self._apm_delay_ms = None
        if stream_delay_ms is not None and self.reference_shift_ms:
            self._apm_delay_ms = stream_delay_ms - self.reference_shift_ms
        shift_frames = self.reference_shift_ms // FRAME_MS
        self._shift_ring = (
            np.zeros((shift_frames, self._render.frames), np.float32) if shift_frames else None
        )
        self._shift_at = 0
        self._shift_out = np.zeros(self._render.frames, np.float32)
        self._render_fill = 0
        # Capture: raw samples wait in `_capture_pending` for a whole frame; cleaned ones wait in
        # the ring until the callback hands them back `capture_delay_frames` late.
        self._capture = Frame(capture_sample_rate)
        self._capture_pending = np.zeros(self._capture.frames, np.float32)
        self._capture_fill = 0
        self._cleaned = np.zeros(self._capture.frames, np.float32)
        self._ring = np.zeros(0, np.float32)
        self._ring_read = 0
        self._ring_count = 0
        self.capture_delay_frames: int | None = None  # fixed by the first captured block
        self.capture_shortfalls = 0  # blocks that had to be padded (block size changed)
        # What the canceller took out of each captured block (`attenuation_db`): energies of
        # the raw and the cleaned frames processed in one callback, with the callback's end.
        self._raw_energy = 0.0
        self._cleaned_energy = 0.0
        self._energy_frames = 0  # samples behind those energies (whole 10 ms frames)
        self._levels: collections.deque[tuple[float, float, float, int]] = collections.deque(
            maxlen=LEVELS_KEPT
        )
        #: (output callback time, mean square) of the last played blocks (`echo_levels_db`).
        self._render_levels: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=RENDER_LEVELS_KEPT
        )
        #: Diagnostics (`log_levels`): (time, raw energy, cleaned energy, frames) of every
        #: captured block and (time, energy, frames) of every played block, to evaluate
        #: double-talk rules offline (benchmarks/converse --traces).
        self.capture_log: list[tuple[float, float, float, int]] | None = [] if log_levels else None
        self.render_log: list[tuple[float, float, int]] | None = [] if log_levels else None

    # -- the output callback ------------------------------------------------------------------
    def render(self, block: np.ndarray) -> None:
        """Give one played block (mono float32, any length) to AEC3's reverse stream."""
        try:
            now = time.monotonic()
            last, self._last_render_s = self._last_render_s, now
            if last is not None and now - last > (
                block.shape[0] / self.render_sample_rate + self.glitch_slack_s
            ):
                self.render_glitches += 1
            self.activity.update(block, now)
            if block.shape[0]:
                energy = float(np.dot(block, block))
                self._render_levels.append((now, energy / block.shape[0]))
                if self.render_log is not None:
                    self.render_log.append((now, energy, block.shape[0]))
            if self.drift is not None:
                block = self.drift.process(block)
            if self._resampler is not None:
                block = self._resampler.resample_chunk(block)
            elif self._repeat > 1:
                block = self._repeat_block(block)
            self._feed_render(block)
        except Exception as exc:  # never let an APM error kill the output stream
            self._count_error(exc)

    def _repeat_block(self, block: np.ndarray) -> np.ndarray:
        k, n = self._repeat, block.shape[0]
        if self._repeated.shape[0] < n * k:  # once per larger block size
            self._repeated = np.zeros(n * k, np.float32)
        out = self._repeated[: n * k]
        for j in range(k):
            out[j::k] = block
        return out

    def _feed_render(self, block: np.ndarray) -> None:
        frame, pending = self._render, self._render_pending
        size, n, pos = frame.frames, block.shape[0], 0
        while pos < n:
            take = min(size - self._render_fill, n - pos)
            pending[self._render_fill : self._render_fill + take] = block[pos : pos + take]
            self._render_fill += take
            pos += take
            if self._render_fill == size:
                frame.load(self._shifted(pending))
                self.apm.process_reverse_stream(frame.audio_frame)
                self._render_fill = 0
                self.render_frames += 1

    def _shifted(self, frame: np.ndarray) -> np.ndarray:
        """The frame played `reference_shift_ms` ago (silence at first); keeps `frame`."""
        ring = self._shift_ring
        if ring is None:
            return frame
        at = self._shift_at
        self._shift_out[:] = ring[at]
        ring[at] = frame
        self._shift_at = (at + 1) % ring.shape[0]
        return self._shift_out

    # -- the input callback -------------------------------------------------------------------
    def capture(self, block: np.ndarray) -> np.ndarray:
        """Clean one captured block (mono float32) in place and return it.

        The returned samples are the cleaned signal `capture_delay_frames` behind the input.
        """
        n = block.shape[0]
        now = time.monotonic()
        last, self._last_capture_s = self._last_capture_s, now
        if last is not None and now - last > n / self.capture_sample_rate + self.glitch_slack_s:
            self.capture_glitches += 1
        if self.capture_delay_frames is None:
            size = self._capture.frames
            self.capture_delay_frames = size - math.gcd(n, size)
            self._ring = np.zeros(n + 2 * size, np.float32)
            self._ring_count = self.capture_delay_frames  # start with that much silence
        try:
            self._raw_energy = self._cleaned_energy = 0.0
            self._energy_frames = 0
            self._feed_capture(block)
        except Exception as exc:
            self._count_error(exc)
            return block
        self._pop(block)
        made = time.monotonic()
        levels = (made, self._raw_energy, self._cleaned_energy, self._energy_frames)
        self._levels.append(levels)
        if self.capture_log is not None:
            self.capture_log.append(levels)
        return block

    def attenuation_db(self, captured_at_s: float) -> float | None:
        """How far the canceller brought down the block a Microphone stamped `captured_at_s`
        (raw energy over cleaned, in dB; None if unknown or silent).

        During echo alone AEC3 takes 30-90 dB out of every block once converged; the person
        talking passes through it, so a block with the person in it comes out only 0-20 dB
        down (measured on the room harness: 9-15 dB at the first chunk of their speech). The
        barge-in detector uses it to tell a person from echo Silero mistakes for speech.
        Microphone stamps a block just after its callback (this hook) returns: the block's
        record is the last one made at or before `captured_at_s`."""
        block = self._captured_block(captured_at_s)
        if block is None or block[1] <= _SILENT_ENERGY:
            return None
        _, raw, cleaned, _ = block
        return 10 * math.log10(raw / max(cleaned, ENERGY_FLOOR * _SILENT_FLOOR_FRAMES))

    def echo_levels_db(self, captured_at_s: float) -> tuple[float, float | None] | None:
        """(raw level of the block a Microphone stamped `captured_at_s`, loudest played level
        whose echo can be in it) in dB of mean square; the played level is None when nothing
        was played in `echo_window_s` before it (the far end quiet). None if the block is unknown.

        Their difference is the echo path's gain while only echo is captured; a person in the
        room adds to the raw level what the played level does not predict. The barge-in
        detector tracks that gain and wants a speech run to rise above it
        (`BargeInOptions.double_talk_db`): residual echo that AEC3 let through after losing the
        echo path is still only echo at the raw microphone."""
        block = self._captured_block(captured_at_s)
        if block is None:
            return None
        _, raw, _, frames = block
        lo, hi = captured_at_s - self.echo_window_s[1], captured_at_s - self.echo_window_s[0]
        loudest = None
        for at_s, level in reversed(self._render_levels.copy()):
            if at_s <= lo:
                break
            if at_s <= hi and (loudest is None or level > loudest):
                loudest = level
        render_db = None if loudest is None else mean_square_db(loudest)
        return mean_square_db(raw / frames if frames else 0.0), render_db

    def _captured_block(self, captured_at_s: float) -> tuple[float, float, float, int] | None:
        """The levels record (made at, raw energy, cleaned energy, frames) of the block a
        Microphone stamped `captured_at_s`: the last one made at or before it (None: unknown)."""
        for block in reversed(self._levels.copy()):
            if block[0] <= captured_at_s:
                return block
        return None

    def _feed_capture(self, block: np.ndarray) -> None:
        frame, pending = self._capture, self._capture_pending
        size, n, pos = frame.frames, block.shape[0], 0
        while pos < n:
            take = min(size - self._capture_fill, n - pos)
            pending[self._capture_fill : self._capture_fill + take] = block[pos : pos + take]
            self._capture_fill += take
            pos += take
            if self._capture_fill == size:
                frame.load(pending)
                if self._apm_delay_ms is not None:
                    self.apm.set_stream_delay_ms(self._apm_delay_ms)
                self.apm.process_stream(frame.audio_frame)
                self._raw_energy += float(np.dot(pending, pending))
                self._energy_frames += size
                frame.unload(self._cleaned)
                self._cleaned_energy += float(np.dot(self._cleaned, self._cleaned))
                if self._echo_gone():
                    self._push(pending)  # the raw frame: nothing left to cancel
                    self.raw_frames += 1
                else:
                    self._push(self._cleaned)
                self._capture_fill = 0
                self.capture_frames += 1

    def _echo_gone(self) -> bool:
        quiet = self.raw_when_quiet_s
        return quiet is not None and self.activity.quiet_for_s(time.monotonic()) >= quiet

    def _push(self, samples: np.ndarray) -> None:
        n, cap = samples.shape[0], self._ring.shape[0]
        if self._ring_count + n > cap:  # a larger block than the first: grow (rare)
            self._ring = np.concatenate([self._read_ring(self._ring_count), np.zeros(cap + n)])
            self._ring = self._ring.astype(np.float32)
            self._ring_read = 0
            cap = self._ring.shape[0]
        start = (self._ring_read + self._ring_count) % cap
        first = min(n, cap - start)
        self._ring[start : start + first] = samples[:first]
        self._ring[: n - first] = samples[first:]
        self._ring_count += n

    def _read_ring(self, n: int) -> np.ndarray:
        cap = self._ring.shape[0]
        idx = (self._ring_read + np.arange(n)) % cap
        return self._ring[idx]

    def _pop(self, out: np.ndarray) -> None:
        n, cap = out.shape[0], self._ring.shape[0]
        have = min(n, self._ring_count)
        first = min(have, cap - self._ring_read)
        out[:first] = self._ring[self._ring_read : self._ring_read + first]
        out[first:have] = self._ring[: have - first]
        if have < n:  # only when the block size changed mid-stream
            out[have:] = 0.0
            self.capture_shortfalls += 1
        self._ring_read = (self._ring_read + have) % cap
        self._ring_count -= have

    @property
    def glitches(self) -> int:
        """Late callbacks so far, output and input (for `BargeInDetector(glitches=...)`)."""
        return self.render_glitches + self.capture_glitches

    def _count_error(self, exc: Exception) -> None:
        self.errors += 1
        self.last_error = str(exc)
