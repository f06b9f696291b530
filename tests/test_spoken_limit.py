"""The Stop hook's length limit applies to what is spoken, not to the whole reply (issue 37).

An agent's reply of more than 20,000 characters (a long review, a diff explained) whose one
spoken line is short was never spoken: `vocal speak` refused the whole reply as too long before
the blockquotes were picked out of it. The limit (vocal.speaking.text.MAX_TEXT_CHARS) is the
speech's: it now holds the spoken lines, and a reply whose spoken lines pass it is spoken.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.conch_audio import MonitorRecorder
from harness.heard import MIN_SCORE, heard_intervals, rendered
from harness.runner import run_vocal
from vocal.agents.reply import spoken_part
from vocal.speaking.text import MAX_TEXT_CHARS, extract_quotes

SPOKEN = "The review is done and the build is green."
#: Prose and code of ~40,000 characters, none of it spoken, around one short blockquote.
PROSE = "The parser now keeps its state in one place, and every caller reads it there.\n" * 260
CODE = "```python\n" + "> not a quote, a prompt in a code block\n" * 100 + "```\n"
LONG_REPLY = f"{PROSE}\n{CODE}\n> {SPOKEN}\n\n{PROSE}"


def stop_event(tmp_path: Path, text: str) -> bytes:
    event = {
        "session_id": "long-1",
        "transcript_path": str(tmp_path / "none.jsonl"),
        "hook_event_name": "Stop",
        "last_assistant_message": text,
    }
    return json.dumps(event).encode()


def test_the_spoken_part_is_the_blockquotes_as_speak_quotes_reads_them() -> None:
    assert len(LONG_REPLY) > 2 * MAX_TEXT_CHARS
    assert spoken_part(LONG_REPLY) == f"> {SPOKEN}"
    reply = "Intro.\n\n> One\n> line.\n>\n> > Two.\n\n```\n> code\n```\nText.\n> Three."
    assert (
        extract_quotes(spoken_part(reply))
        == extract_quotes(reply)
        == ["One line.", "Two.", "Three."]
    )
    assert spoken_part("No quote at all.") == ""


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_a_long_reply_with_a_short_spoken_line_is_spoken(tmp_path: Path) -> None:
    reference = rendered(SPOKEN, tmp_path)
    with MonitorRecorder() as recorder:
        result = run_vocal(
            "hooks",
            "reply",
            "--wait",
            input=stop_event(tmp_path, LONG_REPLY),
            env={"VOCAL_TTS_ENGINE": "espeak-ng"},
        )
    assert result.returncode == 0, result.stderr.decode()
    payload = json.loads(result.stdout)
    assert payload["status"] == "read", payload
    assert [s["spoken"] for s in payload["speech"]] == [1]
    ((_start, _end, score),) = heard_intervals(recorder, [reference])
    assert score > MIN_SCORE


def test_spoken_lines_over_the_limit_are_still_refused(tmp_path: Path) -> None:
    """The limit still holds for what would be spoken: exit 2 from the speech, in the log."""
    quotes = "\n\n".join(f"> {SPOKEN} Part {i}." for i in range(MAX_TEXT_CHARS // 40))
    result = run_vocal("hooks", "reply", "--wait", input=stop_event(tmp_path, quotes))
    assert result.returncode == 2
    log = (tmp_path / "vocal-home" / "logs" / "hooks.log").read_text()
    assert "too long" in log
