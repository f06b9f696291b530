"""The speaking pipeline: text -> sentences -> synthesis -> speech check -> owned output.

`Speech` synthesizes sentence i+1 in a worker thread while sentence i plays, so a long reply
starts after one sentence's synthesis and never pauses between sentences when synthesis is
faster than real time. It is a library (no Typer): `vocal speak` wraps it thinly and
`vocal converse` reuses it, wrapped in a turn (conch, control socket, history).

Threads: a *worker* loads the engine (the caller passes a loader so that loading overlaps
opening the audio device) and synthesizes into a small queue; a *feeder* hands each sentence
to the output once the one before it has started playing, so the output holds at most the
sentence playing and the next (skip can then drop them cleanly). `stop()` is the kill handle:
any thread (a control socket, barge-in, Ctrl-C) may call it; sound stops within one output
block. `pause()`, `resume()`, `skip_forward()` and `skip_back()` are the other control hooks.

Boundaries: every played sentence records the frame of the output's reference buffer where its
first sample went out (`SentenceRecord.start_frame`), measured in the audio callback, so
history, skip and barge-in can line up text, reference and microphone exactly.

The speech check: each synthesized sentence must have a loud-enough peak and quiet pauses
(speech has them; noise and hum have none). One that fails is reported on stderr, not played.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vocal.errors import EngineError, UsageError, VocalError
from vocal.speaking.text import (
    MAX_TEXT_BYTES,
    MAX_TEXT_CHARS,
    check_text_length,
    clean_text,
    extract_quotes,
    speakable_lines,
    split_sentences,
)
from vocal.timeline import mark

if TYPE_CHECKING:
    import numpy as np

    from vocal.config import Settings
    from vocal.floor.pieces import PieceOutcome
    from vocal.tts import TtsEngine

#: Sentences synthesized ahead of the feeder: enough to hide one slow sentence, few enough that
#: a stop wastes little synthesis.
LOOKAHEAD_SENTENCES = 2
#: The speech check. Peak: engines normalize to -6..-1 dBFS; 0.02 (-34 dBFS) is a broken voice.
MIN_PEAK = 0.02
#: Quiet pauses: the 10th percentile of 20 ms frame levels must sit 20 dB (x0.1) under the
#: 95th. Measured ratios: hibari, espeak-ng and piper speech 0.0-0.003 (one-word sentences
#: included); white noise 0.91; a 440 Hz tone 0.98.
MAX_QUIET_TO_LOUD = 0.1
_CHECK_FRAME_S = 0.02
_POLL_S = 0.005

Report = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"vocal: {message}", file=sys.stderr, flush=True)


# -- text to utterances -------------------------------------------------------------------------
def utterances_of(text: str, *, quotes: bool = False) -> list[str]:
    """The utterances to speak: the whole text as one, or (`quotes`) each blockquote paragraph."""
    if quotes:
        return [q for q in extract_quotes(text) if q.strip()]
    return [text] if text.strip() else []


def sentences_of(utterance: str, *, english_only: bool) -> list[str]:
    """Clean `utterance` (markdown, code, URLs, emoji) and split it into sentences."""
    return split_sentences(clean_text(utterance, english_only=english_only))


#: A first sentence at least this long is spoken in two pieces when it has a clause break:
#: synthesis time grows with length (hibari: 21 ms for "Hello there," against 55 ms for
#: "Hello there, I have finished the refactoring."), and the first piece is what the listener
#: waits for. The comma's pause is in the speech anyway.
FIRST_PIECE_MIN_CHARS = 40


def split_first_clause(sentence: str) -> list[str]:
    """`sentence` as [head, rest] at its first clause break (after 2+ words, within the first
    60 %), or [sentence] when it is short or has no such break."""
    if len(sentence) < FIRST_PIECE_MIN_CHARS:
        return [sentence]
    for index, char in enumerate(sentence[: int(len(sentence) * 0.6)]):
        if char in ",;:" and index + 1 < len(sentence) and sentence[index + 1] == " ":
            head, rest = sentence[: index + 1].strip(), sentence[index + 1 :].strip()
            if len(head.split()) >= 2 and rest:
                return [head, rest]
    return [sentence]


def has_speakable_text(text: str, *, quotes: bool = False) -> bool:
    """True if any utterance of `text` has a line worth speaking (in any script)."""
    return any(speakable_lines(u, english_only=False) for u in utterances_of(text, quotes=quotes))


# -- the speech check ----------------------------------------------------------------------------
def check_speech(samples: np.ndarray, sample_rate: int) -> str | None:
    """Why `samples` is not speech (a short reason), or None when it passes."""
    import numpy as np

    if samples.size == 0:
        return "no audio"
    if not np.all(np.isfinite(samples)):
        return "samples are not finite numbers"
    peak = float(np.max(np.abs(samples)))
    if peak < MIN_PEAK:
        return f"too quiet (peak {peak:.4f})"
    frame = max(1, round(_CHECK_FRAME_S * sample_rate))
    count = samples.size // frame
    if count < 5:
        return "too short to be speech"
    levels = np.sqrt(np.mean(np.square(samples[: count * frame].reshape(count, frame)), axis=1))
    levels.sort()
    loud = _percentile(levels, 95)
    quiet = _percentile(levels, 10)
    if loud <= 0 or quiet > loud * MAX_QUIET_TO_LOUD:
        return f"no quiet pauses (noise or a tone: quiet/loud {quiet / max(loud, 1e-12):.2f})"
    return None


def _percentile(ascending: np.ndarray, percent: float) -> float:
    """`np.percentile(ascending, percent)` (linear interpolation) of a sorted array. np.percentile
    itself imports numpy.ma on its first call (15-25 ms here), on the first sentence's path."""
    position = (ascending.size - 1) * percent / 100
    low = int(position)
    high = min(low + 1, ascending.size - 1)
    return float(ascending[low] + (ascending[high] - ascending[low]) * (position - low))


# -- the output and its boundaries -------------------------------------------------------------
def _consumed_frames(player: Any) -> int:
    """Frames of queued audio the player has sent to the device (not counting silence)."""
    return int(player.consumed_frames)


class FrameTracker:
    """Maps positions in an output's queue to frames of its reference buffer.

    Runs in the audio callback as the Player's `on_block` hook (after the block was written to
    the reference): a mark at queue frame q resolves to the reference frame where that sample
    went out, and to the time of that callback. Allocation-free apart from the resolved entries;
    no locks (deque appends and pops are atomic).
    """

    def __init__(self, chained: Callable[[np.ndarray], None] | None = None) -> None:
        self.player: Any = None
        self._chained = chained
        self._marks: collections.deque[tuple[object, int]] = collections.deque()
        self.resolved: dict[object, tuple[int, float]] = {}
        self._last_consumed = 0

    def mark(self, key: object, queue_frame: int) -> None:
        """Resolve `key` when the sample at `queue_frame` of the queue is played (again, for a
        key marked before: a sentence queued anew after a skip)."""
        self.resolved.pop(key, None)
        self._marks.append((key, queue_frame))

    def forget(self) -> None:
        """Drop unresolved marks (their audio was flushed) and resynchronize with the player."""
        self._marks.clear()
        if self.player is not None:
            self._last_consumed = _consumed_frames(self.player)

    def on_block(self, block: np.ndarray) -> None:
        player = self.player
        if player is not None:
            consumed = _consumed_frames(player)
            if consumed > self._last_consumed and self._marks:
                block_start = player.reference.total_frames - block.shape[0]
                now = time.monotonic()
                while self._marks and self._marks[0][1] < consumed:
                    key, queue_frame = self._marks.popleft()
                    offset = max(0, queue_frame - self._last_consumed)
                    self.resolved[key] = (block_start + offset, now)
            self._last_consumed = consumed
        if self._chained is not None:
            self._chained(block)


def open_speech_output(
    sample_rate: int,
    *,
    output: str | Path | None = None,
    device: str | int | None = None,
    volume: float = 1.0,
    on_block: Callable[[np.ndarray], None] | None = None,
) -> Any:
    """An opened output for `Speech`: a WAV file (`output`) or a Player with a FrameTracker.

    `on_block` (AEC's reverse stream in `converse`) still sees every block the Player plays.
    """
    from vocal.audio.devices import Player, WavSink

    if output is not None:
        return WavSink(output, sample_rate, volume=volume).open()
    tracker = FrameTracker(on_block)
    player = Player(sample_rate, device=device, volume=volume, on_block=tracker.on_block)
    tracker.player = player
    player.frame_tracker = tracker
    return player.open()


def flush_output(output: Any, *, resume: bool = True) -> int:
    """Drop what the output has queued but not played, keeping its stream (and reference)
    running; returns the frames dropped. With `resume=False` a Player is left paused, so the
    caller can queue new audio before it plays on (a finishing Player would otherwise end).
    """
    if not hasattr(output, "flush"):  # a WavSink: everything is "played" at once
        return 0
    was_paused = output.paused
    output.pause()
    dropped = int(output.flush())  # the dropped frames count as consumed (Player.flush)
    if resume and not was_paused:
        output.resume()
    return dropped


# -- results -------------------------------------------------------------------------------------
@dataclass
class SentenceRecord:
    """One sentence: its text, synthesis times and where it went in the output."""

    index: int
    utterance: int
    text: str
    synth_started_at_s: float | None = None
    synth_done_at_s: float | None = None
    frames: int = 0  # at the output's rate
    start_frame: int | None = None  # in the output's reference buffer; None: not played
    started_at_s: float | None = None  # time.monotonic() of the callback that played it first
    failed_check: str | None = None
    played: bool = False

    @property
    def synth_s(self) -> float:
        if self.synth_started_at_s is None or self.synth_done_at_s is None:
            return 0.0
        return self.synth_done_at_s - self.synth_started_at_s

    def to_dict(self, sample_rate: int) -> dict[str, Any]:
        return {
            "index": self.index, "utterance": self.utterance, "text": self.text,
            "synth_ms": round(self.synth_s * 1000, 1),
            "audio_s": round(self.frames / sample_rate, 3),
            "start_frame": self.start_frame, "played": self.played,
            "failed_check": self.failed_check,
        }  # fmt: skip


@dataclass
class SpeechResult:
    """What was spoken, how fast, and whether it was stopped."""

    engine: str
    voice: str | None
    sample_rate: int
    sentences: list[SentenceRecord] = field(default_factory=list)
    started_at_s: float = 0.0  # time.monotonic() when the text was known
    engine_ready_at_s: float | None = None
    #: Sentences synthesized in the speech worker process (vocal.speaking.worker), not this one.
    worker_sentences: int = 0
    first_audio_at_s: float | None = None
    finished_at_s: float | None = None
    stopped: bool = False
    #: The turn it was spoken in (`vocal speak` to the speaker), else None.
    turn: TurnOutcome | None = None

    @property
    def played(self) -> list[SentenceRecord]:
        return [s for s in self.sentences if s.played]

    @property
    def failed(self) -> list[SentenceRecord]:
        return [s for s in self.sentences if s.failed_check]

    @property
    def audio_s(self) -> float:
        return sum(s.frames for s in self.sentences if s.synth_done_at_s) / self.sample_rate

    @property
    def synth_s(self) -> float:
        return sum(s.synth_s for s in self.sentences)

    @property
    def real_time_factor(self) -> float | None:
        """Synthesis time over audio time (lower is faster; under 1 keeps up with playback)."""
        return self.synth_s / self.audio_s if self.audio_s else None

    @property
    def first_audio_ms(self) -> float | None:
        """From the text being known to the first sample going to the output."""
        if self.first_audio_at_s is None:
            return None
        return (self.first_audio_at_s - self.started_at_s) * 1000

    def gaps_ms(self) -> list[float]:
        """Silence inserted between consecutive played sentences (from the reference)."""
        played = [s for s in self.played if s.start_frame is not None]
        return [
            (b.start_frame - (a.start_frame + a.frames)) * 1000 / self.sample_rate
            for a, b in zip(played, played[1:], strict=False)
        ]

    def to_dict(self) -> dict[str, Any]:
        rtf = self.real_time_factor
        return {
            "engine": self.engine,
            "voice": self.voice,
            "sample_rate": self.sample_rate,
            "sentences": len(self.sentences),
            "worker_sentences": self.worker_sentences,
            "spoken": len(self.played),
            "failed": len(self.failed),
            "stopped": self.stopped,
            "audio_s": round(self.audio_s, 3),
            "synth_s": round(self.synth_s, 3),
            "real_time_factor": round(rtf, 4) if rtf is not None else None,
            "first_audio_ms": round(self.first_audio_ms, 1) if self.first_audio_ms else None,
            "engine_ready_ms": round((self.engine_ready_at_s - self.started_at_s) * 1000, 1)
            if self.engine_ready_at_s
            else None,
            "max_gap_ms": round(max(self.gaps_ms()), 1) if self.gaps_ms() else None,
            "timestamps": {
                "text_known": self.started_at_s,
                "first_audio": self.first_audio_at_s,
                "finished": self.finished_at_s,
            },
            "detail": [s.to_dict(self.sample_rate) for s in self.sentences],
            "turn": self.turn.to_dict() if self.turn is not None else None,
        }


# -- the pipeline --------------------------------------------------------------------------------
_DONE = object()


@dataclass
class _Ready:
    record: SentenceRecord
    samples: np.ndarray


class Speech:
    """Speak utterances through an engine into an output, sentence by sentence.

    Args:
        engine: a loaded `TtsEngine`, or a callable returning one (called in the worker thread,
            so loading overlaps whatever the caller does meanwhile, such as opening the output).
        utterances: texts to speak in order (markdown is cleaned per the engine's language).
        engine_name: for results, when `engine` is a loader.
        speed: 1.0 is the engine's normal pace.
        check: run the speech check on every sentence.
        report: where warnings go (default: stderr).
        keep_audio: keep each played sentence's samples (for history and skip-back).
        started_at_s: time.monotonic() when the text was known (default: now).
        on_sentence: called with (record, samples at the output's rate) from the feeder thread
            when a sentence goes to the output for the first time (a turn's history records
            it there); not again when a skip queues it anew.
    """

    def __init__(
        self,
        engine: TtsEngine | Callable[[], TtsEngine],
        utterances: Sequence[str],
        *,
        engine_name: str = "",
        voice: str | None = None,
        sample_rate: int = 24_000,
        speed: float = 1.0,
        check: bool = True,
        report: Report | None = _stderr,
        keep_audio: bool = False,
        started_at_s: float | None = None,
        on_sentence: Callable[[SentenceRecord, np.ndarray], None] | None = None,
    ) -> None:
        self._engine_or_loader = engine
        self._on_sentence = on_sentence
        self._utterances = list(utterances)
        self.speed = speed
        self.check = check
        self.report = report or (lambda _message: None)
        self.keep_audio = keep_audio
        self.engine: TtsEngine | None = engine if hasattr(engine, "synthesize") else None  # type: ignore[assignment]
        self.result = SpeechResult(
            engine=engine_name or getattr(self.engine, "name", ""),
            voice=voice if voice is not None else getattr(self.engine, "voice", None),
            sample_rate=sample_rate,
            started_at_s=started_at_s if started_at_s is not None else time.monotonic(),
        )
        self.output: Any = None
        self._output_ready = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=LOOKAHEAD_SENTENCES)
        self._stop = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._requests: collections.deque[str] = collections.deque()
        self._in_output: collections.deque[_Ready] = collections.deque()
        self._history: collections.deque[_Ready] = collections.deque(maxlen=4)
        self._queued_frames = 0
        self.audio: dict[int, np.ndarray] = {}
        self._worker = threading.Thread(
            target=self._synthesize_all, name="speech-synth", daemon=True
        )
        self._feeder = threading.Thread(target=self._feed_all, name="speech-feed", daemon=True)
        self._started = False

    # -- control ----------------------------------------------------------------------------------
    def start(self, output: Any = None) -> Speech:
        """Start synthesizing now; `output` may be given here or later with `attach_output`."""
        if not self._started:
            self._started = True
            # numpy imported by two threads at once can fail half-initialized ("cannot import
            # name ... from partially initialized module"): import it here, before the threads.
            import numpy  # noqa: F401

            self._worker.start()
            self._feeder.start()
        if output is not None:
            self.attach_output(output)
        return self

    def attach_output(self, output: Any) -> None:
        """The opened output to play into (a Player from `open_speech_output`, or a WavSink)."""
        self.output = output
        self.result.sample_rate = output.sample_rate
        if self._stop.is_set():  # stopped (or failed) while the output was opening
            output.stop()
        self._output_ready.set()

    def fail(self, error: BaseException) -> None:
        """End the speech with `error` (e.g. the output could not be opened); `wait` raises it."""
        if self._error is None:
            self._error = error
        self.stop()

    def stop(self) -> None:
        """The kill handle: sound stops within one output block; safe from any thread."""
        if self._stop.is_set():
            return
        self._stop.set()
        self.result.stopped = not self._done.is_set()
        if self.output is not None:
            self.output.stop()
        self._output_ready.set()  # wake a feeder still waiting for an output

    def pause(self) -> None:
        if self.output is not None:
            self.output.pause()

    def resume(self) -> None:
        if self.output is not None:
            self.output.resume()

    @property
    def paused(self) -> bool:
        return bool(self.output is not None and self.output.paused)

    def skip_forward(self) -> None:
        """Cut the sentence playing now and go on with the next."""
        self._requests.append("forward")

    def skip_back(self) -> None:
        """Start the sentence playing now again from its beginning, or the one before it if the
        current one has just started (under 1 s)."""
        self._requests.append("back")

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def current(self) -> SentenceRecord | None:
        """The sentence playing now (the last one whose first sample went out)."""
        in_output = list(self._in_output)  # a snapshot: the feeder thread changes it
        started = [r.record for r in in_output if r.record.start_frame is not None]
        return started[-1] if started else None

    def status(self) -> dict[str, Any]:
        """A snapshot for a control channel."""
        now = self.current()
        return {
            "state": "stopped" if self._stop.is_set() else "done" if self.done
            else "paused" if self.paused else "speaking",
            "sentence": now.index if now else None,
            "text": now.text if now else None,
            "sentences": len(self.result.sentences),
        }  # fmt: skip

    def wait(self, timeout_s: float | None = None) -> SpeechResult:
        """Block until everything has played (or `stop`); raise the worker's error if any.

        Waits in short slices so Ctrl-C reaches the caller, which should then call `stop()`.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._done.wait(0.05):
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("speech did not finish in time")
        if not self._stop.is_set():
            # The worker may still be closing the engine (hibari writes its caches then).
            while self._worker.is_alive():
                self._worker.join(0.05)
        else:
            self.join(2.0)
        if self._error is not None:
            raise self._error
        return self.result

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the synthesis thread to end (after `stop`, it ends after the sentence it is
        synthesizing): native code still running when the interpreter exits can abort it."""
        if self._worker.is_alive():
            self._worker.join(timeout_s)

    def run(self, output: Any) -> SpeechResult:
        """start(output), wait, and stop cleanly on any exception (Ctrl-C included)."""
        self.start(output)
        try:
            return self.wait()
        except BaseException:
            self.stop()
            raise

    # -- the worker: engine, text, synthesis, check -------------------------------------------
    def _load_engine(self) -> TtsEngine:
        if self.engine is None:
            self.engine = self._engine_or_loader()  # type: ignore[operator]
            self.result.engine = self.result.engine or self.engine.name
            if self.result.voice is None:
                self.result.voice = self.engine.voice
        self.result.engine_ready_at_s = time.monotonic()
        mark("engine_ready")
        return self.engine

    def _engine_settled(self, engine: TtsEngine) -> None:
        """An engine from the speech worker knows its voice and when it was ready only once
        it has synthesized (vocal.speaking.remote.RemoteEngine)."""
        if self.result.voice is None:
            self.result.voice = engine.voice
        ready_at_s = getattr(engine, "ready_at_s", None)
        if ready_at_s is not None:
            self.result.engine_ready_at_s = ready_at_s
        self.result.worker_sentences = getattr(engine, "remote_sentences", 0)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _synthesize_all(self) -> None:
        import numpy as np

        from vocal.audio.wav import resample

        try:
            engine = self._load_engine()
            english_only = engine.english_only
            index = 0
            for number, utterance in enumerate(self._utterances):
                sentences = sentences_of(utterance, english_only=english_only)
                if index == 0 and sentences:
                    sentences[:1] = split_first_clause(sentences[0])
                for sentence in sentences:
                    if self._stop.is_set():
                        return
                    record = SentenceRecord(index=index, utterance=number, text=sentence)
                    index += 1
                    self.result.sentences.append(record)
                    record.synth_started_at_s = time.monotonic()
                    samples = np.asarray(engine.synthesize(sentence, speed=self.speed), np.float32)
                    samples = samples.reshape(-1)
                    record.synth_done_at_s = time.monotonic()
                    mark("first_sentence_synthesized")
                    self._engine_settled(engine)
                    record.frames = samples.shape[0]
                    reason = check_speech(samples, engine.sample_rate) if self.check else None
                    if reason is not None:
                        record.failed_check = reason
                        self.report(f"sentence {record.index + 1} failed the speech check "
                                    f"({reason}), not played: {sentence[:60]!r}")  # fmt: skip
                        continue
                    self._output_ready.wait()
                    if self._stop.is_set():
                        return
                    if engine.sample_rate != self.output.sample_rate:
                        samples = resample(samples, engine.sample_rate, self.output.sample_rate)
                        record.frames = samples.shape[0]
                    if not self._put(_Ready(record, samples)):
                        return
            self._put(_DONE)
            engine.close()  # after the last sentence: hibari builds its caches while audio plays
        except BaseException as exc:  # handed to wait() in the caller's thread
            if self._error is None:
                self._error = (
                    exc
                    if isinstance(exc, (VocalError, KeyboardInterrupt))
                    else EngineError(
                        f"{self.result.engine or 'the engine'} failed: {type(exc).__name__}: {exc}"
                    )
                )
            self._stop.set()
            if self.output is not None:
                self.output.stop()
            self._output_ready.set()

    # -- the feeder: output, boundaries, skips ----------------------------------------------------
    def _tracker(self) -> FrameTracker | None:
        return getattr(self.output, "frame_tracker", None)

    def _play(self, ready: _Ready) -> None:
        record, samples = ready.record, ready.samples
        tracker = self._tracker()
        if tracker is not None:
            tracker.mark(record.index, self._queued_frames)
        else:  # a WavSink: written at once, in order
            record.start_frame = self._queued_frames
            record.started_at_s = time.monotonic()
        self._queued_frames += samples.shape[0]
        record.frames = samples.shape[0]
        first_time = not record.played
        record.played = True
        self._in_output.append(ready)
        self.output.play(samples)
        if self.keep_audio:
            self.audio[record.index] = samples
        if first_time and self._on_sentence is not None:
            self._on_sentence(record, samples)

    def _settle(self) -> None:
        """Copy resolved boundaries into records; retire sentences that have finished."""
        tracker = self._tracker()
        for ready in self._in_output:
            record = ready.record
            if (
                tracker is not None
                and record.start_frame is None
                and record.index in tracker.resolved
            ):
                record.start_frame, record.started_at_s = tracker.resolved[record.index]
            if record.started_at_s is not None and self.result.first_audio_at_s is None:
                self.result.first_audio_at_s = record.started_at_s
        # A sentence has finished once the next one has started.
        while len(self._in_output) > 1 and self._in_output[1].record.start_frame is not None:
            self._history.append(self._in_output.popleft())

    def _unstarted(self) -> int:
        return sum(1 for r in self._in_output if r.record.start_frame is None)

    def _handle_requests(self) -> None:
        while self._requests:
            request = self._requests.popleft()
            if not self._in_output or self._tracker() is None:
                continue
            was_paused = self.output.paused
            flush_output(self.output, resume=False)
            tracker = self._tracker()
            assert tracker is not None
            tracker.forget()
            pending = list(self._in_output)
            self._in_output.clear()
            current = next((r for r in pending if r.record.start_frame is not None), None)
            if request == "forward" and current is not None:
                pending.remove(current)
                self._history.append(current)
            elif request == "back" and current is not None:
                elapsed_s = 0.0
                if current.record.started_at_s is not None:
                    elapsed_s = time.monotonic() - current.record.started_at_s
                if elapsed_s < 1.0 and self._history:
                    pending.insert(0, self._history.pop())
            for ready in pending:
                ready.record.start_frame = ready.record.started_at_s = None
                self._play(ready)
            if not was_paused:
                self.output.resume()

    def _feed_all(self) -> None:
        try:
            self._output_ready.wait()
            finished = False
            while not self._stop.is_set():
                self._settle()
                self._handle_requests()
                if not finished and self._unstarted() == 0:
                    try:
                        item = self._queue.get(timeout=_POLL_S)
                    except queue.Empty:
                        continue
                    if item is _DONE:
                        finished = True
                        self.output.finish()
                        continue
                    self._play(item)
                    continue
                if finished and self.output.wait(_POLL_S):
                    break
                time.sleep(_POLL_S)
            self._settle()
        except BaseException as exc:
            if self._error is None:
                self._error = exc
            if self.output is not None:
                self.output.stop()
        finally:
            self.result.finished_at_s = time.monotonic()
            self.result.stopped = self._stop.is_set() and self.result.stopped
            self._done.set()


def resolve_voice(
    voice: str | None, engine: str | None, settings: Settings
) -> tuple[str, str | None]:
    """`vocal.tts.resolve.resolve_voice`, imported when called (a muted turn never loads
    vocal.tts)."""
    from vocal.tts.resolve import resolve_voice as resolve

    return resolve(voice, engine, settings)


def engine_loader(name: str, voice: str | None, settings: Settings) -> Callable[[], TtsEngine]:
    """A callable that loads engine `name` for `voice` (run it in the worker thread): the
    speech worker `vocal.launch` forked when it guessed this engine and voice, else the engine
    in this process."""
    from vocal.speaking.remote import adopt
    from vocal.tts import load_tts

    def load() -> TtsEngine:
        remote = adopt(name, voice, settings)
        return remote if remote is not None else load_tts(name, voice, settings=settings)

    return load


def preload_audio_backend() -> threading.Thread:
    """Start importing sounddevice in a thread, now.

    Its import initializes PortAudio (0.06-0.2 s here; begun earlier still by vocal.launch),
    mostly in C without the GIL and without numpy, so it overlaps the numpy import that
    everything else waits for: measured 0.27 s for both instead of 0.51 s one after the other.
    A failure here is left for the output's opening to report.
    """

    def load() -> None:
        from vocal.audio.devices import sounddevice

        with contextlib.suppress(VocalError):  # no PortAudio: reported when the output opens
            sounddevice()

    thread = threading.Thread(target=load, name="portaudio-preload", daemon=True)
    thread.start()
    return thread


# -- one `vocal speak` ---------------------------------------------------------------------------
def decode_input(data: bytes, *, name: str = "stdin") -> str:
    """Text from bytes read from a pipe; binary data is a UsageError (exit 2), not noise."""
    if b"\x00" in data:
        raise UsageError(f"{name} is not text (it holds NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name} is not UTF-8 text (bad byte at offset {exc.start})") from None


def text_argument(text: str | None) -> tuple[str, bool]:
    """The text a command was given: TEXT itself, or stdin when TEXT is '-' (or absent and
    stdin is a pipe); and whether it came from stdin, where "text known" starts only once it
    has been read. No TEXT on a terminal, or a text over `MAX_TEXT_CHARS` (stdin is read no
    further than `MAX_TEXT_BYTES`), is a UsageError (exit 2)."""
    if text is None and sys.stdin.isatty():
        raise UsageError("give TEXT to say, or '-' to read it from stdin")
    if text is None or text == "-":
        return check_text_length(_read_stdin_text(), name="the text on stdin"), True
    return check_text_length(text), False


def _read_stdin_text() -> str:
    """stdin as text, read up to `MAX_TEXT_BYTES`; more than that is too long, whatever it is
    (an endless stream such as `< /dev/zero` ends here)."""
    data = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise UsageError(
            f"the text on stdin is too long: over {MAX_TEXT_BYTES} bytes, the limit is "
            f"{MAX_TEXT_CHARS} characters",
            hint="say it in parts",
        )
    return decode_input(data)


@dataclass(frozen=True)
class SpeakOptions:
    """What `vocal speak` was asked to do (None: from settings and gates)."""

    engine: str | None = None
    voice: str | None = None
    speed: float | None = None
    volume: float | None = None  # gain 0..2; None: the `vocal volume` gate
    output: Path | None = None  # write a WAV instead of playing
    device: str | None = None
    quotes: bool = False
    check: bool = True
    use_conch: bool = True  # take the floor for the audio (--no-conch: talk over others)
    record: bool = True  # keep what is played in the history (`vocal replay`, skip_back)


@dataclass
class TurnOutcome:
    """How a spoken turn went: the floor and what ended the speech.

    `outcome` is "finished", "stopped" (`vocal control stop`), "skipped" (skip_forward: the
    rest of the text is not spoken), "lost" (the floor was taken; `speak` then exits 3) or
    "replayed" (skip_back: an utterance from the history was played instead of the rest).
    """

    outcome: str = "finished"
    session: str | None = None
    seq: int | None = None
    waited_s: float | None = None
    position_on_arrival: int | None = None
    #: History ids of the utterances spoken (and of what a skip_back replayed), in order.
    utterance_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome, "session": self.session, "seq": self.seq,
            "waited_s": round(self.waited_s, 4) if self.waited_s is not None else None,
            "position_on_arrival": self.position_on_arrival,
            "utterance_ids": self.utterance_ids,
        }  # fmt: skip


def speak(
    text: str,
    options: SpeakOptions,
    settings: Settings,
    *,
    report: Report | None = _stderr,
    started_at_s: float | None = None,
    on_start: Callable[[Speech], None] | None = None,
) -> SpeechResult | None:
    """Speak `text` in a turn (or write it to `options.output`); None when the gates say silence.

    Order matters. Gates first: muted costs nothing, not even the conch. Then the voice is
    resolved (a cloned voice without its weights fails here, exit 5, before any wait). The
    engine loads and the first sentence is synthesized in the worker thread while this thread
    takes the floor (`vocal.floor.turn.Turn`: conch, control socket, history) and opens the output,
    so the next speaker starts as soon as the floor is free. `on_start` receives the running
    `Speech`.

    Raises:
        ConchBusy: the floor was not granted (callback mode, or the wait timed out): exit 3.
        ConchLost: the floor was taken while speaking (`vocal conch bump`): exit 3.
    """
    from vocal.floor.gates import read_gates

    started_at_s = time.monotonic() if started_at_s is None else started_at_s
    if not text.strip():
        raise UsageError("nothing to say: the text is empty")
    gain = options.volume
    if options.output is None:
        gates = read_gates(settings.home)
        if gates.silent:
            (report or (lambda _m: None))(
                "muted: nothing spoken" if gates.muted else "volume is 0: nothing spoken"
            )
            return None
        gain = gates.gain if gain is None else gain
    from vocal.tts import engine_class  # after the gates: muted imports no engine registry

    utterances = utterances_of(text, quotes=options.quotes)
    wanted = options.voice or settings.voice
    name, voice = resolve_voice(wanted, options.engine, settings)
    rate = engine_class(name).sample_rate
    # A stored voice resolves to its reference clip's path: show and record its name.
    stored = name == "chatterbox" and wanted is not None and ":" not in wanted and voice != wanted
    shown = wanted if stored else voice
    speech = Speech(
        engine_loader(name, voice, settings), utterances, engine_name=name, voice=shown,
        sample_rate=rate, speed=options.speed or settings.speed, check=options.check,
        report=report, started_at_s=started_at_s,
    )  # fmt: skip
    if options.output is not None:  # a file is not the speaker: no floor, no history
        return _speak_to_file(speech, rate, options, on_start)
    return _speak_in_turn(speech, name, shown, rate, gain, options, settings, report, on_start)


def _speak_to_file(
    speech: Speech, rate: int, options: SpeakOptions, on_start: Callable[[Speech], None] | None
) -> SpeechResult:
    speech.start()
    try:
        gain = 1.0 if options.volume is None else options.volume
        output = open_speech_output(rate, output=options.output, volume=gain)
    except BaseException as exc:
        speech.fail(exc)
        speech.join(2.0)
        raise
    try:
        speech.attach_output(output)
        if on_start is not None:
            on_start(speech)
        result = speech.wait()
    except BaseException:
        speech.stop()
        speech.join(2.0)
        raise
    finally:
        output.close()
    _check_spoken(result)
    return result


class _HistoryWriter:
    """Records each sentence in the turn's history as it goes to the output (feeder thread):
    one history utterance per utterance of the text."""

    def __init__(self, turn: Any, utterances: Sequence[str], voice: str | None, rate: int):
        self.turn = turn
        self.utterances = utterances
        self.voice = voice
        self.rate = rate
        self.ids: list[int] = []
        self._number: int | None = None
        self._recording: Any = None
        self._lock = threading.Lock()

    def add(self, record: SentenceRecord, samples: np.ndarray) -> None:
        with self._lock:
            if record.utterance != self._number:
                self._finish()
                self._number = record.utterance
                self._recording = self.turn.begin_utterance(
                    text=self.utterances[record.utterance], voice=self.voice,
                    sample_rate=self.rate,
                )  # fmt: skip
                self.ids.append(self._recording.utterance.id)
            self._recording.append(samples)

    def finish(self) -> None:
        with self._lock:
            self._finish()

    def _finish(self) -> None:
        if self._recording is not None:
            self._recording.finish()
            self._recording = None


def _speak_in_turn(
    speech: Speech,
    name: str,
    shown: str | None,
    rate: int,
    gain: float | None,
    options: SpeakOptions,
    settings: Settings,
    report: Report | None,
    on_start: Callable[[Speech], None] | None,
) -> SpeechResult:
    turn_outcome = TurnOutcome()
    speech.result.turn = turn_outcome
    writer: _HistoryWriter | None = None
    if options.record:
        # The turn does not exist yet: the writer is bound to it below, before any output.
        writer = _HistoryWriter(None, speech._utterances, shown, rate)
        speech._on_sentence = writer.add
    # Synthesis starts first, before the turn's modules load (~50 ms): the speech worker gets
    # the first sentence at once, and synthesis overlaps the wait for the floor (the worker
    # thread holds the first sentence until an output is attached, so a long wait wastes
    # nothing more). PortAudio's own start-up runs in a thread meanwhile
    # (preload_audio_backend).
    speech.start()
    preload = preload_audio_backend()
    from vocal.floor.turn import Turn

    try:
        with Turn(settings, kind="speak", voice=shown, use_conch=options.use_conch,
                  warm_audio=False, status=report or (lambda _m: None)) as turn:  # fmt: skip
            mark("floor_taken")
            held = turn.held
            turn_outcome.session = turn.session
            if held is not None:
                turn_outcome.seq, turn_outcome.waited_s = held.seq, held.waited_s
                turn_outcome.position_on_arrival = held.position_on_arrival
            if turn.stopped.is_set():  # `vocal control stop` while waiting for the floor
                turn_outcome.outcome = "stopped"
                speech.stop()
                speech.wait()
                speech.result.stopped = True
                return speech.result
            if writer is not None:
                writer.turn = turn
            back = _play_in_turn(speech, turn, turn_outcome, rate, gain, options, settings,
                                 on_start, writer)  # fmt: skip
            if writer is not None:
                turn_outcome.utterance_ids = list(writer.ids)
            turn.check()  # the floor was lost: exit 3 (the output was silenced at once)
            _replay_back(turn, back, turn_outcome, gain, options, settings)
    except BaseException:
        speech.stop()
        speech.join(2.0)
        raise
    finally:
        # Exiting while that thread is inside Pa_Initialize can crash the interpreter, and
        # sounddevice points fd 2 at /dev/null meanwhile (an error printed then would vanish).
        preload.join(5.0)
    result = speech.result
    if turn_outcome.outcome == "finished":
        _check_spoken(result)
    return result


def _replay_back(turn: Any, back: Any, turn_outcome: TurnOutcome, gain: float | None,
                 options: SpeakOptions, settings: Settings) -> None:  # fmt: skip
    """skip_back: the history walk chose an utterance (the first press: this one); play its
    PCM in this turn, where further skip_backs step on."""
    if back is None:
        return
    replayed = turn.play(back.audio(), record=False, utterance=back,
                         device=options.device or settings.output_device,
                         volume=1.0 if gain is None else gain)  # fmt: skip
    turn_outcome.utterance_ids += [i for i in replayed.played_ids if i is not None]


def _play_in_turn(
    speech: Speech,
    turn: Any,
    turn_outcome: TurnOutcome,
    rate: int,
    gain: float | None,
    options: SpeakOptions,
    settings: Settings,
    on_start: Callable[[Speech], None] | None,
    writer: _HistoryWriter | None,
    should_stop: Callable[[], bool] | None = None,
) -> Any:
    """Play the speech in `turn` until it ends; the utterance a skip_back chose, if any.

    `should_stop` is polled between sentences and while one plays (a newer message has
    superseded this one): when it says so the speech stops at once (outcome "superseded").
    """
    try:
        # turn.guard_block silences the output in the audio callback once the floor is lost.
        output = open_speech_output(
            rate, device=options.device or settings.output_device,
            volume=1.0 if gain is None else gain, on_block=turn.guard_block,
        )  # fmt: skip
    except BaseException as exc:
        speech.fail(exc)
        speech.join(2.0)
        raise
    mark("output_open")
    back = None
    try:
        turn.on("status", lambda _request: {"sentence": speech.status()})
        # The turn's control handler acts on the output itself (stop, pause and resume land
        # within one block from the socket's thread); the events then end the speech here.
        turn.attach_output(output)
        turn.set_state("playing")
        speech.attach_output(output)
        if on_start is not None:
            on_start(speech)
        while not speech.done:
            try:
                event = turn.events.get(timeout=_POLL_S * 4)
            except queue.Empty:
                if should_stop is not None and should_stop():
                    turn_outcome.outcome = "superseded"
                    speech.stop()
                continue
            if event.cmd in ("stop", "lost", "skip_forward", "skip_back"):
                turn_outcome.outcome = {"stop": "stopped", "lost": "lost",
                                        "skip_forward": "skipped",
                                        "skip_back": "replayed"}[event.cmd]  # fmt: skip
                back = event.utterance if event.cmd == "skip_back" else None
                speech.stop()
        speech.wait()
    except BaseException:
        speech.stop()
        speech.join(2.0)
        raise
    finally:
        turn.attach_output(None)
        turn.set_state("ready")
        output.close()
        if writer is not None:
            writer.finish()
    return back


# -- pieces of a message (`vocal speak --message ID --piece N`) -----------------------------------
class _KeepOpen:
    """An engine shared by the speeches of several pieces: `Speech` closes its engine after
    its last sentence, which must not end it for the next piece (closed in `PieceSpeaker`)."""

    def __init__(self, engine: TtsEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        pass


class PieceSpeaker:
    """Speaks the pieces that one process reads as its message's reader: the engine is loaded
    once and the floor taken once (at the first piece with a spoken line) for all of them.

    `read(piece, text)` is `vocal.floor.pieces.run_piece`'s callback; `should_stop` says that a
    newer message superseded this one (polled between sentences and while one plays).
    """

    def __init__(
        self,
        options: SpeakOptions,
        settings: Settings,
        *,
        gain: float | None,
        should_stop: Callable[[], bool],
        report: Report | None = _stderr,
    ) -> None:
        self.options = options
        self.settings = settings
        self.gain = gain
        self.should_stop = should_stop
        self.report = report
        self._stack = contextlib.ExitStack()
        self._turn: Any = None
        self._engine: TtsEngine | None = None
        self._voice: tuple[str, str | None, str | None, int] | None = None
        self._preload: threading.Thread | None = None

    def _resolved(self) -> tuple[str, str | None, str | None, int]:
        if self._voice is None:
            from vocal.tts import engine_class

            wanted = self.options.voice or self.settings.voice
            name, voice = resolve_voice(wanted, self.options.engine, self.settings)
            stored = (
                name == "chatterbox"
                and wanted is not None
                and ":" not in wanted
                and voice != wanted
            )
            self._voice = (name, voice, wanted if stored else voice,
                           engine_class(name).sample_rate)  # fmt: skip
        return self._voice

    def _engine_source(self) -> Any:
        if self._engine is not None:
            return _KeepOpen(self._engine)
        name, voice, _shown, _rate = self._resolved()
        load = engine_loader(name, voice, self.settings)

        def loader() -> Any:
            self._engine = load()
            return _KeepOpen(self._engine)

        return loader

    def read(self, piece: int, text: str) -> tuple[str, dict[str, Any] | None]:
        """Speak one piece: ("read" | "empty" | "skipped" | "superseded" | "stopped", result)."""
        from vocal.floor.turn import Turn

        utterances = utterances_of(text, quotes=self.options.quotes)
        if not any(speakable_lines(u, english_only=False) for u in utterances):
            return "empty", None
        if self.should_stop():
            return "superseded", None
        name, _voice, shown, rate = self._resolved()
        speech = Speech(self._engine_source(), utterances, engine_name=name, voice=shown,
                        sample_rate=rate, speed=self.options.speed or self.settings.speed,
                        check=self.options.check, report=self.report)  # fmt: skip
        writer = None
        if self.options.record:
            writer = _HistoryWriter(None, speech._utterances, shown, rate)
            speech._on_sentence = writer.add
        speech.start()
        turn_outcome = TurnOutcome()
        speech.result.turn = turn_outcome
        try:
            if self._turn is None:
                self._preload = preload_audio_backend()
                self._turn = self._stack.enter_context(
                    Turn(
                        self.settings,
                        kind="speak",
                        voice=shown,
                        use_conch=self.options.use_conch,
                        warm_audio=False,
                        status=self.report or (lambda _m: None),
                    )  # fmt: skip
                )
            turn = self._turn
            turn_outcome.session = turn.session
            if turn.held is not None:
                turn_outcome.seq, turn_outcome.waited_s = turn.held.seq, turn.held.waited_s
            if turn.stopped.is_set():
                speech.stop()
                speech.wait()
                return "stopped", speech.result.to_dict()
            if self.should_stop():  # superseded while this process waited for the floor
                speech.stop()
                speech.wait()
                return "superseded", speech.result.to_dict()
            if writer is not None:
                writer.turn = turn
            back = _play_in_turn(
                speech, turn, turn_outcome, rate, self.gain, self.options, self.settings, None,
                writer, should_stop=self.should_stop,
            )  # fmt: skip
            if writer is not None:
                turn_outcome.utterance_ids = list(writer.ids)
            turn.check()
            _replay_back(turn, back, turn_outcome, self.gain, self.options, self.settings)
        except BaseException:
            speech.stop()
            speech.join(2.0)
            raise
        status = {"finished": "read", "replayed": "read", "skipped": "skipped",
                  "stopped": "stopped", "superseded": "superseded"}.get(
                      turn_outcome.outcome, turn_outcome.outcome)  # fmt: skip
        if status == "read" and not speech.result.played:
            status = "empty"  # every sentence failed the speech check, or nothing was left
        return status, speech.result.to_dict()

    def close(self) -> None:
        """Give the floor back and close the engine."""
        try:
            self._stack.close()
        finally:
            if self._engine is not None:
                with contextlib.suppress(Exception):
                    self._engine.close()
            if self._preload is not None:
                self._preload.join(5.0)


def speak_piece(
    text: str,
    options: SpeakOptions,
    settings: Settings,
    *,
    message: str,
    piece: int,
    final: bool = False,
    report: Report | None = _stderr,
) -> PieceOutcome:
    """`vocal speak --message ID --piece N [--final]`: send one piece of a message and stay
    until it is read (by this process or by another of the message), dropped or superseded;
    see `vocal.floor.pieces`. Gates first: muted or volume 0 returns at once ("muted"), before any
    waiting, engine or floor.
    """
    from vocal.floor.gates import read_gates
    from vocal.floor.pieces import MessageBoard, PieceOutcome, run_piece, validate_message_id

    validate_message_id(message)
    gain = options.volume
    if options.output is not None:
        raise UsageError("--message pieces are spoken, not written: drop --output")
    gates = read_gates(settings.home)
    if gates.silent:
        (report or (lambda _m: None))(
            "muted: nothing spoken" if gates.muted else "volume is 0: nothing spoken"
        )
        now = time.monotonic()
        return PieceOutcome("muted", message, piece, final, arrived_at_s=now, finished_at_s=now)
    gain = gates.gain if gain is None else gain
    board = MessageBoard(settings.run_dir, settings.session)
    speaker = PieceSpeaker(options, settings, gain=gain, report=report,
                           should_stop=lambda: board.superseded(message))  # fmt: skip
    try:
        return run_piece(board, message, piece, text, final=final, read=speaker.read,
                         timeout_s=settings.piece_timeout_s)  # fmt: skip
    finally:
        speaker.close()


def _check_spoken(result: SpeechResult) -> None:
    if result.sentences and not result.played and not result.stopped:
        raise EngineError(
            f"the {result.engine} engine produced no speech: every sentence failed the speech "
            "check",
            hint="try another engine or voice with --engine / --voice",
        )


def process_started_at_s() -> float | None:
    """time.monotonic() at which this process started (Linux, 10 ms resolution), else None."""
    try:
        import os

        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat(5), counted after the ")"
        since_boot_s = start_ticks / os.sysconf("SC_CLK_TCK")
        now_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.monotonic() - (now_boot - since_boot_s)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


__all__ = [
    "Speech",
    "SpeechResult",
    "SentenceRecord",
    "FrameTracker",
    "check_speech",
    "engine_loader",
    "flush_output",
    "has_speakable_text",
    "open_speech_output",
    "resolve_voice",
    "sentences_of",
    "split_first_clause",
    "utterances_of",
    "SpeakOptions",
    "TurnOutcome",
    "speak",
    "speak_piece",
    "PieceSpeaker",
    "decode_input",
    "text_argument",
    "process_started_at_s",
    "preload_audio_backend",
]
