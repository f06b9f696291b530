"""`vocal converse` in a subprocess, and the barge-in scenario that the converse tests and the
sound-server smoke test (tests/test_sound_servers.py) both run on the room harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.room import Room, without_room_stall
from harness.runner import start_vocal
from harness.sounds import espeak
from vocal.audio.wav import write_wav
from vocal.duplex.measure.forecast import REPLIES

#: Replies for measuring the echo canceller (benchmarks/converse's ERLE part and
#: benchmarks/aec_warmup): the five `vocal doctor --echo` forecasts its reduction over, so
#: that the two figures are over the same speech; runs cycle through them.
ERLE_REPLIES = REPLIES
#: ~6 s of hibari speech: long enough to be cut.
LONG_REPLY = REPLIES[0]
#: What the person in the room says over it (espeak-ng), and the words of it that count.
NEAR = "please stop and open the settings file"
NEAR_WORDS = ("open", "settings")


def near_wav(directory: Path) -> Path:
    """NEAR spoken by espeak-ng, written to `directory`/near.wav (for Room.say)."""
    return write_wav(directory / "near.wav", espeak(NEAR))


def converse(*args: str, timeout_s: float = 60) -> tuple[int, dict, str]:
    """`vocal converse ARGS --json --no-speech-timeout 1.5`: exit code, JSON result, stderr."""
    proc = start_vocal("converse", *args, "--json", "--no-speech-timeout", "1.5")
    out, err = proc.communicate(timeout=timeout_s)
    payload = json.loads(out) if out.strip() else {}
    return proc.returncode, payload, err.decode()


def quiet_after_person_s(room: Room, near_id: str, timeout_s: float = 5.0) -> float:
    """Seconds from the person's first sample (`near_id`'s `near_start`) to the reply's last
    loud sample after it, both on the room's clock: how long the person talked over the reply.
    The `far_end` is looked for only after that `near_start`, so that a reply an earlier test
    played through the same room is never taken for this one."""
    started = room.wait_event("near_start", id=near_id)
    far_end = room.wait_event("far_end", after=room.index_of(started) + 1, timeout_s=timeout_s)
    return far_end["at_s"] - started["at_s"]


def words_in(text: str, words: tuple[str, ...]) -> list[str]:
    """The `words` found in `text` (case-insensitive)."""
    lowered = text.lower()
    return [w for w in words if w in lowered]


def barge_in(room: Room, near_wav: Path) -> tuple[Any, int, dict, str]:
    """The person (`near_wav`) starts talking 2 s into LONG_REPLY; a run in which the room
    itself stalled is repeated (harness.room.without_room_stall), and so is one whose own audio
    glitched (an underflow moves the echo path, and the detector waits out its glitch window
    by design, up to 1.5 s: a CI run cut 1.0 s after the person began, with 3 underflows).
    The person's room id, and converse's exit code, result and stderr."""

    def run() -> tuple:
        near_id = room.say(near_wav, delay_s=2.0, after="far")
        return near_id, *converse(LONG_REPLY)

    def undisturbed(outcome: tuple) -> bool:
        return outcome[2].get("counters", {}).get("glitch_inhibits", 0) == 0

    return without_room_stall(room, run, clean=undisturbed)
