"""Transcribing during the silence window (`EarlyTranscriber`), before the turn is known to be
over, so a turn that does end has its transcript (nearly) ready. Used by `listen`.

A remote engine (vocal.stt.openai) is not asked in pauses (`transcribes_early`): it is called
once per turn, on the final utterance, after the turn has ended. Chosen, not measured against
the alternative, because early transcription does not pay there:

- The end-of-turn stage holds a pause open until a requested transcript arrives (it confirms
  or vetoes the end: vocal.hearing.endofturn). Asked of a server, every pause would wait a
  network round trip, and a slow answer would hold it up to `max_pause_ms`; a local tiny.en
  answers in ~0.2 s here.
- Each pause would upload the whole utterance so far again (a turn with three pauses sends its
  start four times): requests and audio minutes that a paid service bills, and its rate limit.
- What it would save is one round trip after the last pause; the turn pays that instead.

Without the early transcript the pauses of a remote turn are judged by Smart Turn's audio
alone (`decide` with no text), so the text's veto ("... and the", a trailing comma) is lost:
a remote turn ends a little more eagerly on a pause after an unfinished clause.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from vocal.audio.wav import Audio
from vocal.stt import SttEngine, Transcript, is_remote

if TYPE_CHECKING:
    from vocal.audio.vad import Endpointer
    from vocal.hearing.endofturn import UtteranceKey
    from vocal.hearing.stt_loading import SttLoader


def transcribes_early(engine: SttEngine) -> bool:
    """Whether `engine` is asked in pauses: local engines are, remote ones are not (module
    docstring)."""
    return not is_remote(engine)


class EarlyTranscriber:
    """Transcribes the utterance during the silence window, before the turn is known to be over.

    The utterance's words are fixed as soon as a pause begins (what follows until the
    post-roll is silence). Whisper starts `ListenOptions.early_after_ms` (32 ms) into the
    pause, in this thread: the end-of-turn stage waits for this text to confirm or veto the
    end (vocal.hearing.endofturn), and otherwise it is ready before the silence window (700 ms)
    ends. If the speaker
    resumes, the result is for an older utterance and is not used; only the latest request is
    kept while one runs (a stale one is never queued behind it).
    """

    def __init__(self, engine: SttEngine, on_text: Callable[[str], object] | None = None) -> None:
        self.engine = engine
        #: Called (in this worker's thread) with the text of every transcript made, for the
        #: words shown while the person speaks (vocal.hearing.live).
        self.on_text = on_text
        self._lock = threading.Condition()
        self._pending: tuple[UtteranceKey, Audio] | None = None
        self._done: dict[UtteranceKey, Transcript | BaseException] = {}
        self._current: UtteranceKey | None = None
        self._submitted: set[UtteranceKey] = set()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="vocal-stt-early", daemon=True)
        self._thread.start()

    def submit(self, key: UtteranceKey, audio: Audio) -> None:
        """Transcribe `audio`, the utterance spanning frames `key` (start, end of speech)."""
        with self._lock:
            self._pending = (key, audio)
            self._submitted.add(key)
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self._closed:
                    self._lock.wait()
                if self._pending is None:
                    return
                (key, audio), self._pending = self._pending, None
                self._current = key
            try:
                outcome: Transcript | BaseException = self.engine.transcribe(audio)
            except BaseException as exc:  # handed to the caller by result()
                outcome = exc
            with self._lock:
                self._done = {key: outcome}
                self._current = None
                self._lock.notify_all()
            if self.on_text is not None and isinstance(outcome, Transcript):
                self.on_text(outcome.text)

    @property
    def idle(self) -> bool:
        """Whether nothing is being transcribed or waiting to be."""
        with self._lock:
            return self._current is None and self._pending is None

    def result(self, key: UtteranceKey) -> Transcript | None:
        """The transcript of utterance `key` (waiting for it if it is being made), or None
        when no request for exactly that utterance was made."""
        with self._lock:
            while key not in self._done and (
                self._current == key or (self._pending is not None and self._pending[0] == key)
            ):
                self._lock.wait()
            outcome = self._done.get(key)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def text(self, key: UtteranceKey, wait: bool) -> tuple[bool, str | None]:
        """For the end-of-turn stage (`vocal.hearing.endofturn.TextSource`): (requested, text)."""
        with self._lock:
            requested = key in self._submitted
            if not wait and key not in self._done:
                return requested, None
        try:
            transcript = self.result(key) if requested else None
        except Exception:  # the final transcription will raise it; the judge goes on
            return requested, None
        return requested, transcript.text if transcript is not None else None

    def close(self) -> None:
        """Stop the worker once it is idle (it never interrupts a transcription)."""
        with self._lock:
            self._closed = True
            self._pending = None
            self._lock.notify_all()
        self._thread.join()


#: A partial transcript is asked for after this much more speech (s of audio) since the last
#: transcript was asked for (a pause's, or a partial's).
PARTIAL_EVERY_S = 1.0
#: ... and only while the last this many chunks were speech (probability at or above the
#: endpointer's start threshold): in the middle of words, not as a pause may begin, so that a
#: pause's own transcript rarely waits behind a partial one (a decode cannot be interrupted).
PARTIAL_SPEECH_CHUNKS = 3


class TurnTranscripts:
    """The transcripts made while a turn is being recorded, in one `EarlyTranscriber`: one at
    each pause (`on_pause`; the end-of-turn stage reads them, and a turn that ends has its
    transcript ready), and with `on_words` partial ones while the person speaks (`watch`),
    each handed to `on_words` for the words shown on a terminal (vocal.hearing.live).

    `stt` is a loaded engine or an `SttLoader`; the transcriber starts with the first request
    once the engine is ready (a live turn does not wait for it; a file, `live` False, does).
    A remote engine is never asked before the turn ends (module docstring).
    """

    def __init__(
        self,
        stt: SttLoader | SttEngine,
        *,
        live: bool,
        on_words: Callable[[str], object] | None = None,
    ) -> None:
        self.stt, self.live, self.on_words = stt, live, on_words
        self.early: EarlyTranscriber | None = None
        self._remote = False
        self._asked_at_frame = 0
        #: Partial transcripts asked for.
        self.partials = 0

    def _transcriber(self) -> EarlyTranscriber | None:
        from vocal.hearing.stt_loading import SttLoader

        if self.early is None and not self._remote:
            stt = self.stt
            if not isinstance(stt, SttLoader):
                engine: SttEngine | None = stt
            else:  # a live turn has had the whole utterance to load it; a file waits for it
                engine = stt.ready_engine() if self.live else stt.engine()
            if engine is None:  # still loading: the turn will wait for it anyway
                return None
            if not transcribes_early(engine):
                self._remote = True
                return None
            self.early = EarlyTranscriber(engine, on_text=self.on_words)
        return self.early

    def on_pause(self, endpointer: Endpointer) -> None:
        """A pause began: transcribe the utterance so far."""
        early = self._transcriber()
        if early is None:
            return
        key = (endpointer.speech_start_frame, endpointer.speech_end_frame)
        early.submit(key, Audio(endpointer.utterance(), endpointer.sample_rate))
        self._asked_at_frame = endpointer.fed_frames

    def watch(self, endpointer: Endpointer) -> None:
        """After every block: a partial transcript, when one is due (see `PARTIAL_EVERY_S`)."""
        from vocal.audio.vad import VadState

        if self.on_words is None or endpointer.state is not VadState.SPEAKING:
            return
        rate, fed = endpointer.sample_rate, endpointer.fed_frames
        recent = endpointer.probabilities[-PARTIAL_SPEECH_CHUNKS:]
        threshold = endpointer.options.start_threshold
        if fed - self._asked_at_frame < PARTIAL_EVERY_S * rate or min(recent) < threshold:
            return
        early = self._transcriber()
        if early is None or not early.idle:
            return
        self._asked_at_frame = fed
        self.partials += 1
        # Its own key, (-1, frames fed): never taken for a pause's utterance.
        early.submit((-1, fed), Audio(endpointer.utterance(), rate))

    def text(self, key: UtteranceKey, wait: bool) -> tuple[bool, str | None]:
        """For the end-of-turn stage (`vocal.hearing.endofturn.TextSource`)."""
        return (False, None) if self.early is None else self.early.text(key, wait)

    def close(self) -> None:
        if self.early is not None:
            self.early.close()


__all__ = ["EarlyTranscriber", "TurnTranscripts", "transcribes_early"]
