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
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vocal.config import Settings
from vocal.errors import EngineError, VocalError
from vocal.speaking.check import check_speech
from vocal.speaking.engine import engine_loader, resolve_voice
from vocal.speaking.output import FrameTracker, flush_output, preload_audio_backend, tracker_of
from vocal.speaking.results import SentenceRecord, SpeechResult
from vocal.speaking.text import sentences_of, split_first_clause
from vocal.speaking.trim import pause_after_s, shape_sentence
from vocal.timeline import mark

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.output import Output
    from vocal.tts import TtsEngine

#: The pause between sentences when the caller names none: the setting's default.
DEFAULT_SENTENCE_PAUSE_S = Settings.sentence_pause_ms / 1000
#: Sentences synthesized ahead of the feeder: enough to hide one slow sentence, few enough that
#: a stop wastes little synthesis.
LOOKAHEAD_SENTENCES = 2
POLL_S = 0.005

Report = Callable[[str], None]


def report_to_stderr(message: str) -> None:
    print(f"vocal: {message}", file=sys.stderr, flush=True)


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
        sentence_pause_s: each sentence is cut to its sound (vocal.speaking.trim) and followed
            by this much silence (half of it after a first clause split off to start sooner;
            none after the last); None plays what the engine made, padding included.
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
        report: Report | None = report_to_stderr,
        keep_audio: bool = False,
        started_at_s: float | None = None,
        on_sentence: Callable[[SentenceRecord, np.ndarray], None] | None = None,
        sentence_pause_s: float | None = DEFAULT_SENTENCE_PAUSE_S,
    ) -> None:
        self.sentence_pause_s = sentence_pause_s
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
        self.output: Output | None = None
        self._output_ready = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=LOOKAHEAD_SENTENCES)
        self._stop = threading.Event()
        self._done = threading.Event()
        #: Every sentence has been synthesized (and queued, or failed its check).
        self.all_synthesized = False
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
    def start(self, output: Output | None = None) -> Speech:
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

    def attach_output(self, output: Output) -> None:
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
        if self._stop.is_set():
            state = "stopped"
        elif self.done:
            state = "done"
        elif self.paused:
            state = "paused"
        else:
            state = "speaking"
        return {
            "state": state,
            "sentence": now.index if now else None,
            "text": now.text if now else None,
            "sentences": len(self.result.sentences),
        }

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

    def run(self, output: Output) -> SpeechResult:
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
                split_head = False  # the first sentence split at its first clause break
                if index == 0 and sentences:
                    head = split_first_clause(sentences[0])
                    split_head = len(head) > 1
                    sentences[:1] = head
                last_utterance = number == len(self._utterances) - 1
                for position, sentence in enumerate(sentences):
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
                    reason = check_speech(samples, engine.sample_rate) if self.check else None
                    if reason is not None:
                        record.failed_check = reason
                        self.report(
                            f"sentence {record.index + 1} failed the speech check "
                            f"({reason}), not played: {sentence[:60]!r}"
                        )
                        continue
                    if self.sentence_pause_s is not None:
                        last = last_utterance and position == len(sentences) - 1
                        clause = split_head and position == 0
                        pause_s = pause_after_s(self.sentence_pause_s, clause=clause, last=last)
                        samples = shape_sentence(samples, engine.sample_rate, pause_after_s=pause_s)
                    record.frames = samples.shape[0]
                    self._output_ready.wait()
                    if self._stop.is_set():
                        return
                    if engine.sample_rate != self._attached.sample_rate:
                        samples = resample(samples, engine.sample_rate, self._attached.sample_rate)
                        record.frames = samples.shape[0]
                    if not self._put(_Ready(record, samples)):
                        return
            self.all_synthesized = True
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
    @property
    def _attached(self) -> Output:
        """The output, once attached (the threads wait for `_output_ready` and a stop first)."""
        assert self.output is not None
        return self.output

    def _tracker(self) -> FrameTracker | None:
        return tracker_of(self.output) if self.output is not None else None

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
        self._attached.play(samples)
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
            was_paused = self._attached.paused
            flush_output(self._attached, resume=False)
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
                self._attached.resume()

    def _feed_all(self) -> None:
        try:
            self._output_ready.wait()
            finished = False
            while not self._stop.is_set():
                self._settle()
                self._handle_requests()
                if not finished and self._unstarted() == 0:
                    try:
                        item = self._queue.get(timeout=POLL_S)
                    except queue.Empty:
                        continue
                    if item is _DONE:
                        finished = True
                        self._attached.finish()
                        continue
                    self._play(item)
                    continue
                if finished and self._attached.wait(POLL_S):
                    break
                time.sleep(POLL_S)
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


# engine_loader, resolve_voice (vocal.speaking.engine) and preload_audio_backend (.output) are
# re-exported: the turns import them from here beside Speech.
__all__ = [
    "LOOKAHEAD_SENTENCES",
    "POLL_S",
    "Report",
    "Speech",
    "engine_loader",
    "preload_audio_backend",
    "report_to_stderr",
    "resolve_voice",
]
