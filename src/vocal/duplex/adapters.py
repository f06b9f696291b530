"""The adapters a converse turn hands to the parts other modules own: the reply as the output
`Turn` controls (`SpeechOutput`), and the microphone as the listen turn's source (`TurnSource`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.devices import Block, Microphone
    from vocal.audio.player import Player
    from vocal.speaking.speech import Speech


# -- adapters ---------------------------------------------------------------------------------
class SpeechOutput:
    """What `Turn` acts on from its control thread (stop/pause/resume/status), routed to the
    `Speech` so its synthesis thread stops too, not only the Player (a
    `vocal.audio.output.PlaybackControl`)."""

    def __init__(self, speech: Speech, player: Player, on_resume: Callable[[], None] | None = None):
        self.speech, self.player = speech, player
        self.sample_rate = player.sample_rate
        self.on_resume = on_resume

    def stop(self) -> None:
        self.speech.stop()

    def pause(self) -> None:
        self.speech.pause()

    def resume(self) -> None:
        if self.on_resume is not None:
            self.on_resume()
        self.speech.resume()

    @property
    def paused(self) -> bool:
        return self.speech.paused

    @property
    def played_frames(self) -> int:
        return self.player.played_frames

    @property
    def consumed_frames(self) -> int:
        """What `status` reports as played: the device's frames, silence included (as before
        the `PlaybackControl` protocol; speak and play report the reply's own frames)."""
        return self.player.played_frames


#: The microphone must deliver a block within this, or it is gone (Microphone.blocks).
INPUT_TIMEOUT_S = 2.0


class TurnSource:
    """The block source `listen` reads after the reply: first the kept blocks (the barge-in's
    pre-roll), then the still-open microphone; blocks captured before `heard_from_s` are
    silenced (the reply's tail) or dropped (half-duplex), and after a barge-in each block may
    be rebuilt from the raw capture (`rebuild`, vocal.duplex.echo_free.onset)."""

    def __init__(
        self,
        mic: Microphone,
        first: list[Block],
        *,
        heard_from_s: float | None,
        drop_before: bool,
        rebuild: Callable[[Block], np.ndarray | None] | None = None,
    ) -> None:
        self.mic = mic
        #: After a barge-in: each block's samples rebuilt from the raw capture (None: as is).
        self._rebuild = rebuild
        self.sample_rate = mic.sample_rate
        self.opened_at_s: float | None = time.monotonic()
        self._first = first
        self._heard_from_s = heard_from_s
        self._drop_before = drop_before

    @property
    def overflows(self) -> int:
        return self.mic.overflows

    def blocks(self, timeout_s: float = INPUT_TIMEOUT_S) -> Iterator[Block]:
        yield from self._first
        for block in self.mic.blocks(timeout_s):
            start_s = block.captured_at_s - block.samples.shape[0] / self.sample_rate
            if self._heard_from_s is not None and start_s < self._heard_from_s:
                if self._drop_before:
                    continue
                block.samples[:] = 0.0  # our own block (the callback copied it)
            elif self._rebuild is not None:
                rebuilt = self._rebuild(block)
                if rebuilt is not None:
                    block = dataclasses.replace(block, samples=rebuilt)
            yield block

    def close(self) -> None:
        self.mic.close()


__all__ = ["SpeechOutput", "TurnSource"]
