"""A simulated person on the loopback: answers a spoken turn once it is listening (as
scripts/run's demo person does), for the `vocal setup` proof and the README's first command."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from harness.sounds import espeak

#: What the person says.
ANSWER = "Yes, I can hear you clearly."


class SimulatedPerson:
    """Answers once a turn in this VOCAL_HOME says it is listening (as scripts/run does)."""

    def __init__(self, run_dir: Path, answer: str) -> None:
        self.run_dir = run_dir
        self.audio = espeak(answer)
        self.answered = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SimulatedPerson:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(30)

    def _run(self) -> None:
        from vocal.audio.player import Player
        from vocal.floor.control import ControlError, endpoints, send_command

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for endpoint in endpoints(self.run_dir):
                try:
                    phase = send_command(endpoint, "status").get("converse")
                except ControlError:
                    continue
                if phase == "listening":
                    with Player(self.audio.sample_rate) as player:
                        player.play(self.audio.mono_samples)
                        player.finish()
                        player.wait(10)
                    self.answered.set()
                    return
            time.sleep(0.1)
