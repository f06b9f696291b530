"""`vocal converse --wake`, the hands-free turn (issue 39): when nobody answers the reply, wait
for the wake phrase, and take what is said after it as the answer.

    result = converse_hands_free("Anything else?", options, settings)

The turn speaks and listens as `converse` does. Only when nobody spoke before the no-speech
timeout does it wait, up to `timeout_s`, for the wake phrase (the `wake_phrase` setting, heard
by the detector `vocal wake` would choose: vocal.wake.turn), ignoring the phrase while vocal
holds the floor, plays a turn or is muted (vocal.wake.gate). "Hey jarvis, run the tests" gives
"run the tests". The phrase said alone is followed by the answer heard as a converse turn
hears it (the end-of-turn stage, the configured recognizer), the no-speech timeout counted
again from the phrase. With no text the turn starts at the wait (a hands-free start).

The wait comes after the converse turn's `Turn` has ended, not inside it: the floor has been
given back and the control socket closed before it begins. A `Turn` holds both for its whole
`with` block, and either would make every wake gate on the machine, this turn's own too,
ignore the phrase (a running turn counts as vocal speaking), while the floor held would keep
other agents silent for as long as the wait lasts. So `vocal control` cannot reach the wait;
Ctrl-C ends it. Listening for the answer needs no floor, and takes none.

The microphone: the converse turn's closes with it; the wait opens its own, and the answer
after a phrase said alone is read from that same stream (`OneStream`): never two at once.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from vocal.duplex.converse import Report, report_to_stderr
from vocal.duplex.options import ConverseOptions, ConverseResult, WokeReport
from vocal.errors import UsageError

if TYPE_CHECKING:
    from vocal.audio.devices import Block
    from vocal.config import Settings
    from vocal.hearing.listening import BlockSource, ListenResult
    from vocal.wake.detection import Detection
    from vocal.wake.turn import WakeResult

#: Blocks of the stream kept for the answer's listener (32 ms each), more than the endpointer's
#: pre-roll (300 ms): an answer begun as the wait after the phrase gave up keeps its onset.
REPLAY_BLOCKS = 16
SAMPLE_RATE = 16_000


def converse_hands_free(
    text: str,
    options: ConverseOptions,
    settings: Settings,
    *,
    timeout_s: float | None = None,
    report: Report | None = report_to_stderr,
    started_at_s: float | None = None,
    on_wake: Callable[[Detection], object] | None = None,
    source: BlockSource | None = None,
) -> ConverseResult:
    """Speak `text` and listen as `vocal.duplex.converse.converse` does; if nobody spoke, wait
    up to `timeout_s` (None: the `wake_timeout_s` setting) for the wake phrase and hear the
    answer after it (see the module docstring). An empty `text` starts at the wait.

    Args:
        report: status lines for stderr (the wait, each phrase ignored).
        on_wake: called when the phrase counts, before the answer is heard (the command plays
            the Wake cue: cues live in vocal.agents, above this layer).
        source: an opened 16 kHz block source to wait on instead of the microphone (tests);
            closed here.

    Raises:
        UsageError: a wake phrase with no words, a timeout that is not a positive number,
            push-to-talk (exit 2); and whatever `converse` raises.
    Nobody speaking is not an error here: `speech_heard` is False, and `wake_wait_s` says
    whether the phrase was waited for (the command exits 4).
    """
    from vocal.wake.turn import wake_phrase

    started_at_s = time.monotonic() if started_at_s is None else started_at_s
    report = report or (lambda _m: None)
    timeout_s = settings.wake_timeout_s if timeout_s is None else timeout_s
    try:
        phrase = wake_phrase(settings)  # checked before anything is said
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise UsageError(f"the wake timeout must be a positive number of seconds: {timeout_s}")
        if options.push_to_talk:
            raise UsageError("--wake is hands-free: it does not go with --ptt")
        if text.strip():
            from vocal.duplex.converse import converse  # looked up here: tests stand in for it

            result = converse(text, options, settings, report=report, started_at_s=started_at_s)
            if not _unanswered(result):
                return result
        else:
            result = _unspoken(settings, started_at_s)
        hands_free = _HandsFree(
            result, settings, phrase, started_at_s=started_at_s, report=report, on_wake=on_wake
        )
        return hands_free.run(text, timeout_s, source)
    finally:
        if source is not None:
            source.close()


def _unanswered(result: ConverseResult) -> bool:
    """The converse turn ended on its no-speech timeout: what `--wake` waits after (not a turn
    stopped, nor listening ended by `vocal control skip-forward`)."""
    from vocal.audio.vad import EndReason

    listened = result.listen
    return (
        not result.stopped
        and not result.speech_heard
        and listened is not None
        and listened.end_reason == EndReason.NO_SPEECH.value
    )


def _unspoken(settings: Settings, started_at_s: float) -> ConverseResult:
    """The result of a turn that said nothing and has not listened yet (a hands-free start)."""
    from vocal.duplex.outcome import TurnParts, converse_result

    parts = TurnParts(
        text="",
        voice=None,
        barge_in=settings.barge_in,
        use_aec=False,
        started_at_s=started_at_s,
        clock={"started": started_at_s},
    )
    return converse_result(parts, None, stopped=False, trace=False)


class _HandsFree:
    """The wait for the phrase and the answer after it, filling in `result`."""

    def __init__(
        self,
        result: ConverseResult,
        settings: Settings,
        phrase: str,
        *,
        started_at_s: float,
        report: Report,
        on_wake: Callable[[Detection], object] | None,
    ) -> None:
        self.result, self.settings, self.phrase = result, settings, phrase
        self.started_at_s, self.report, self.on_wake = started_at_s, report, on_wake
        #: When the phrase counted (monotonic), once it has.
        self.woke_at: float | None = None

    def _woke(self, detection: Detection) -> None:
        self.woke_at = time.monotonic()
        if self.on_wake is not None:
            self.on_wake(detection)

    def _ignored(self, event: dict[str, object]) -> None:
        self.report(f"phrase heard at {event['at_s']:.1f} s ignored: {event['reason']}")

    def run(self, context: str, timeout_s: float, source: BlockSource | None) -> ConverseResult:
        from vocal.audio.devices import Microphone
        from vocal.wake.turn import wake_turn

        settings, result = self.settings, self.result
        mic = source if source is not None else Microphone(device=settings.input_device).open()
        stream = OneStream(mic)
        opened = stream.opened_at_s or time.monotonic()
        listened = None
        try:
            # Once the microphone is open (the blocks queue while the detector loads).
            waiting = f"listening for {self.phrase!r} (up to {timeout_s:g} s)"
            self.report(f"nobody spoke: {waiting}" if context.strip() else waiting)
            woken = wake_turn(
                settings,
                phrase=self.phrase,
                timeout_s=timeout_s,
                source=stream,
                on_wake=self._woke,
                on_ignored=self._ignored,
                on_note=self.report,
            )
            if woken.woke and woken.text:
                listened = _said_with_phrase(woken)
            elif woken.woke:
                listened = _hear_answer(stream, settings, woken, context=context)
        finally:
            mic.close()
        woke_at = self.woke_at if woken.woke else None
        result.wake_wait_s = (woke_at or time.monotonic()) - opened
        if woke_at is not None:
            result.woke = WokeReport(
                detector=woken.detector,
                phrase=woken.phrase,
                score=None if woken.score is None else round(woken.score, 4),
                woke_at_s=round(woke_at - self.started_at_s, 3),
                waited_s=round(result.wake_wait_s, 3),
            )
            result.clock["woke"] = woke_at
        if listened is not None:
            result.listen = listened
            result.text, result.speech_heard = listened.text, listened.speech_heard
        result.timings["total_s"] = time.monotonic() - self.started_at_s
        return result


def _said_with_phrase(woken: WakeResult) -> ListenResult:
    """The answer said in one breath with the phrase (vocal.wake.request), as a listen turn's
    result: the JSON's `end_reason` and `stt_engine` are then the answer's."""
    import numpy as np

    from vocal.audio.wav import Audio
    from vocal.hearing.listening import ListenResult

    samples = woken.utterance if woken.utterance is not None else np.zeros(0, np.float32)
    audio = Audio(samples, SAMPLE_RATE)
    start, end = woken.durations.get("speech_start_s"), woken.durations.get("speech_end_s")
    return ListenResult(
        text=woken.text,
        language=None,
        speech_heard=True,
        end_reason=woken.end_reason,
        audio=audio,
        recording=audio,
        durations={
            "speech_s": None if start is None or end is None else end - start,
            "transcribed_s": audio.duration_s if woken.transcribed else None,
        },
        timings={
            "transcribe_s": woken.timings.get("transcribe_s"),
            "stt_load_s": woken.timings.get("stt_load_s"),
        },
        clock={},
        stt_engine=woken.stt_engine,
    )


def _hear_answer(
    stream: OneStream, settings: Settings, woken: WakeResult, *, context: str
) -> ListenResult:
    """The answer after a phrase said alone, heard as a converse turn hears it, from the same
    stream; the no-speech timeout counts from the phrase (the cue), not from here."""
    import dataclasses

    from vocal.audio.vad import SileroVad
    from vocal.hearing.listening import listen, listen_options
    from vocal.hearing.live import meter_hooks, status_line
    from vocal.hearing.stt_loading import stt_loader

    listening = listen_options(settings)
    endpoint = listening.endpoint
    kept_s = stream.replay(endpoint.pre_roll_ms / 1000)
    listened_s, woke_at_s = woken.durations.get("listened_s"), woken.woke_at_s
    since_wake_s = 0.0
    if listened_s is not None and woke_at_s is not None:
        since_wake_s = listened_s - woke_at_s
    left_s = max(0.1, settings.no_speech_timeout_s - since_wake_s + kept_s)
    endpoint = dataclasses.replace(endpoint, no_speech_timeout_s=left_s)
    listening = dataclasses.replace(listening, endpoint=endpoint)
    loader = stt_loader(settings)
    models = None
    if listening.end_of_turn.enabled:
        from vocal.hearing.turn_models import EndOfTurnModels

        models = EndOfTurnModels.start(settings, person=stream.live, context=context or None)
    line = status_line() if stream.live else None
    on_block, on_words = meter_hooks(line, lambda: None)
    try:
        listened = listen(
            stream,
            stt=loader,
            options=listening,
            confidence=SileroVad(),
            models=models,
            context=context or None,
            on_block=on_block,
            on_words=on_words,
        )
    finally:
        if line is not None:
            line.clear()
        loader.wait()  # never exit while the engine loads in native code (it aborts)
        loader.close()
        if models is not None:
            models.wait(10.0)
    if models is not None and stream.live:
        models.keep(settings.home)
    return listened


class OneStream:
    """One block source read by two listeners in turn, the wait for the phrase and then the
    answer: each `blocks()` goes on where the last reader stopped (a `WavSource` would start
    its file again), and `replay` hands the next reader the last blocks read first."""

    def __init__(self, source: BlockSource, keep_blocks: int = REPLAY_BLOCKS) -> None:
        self.source = source
        self.sample_rate = source.sample_rate
        #: A microphone (True) or a file read faster than real time (vocal.hearing.listening).
        self.live: bool = getattr(source, "live", True)
        self.opened_at_s: float | None = source.opened_at_s or time.monotonic()
        self._kept: deque[Block] = deque(maxlen=keep_blocks)
        self._first: list[Block] = []
        self._blocks: Iterator[Block] | None = None

    @property
    def overflows(self) -> int:
        return int(getattr(self.source, "overflows", 0))

    def replay(self, seconds: float) -> float:
        """Hand the next reader the last blocks read that cover `seconds` (as far as they are
        kept) before the new ones, and count its listening from now; the seconds handed."""
        first: list[Block] = []
        frames = 0
        for block in reversed(self._kept):
            if frames >= seconds * self.sample_rate:
                break
            first.insert(0, block)
            frames += block.samples.shape[0]
        self._first = first
        self.opened_at_s = time.monotonic()
        return frames / self.sample_rate

    def blocks(self, timeout_s: float = 2.0) -> Iterator[Block]:
        if self._blocks is None:
            self._blocks = iter(self.source.blocks(timeout_s))
        first, self._first = self._first, []
        yield from first
        # A reader that stops leaves `_blocks` open (a `for` loop does not close what it
        # iterates): the next reader goes on from the next block.
        for block in self._blocks:
            self._kept.append(block)
            yield block

    def close(self) -> None:
        self.source.close()


__all__ = ["REPLAY_BLOCKS", "OneStream", "converse_hands_free"]
