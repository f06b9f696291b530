"""`vocal converse` in a room of other talkers (the room harness's "chatter": six voices of
babble at -40 dBFS, which Silero calls speech): the turn still ends when the person stops, as
the endpointer hears only what stands above the room's own level (vocal.audio.room_gate's
`RoomGate`). Before it, every turn there ran to `--max-seconds`."""

from __future__ import annotations

import pytest

from harness.converse import converse
from harness.room import running_room
from harness.room_effects import ROOM_CONDITIONS
from harness.runner import run_vocal
from vocal.audio.wav import read_wav

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

#: Two sentences: the room is heard alone before the first sound and in the pause between them.
REPLY = "The tests are done. Which file should I open next?"
MAX_S = "15"


@pytest.fixture(scope="module")
def chatter_room(pulse):
    with running_room(pulse, ROOM_CONDITIONS["chatter"]) as started:
        yield started


def test_a_turn_in_a_room_of_talkers_ends_when_the_person_stops(chatter_room, tmp_path) -> None:
    from harness.corpus import load_clips, word_error_rate

    reply_wav = tmp_path / "reply.wav"
    made = run_vocal("speak", "-o", str(reply_wav), REPLY)
    assert made.returncode == 0, made.stderr
    reply = read_wav(reply_wav)
    reply_s = reply.mono_samples.shape[0] / reply.sample_rate

    # Nobody answers: the babble is not speech to the endpointer, the turn ends on the
    # no-speech timeout, not at the cap, and keeps the room's level for the next.
    code, result, err = converse(REPLY, "--max-seconds", MAX_S, timeout_s=60)
    assert code == 4, (err, result.get("text"), result.get("end_reason"), result.get("counters"))
    assert result["end_reason"] == "no_speech", (
        result["counters"],
        result["room_level_db"],
        result["interrupted_at_s"],
    )
    assert result["counters"]["room_gated_chunks"] > 0, result["counters"]
    # A person answers a second after the reply; the turn ends on their silence.
    clip = next(c for c in load_clips() if c.id == "arctic-awb-a0007")
    chatter_room.say(clip.path, delay_s=reply_s + 0.8, after="far")
    code, result, err = converse(REPLY, "--max-seconds", MAX_S, timeout_s=60)
    assert code == 0, (err, result.get("text"), result.get("end_reason"), result.get("counters"))
    assert result["end_reason"] in ("silence", "turn_complete", "max_pause"), result["end_reason"]
    # The whole sentence heard, the babble kept out of it: a word or two may go under the
    # babble ("supportive degree" for "superlative degree" once in CI, WER 0.1); a clipped
    # start, a lost end or the talkers' words in the transcript go over.
    assert word_error_rate(clip.text, result["text"]) <= 0.3, (clip.text, result["text"])
    assert result["timings"]["total_s"] < float(MAX_S), result["timings"]
