"""The end of a converse turn: its reply written to the history, what the person heard of it,
and the `ConverseResult` (a part of `_Run` in vocal.duplex.converse, kept here for length).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from vocal.duplex.options import ConverseResult

if TYPE_CHECKING:
    from vocal.hearing.listening import ListenResult


class RunOutcome:
    """The end of a converse turn (`_Run` in vocal.duplex.converse inherits it and owns the
    attributes these methods read)."""

    def _record_history(self, turn: Any) -> None:
        import numpy as np

        speech = self.speech
        played = [s for s in speech.result.sentences if s.played and s.index in speech.audio]
        if not played:
            return
        with (
            contextlib.suppress(OSError),
            turn.begin_utterance(
                text=self.text, voice=self.voice, sample_rate=self.player.sample_rate
            ) as recording,
        ):
            recording.append(np.concatenate([speech.audio[s.index] for s in played]))

    # -- the result ------------------------------------------------------------------------------
    def _heard_reply(self, cut_frame: int | None) -> tuple[str, list[dict]]:
        """The reply up to reference frame `cut_frame` (None: all that played), by sentence;
        a cut sentence is kept up to the share of its words that had played."""
        speech = self.speech
        if speech is None:
            return "", []
        rate = speech.result.sample_rate
        parts, detail = [], []
        for record in speech.result.sentences:
            item = record.to_dict(rate)
            detail.append(item)
            if record.start_frame is None:
                continue
            if cut_frame is None or cut_frame >= record.start_frame + record.frames:
                parts.append(record.text)
                item["heard"] = 1.0
                continue
            if cut_frame <= record.start_frame:
                item["heard"] = 0.0
                continue
            share = (cut_frame - record.start_frame) / max(1, record.frames)
            words = record.text.split()
            parts.append(" ".join(words[: int(len(words) * share)]))
            item["heard"] = round(share, 3)
        return " ".join(p for p in parts if p).strip(), detail

    def _result(self, listened: ListenResult | None, *, stopped: bool) -> ConverseResult:
        detector = self.detector
        fired = detector.fired if detector is not None else None
        speech_result = getattr(self, "speech_result", None)
        first_audio = speech_result.first_audio_at_s if speech_result else None
        cut_frame = None
        interrupted_at = None
        if fired is not None and self.player is not None:
            # Where the person started, as a frame of what the speaker had played by then.
            onset_s = getattr(self, "onset_s", fired.speech_start_s)
            late_s = max(0.0, fired.at_s - onset_s)
            cut_frame = max(0, round(self.player.played_frames - late_s * self.player.sample_rate))
            if first_audio is not None:
                interrupted_at = onset_s - first_audio
        elif stopped or self.skip_requested.is_set():
            cut_frame = self.player.played_frames if self.player is not None else 0
        heard, sentences = self._heard_reply(cut_frame)
        lt = listened.timings if listened else {}
        clock = dict(self.clock)
        if listened is not None:
            clock.update({f"listen_{k}": v for k, v in listened.clock.items()})
        clock["first_audio"] = first_audio
        if fired is not None:
            # The barge-in's steps as capture times (benchmarks/converse decomposes its latency):
            # the first and the deciding chunk of the run that fired, their ends.
            chunk_s = detector.options.chunk_s
            clock["barge_in_first_speech"] = fired.speech_start_s + chunk_s
            clock["barge_in_decided"] = fired.speech_start_s + len(fired.probabilities) * chunk_s
            clock["barge_in_onset"] = getattr(self, "onset_s", None)
        reply_ended = clock.get("reply_ended")
        end = time.monotonic()

        def span(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else b - a

        timings: dict[str, float | None] = {
            "floor_s": span(self.started_at_s, clock.get("floor")),
            "first_audio_s": span(self.started_at_s, first_audio),
            "reply_s": span(first_audio, reply_ended),
            # The person's onset (as the VAD saw it) -> Player.stop called.
            "barge_in_latency_s": span(getattr(self, "onset_s", None), fired.at_s)
            if fired
            else None,
            # The deciding run alone (consecutive_chunks of speech).
            "barge_in_run_s": span(fired.speech_start_s, fired.at_s) if fired else None,
            "stt_load_s": self.loader.load_s if self.loader is not None else None,
            # Positive: the engine was loaded that long before the reply ended (hidden).
            "stt_ready_before_reply_end_s": span(
                self.loader.ready_at_s if self.loader else None, reply_ended
            ),
            "listen_s": lt.get("listen_s"),
            "endpoint_s": lt.get("endpoint_s"),
            "stt_wait_s": lt.get("stt_wait_s"),
            "transcribe_s": lt.get("transcribe_s"),
            "end_to_text_s": lt.get("end_to_text_s"),
            "total_s": end - self.started_at_s,
        }
        counters = {
            "input_overflows": self.mic.overflows if self.mic is not None else (
                listened.overflows if listened is not None else 0),
            "output_underflows": self.underflows,
            "aec_errors": self.canceller.errors if self.canceller is not None else 0,
            "aec_glitches": self.canceller.glitches if self.canceller is not None else 0,
            "inhibited_chunks": detector.inhibited_chunks if detector is not None else 0,
            "chunks": detector.chunks if detector is not None else 0,
            "glitch_inhibits": len(detector.glitch_at_s) if detector is not None else 0,
            # Speech runs judged with the echo well cancelled (BargeInOptions.fast_chunks).
            "fast_runs": detector.fast_runs if detector is not None else 0,
            # Speech runs the double-talk test held back (BargeInOptions.double_talk_db).
            "double_talk_vetoes": detector.double_talk_vetoes if detector is not None else 0,
        }  # fmt: skip
        text = listened.text if listened is not None else ""
        result = ConverseResult(
            text=text,
            speech_heard=bool(listened and listened.speech_heard),
            interrupted=fired is not None,
            stopped=stopped,
            skipped=self.skip_requested.is_set(),
            mode="barge-in" if self.barge_in else "half-duplex",
            aec=self.use_aec,
            aec_detection=None,
            interrupted_at_s=interrupted_at,
            heard_reply=heard,
            reply=self.text,
            timings=timings,
            clock=clock,
            counters=counters,
            listen=listened,
            speech=speech_result,
            sentences=sentences,
        )
        if self.settings.barge_in_trace and detector is not None:
            result.trace = [(round(t, 4), round(p, 3), i, None if a is None else round(a, 1),
                             None if x is None else round(min(x, 99.0), 1))
                            for t, p, i, a, x in detector.trace]  # fmt: skip
            if self.canceller is not None and self.canceller.capture_log is not None:
                result.levels = {"capture": self.canceller.capture_log,
                                 "render": self.canceller.render_log,
                                 "render_rate": self.canceller.render_sample_rate}  # fmt: skip
        return result


__all__ = ["RunOutcome"]
