"""The /vocal skill stays lean and true: what an agent holds every turn fits in a few hundred
tokens (issue 39), the exit codes are the CLI's, and every flag it names exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vocal import errors

SKILL_DIR = Path(__file__).resolve().parent.parent / "skills" / "vocal"
#: ~1.3 tokens a word: about 400 tokens. The rest lives in reference.md.
MAX_SKILL_WORDS = 320


def skill_text() -> str:
    return (SKILL_DIR / "SKILL.md").read_text(encoding="utf-8")


def test_the_skill_is_a_few_hundred_tokens_and_points_to_its_reference() -> None:
    text = skill_text()
    assert len(text.split()) <= MAX_SKILL_WORDS, len(text.split())
    assert "reference.md" in text and (SKILL_DIR / "reference.md").is_file()


def test_the_skills_exit_codes_are_the_clis() -> None:
    codes = {int(code) for code in re.findall(r"^\| (\d+) \|", skill_text(), re.M)}
    assert codes == {
        errors.EXIT_OK,
        errors.EXIT_USAGE,
        errors.EXIT_CONCH_TIMEOUT,
        errors.EXIT_NO_SPEECH,
        errors.EXIT_UNAVAILABLE,
        errors.EXIT_INTERRUPTED,
    }


def test_every_flag_the_skill_and_its_reference_name_exists() -> None:
    helps = {
        command: subprocess.run(
            [sys.executable, "-m", "vocal", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        for command in ("converse", "wake", "speak")
    }
    for name in ("SKILL.md", "reference.md"):
        text = (SKILL_DIR / name).read_text(encoding="utf-8")
        for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)):
            assert any(flag in help_text for help_text in helps.values()), (name, flag)
