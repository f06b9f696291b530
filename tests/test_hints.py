"""Vocabulary hints (vocal.stt.hints): where they come from, what the recognizers get, and
that Whisper (the embedded tiny.en, real) writes the names it was told about."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.runner import run_vocal
from harness.sounds import espeak
from vocal.audio.wav import write_wav
from vocal.errors import EXIT_USAGE, UsageError
from vocal.stt.hints import (
    MAX_HINT_CHARS,
    as_prompt,
    clip,
    distinctive,
    git_identifiers,
    read_hints,
    resolve_hints,
)
from vocal.stt.respell import respell, spoken_parts


@pytest.mark.parametrize(
    ("word", "kept"),
    [("parse_config", True), ("VOCAL_HOME", True), ("EchoCanceller", True),
     ("np.ndarray", True), ("barge-in", True), ("the", False), ("Config", False),
     ("__init__", False), ("self", False), ("x_1", False), ("12_34", False)],
)  # fmt: skip
def test_only_names_whisper_would_not_spell_are_kept(word: str, kept: bool) -> None:
    assert distinctive(word) is kept


def test_a_list_of_names_becomes_a_sentence_and_text_stays_text() -> None:
    hints = resolve_hints("parse_config, test_conch_stress; VOCAL_HOME", from_git=False)
    assert hints is not None and hints.source == "setting"
    assert hints.text == "We talked about parse_config and test_conch_stress and VOCAL_HOME."
    prose = "The project is about parse_config. Keep it short!"
    assert resolve_hints(prose, from_git=False).text == prose
    assert resolve_hints("  ", from_git=False) is None
    assert resolve_hints(None, from_git=False) is None


def test_hints_are_cut_to_what_whisper_is_sent() -> None:
    names = [f"name_{i:03d}" for i in range(200)]
    text = resolve_hints(", ".join(names), from_git=False).text
    assert len(text) <= MAX_HINT_CHARS and text.endswith(".") and not text.endswith("and.")
    assert text.startswith(as_prompt(names[:3])[:-1])
    assert clip("a  b\n c", 3) == "a b"


def test_a_hints_file_is_read_and_a_bad_one_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "words.txt"
    path.write_text("parse_config\nVOCAL_HOME\n", encoding="utf-8")
    assert read_hints(f"@{path}") == ("parse_config\nVOCAL_HOME\n", "file")
    hints = resolve_hints(f"@{path}", from_git=False)
    assert hints.source == "file" and "VOCAL_HOME" in hints.text
    with pytest.raises(UsageError, match="cannot read the hints file"):
        read_hints(f"@{tmp_path / 'missing.txt'}")
    (tmp_path / "big.txt").write_bytes(b"x" * 70_000)
    with pytest.raises(UsageError, match="over 64 KB"):
        read_hints(f"@{tmp_path / 'big.txt'}")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError):
        read_hints(f"@{tmp_path / 'binary.txt'}")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
                        "PATH": "/usr/bin:/bin", "HOME": str(repo)})  # fmt: skip


def test_git_gathers_the_names_of_the_files_being_worked_on(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    for i in range(5):  # old history: its names are not being worked on
        (repo / f"old_module_{i}.py").write_text(f"def ancient_helper_{i}(): pass\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"old {i}")
    (repo / "conch_queue.py").write_text("def parse_config(path):\n    return load_settings(path)\n"
                                         "parse_config(VOCAL_HOME)\n")  # fmt: skip
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the work")
    (repo / "conch_queue.py").write_text("def parse_config(path):\n    return readConfig(path)\n"
                                         "parse_config(VOCAL_HOME)\n")  # fmt: skip
    (repo / "new_file.py").write_text("STALE_LOCK_S = 30\n")  # untracked: new work
    found = git_identifiers(repo)
    assert found[:2] == ["conch_queue", "new_file"]  # the files' own names first
    assert {"parse_config", "readConfig", "STALE_LOCK_S", "VOCAL_HOME"} <= set(found)
    # The last 3 commits count (old 3, old 4, the work); older ones do not.
    assert "ancient_helper_4" in found and "ancient_helper_0" not in found
    hints = resolve_hints("EchoCanceller", from_git=True, cwd=repo / ".")
    assert hints.source == "setting+git" and "EchoCanceller and conch_queue" in hints.text
    # Outside a repository: nothing, and no error.
    assert git_identifiers(tmp_path) == []
    assert resolve_hints(None, from_git=True, cwd=tmp_path) is None


# -- respelling ----------------------------------------------------------------------------------
NAMES_SAID = ["parse_config", "VOCAL_HOME", "echo_levels_db", "AmbientFloor", "room_level",
              "room_level_db", "ConverseResult", "is_ready", "to_dict", "HTTPServer"]  # fmt: skip


@pytest.mark.parametrize(
    ("heard", "written"),
    [("Open Parse Config and check.", "Open parse_config and check."),
     ("Set vocal home to the temp dir", "Set VOCAL_HOME to the temp dir"),
     ("rename echo levels d b", "rename echo_levels_db"),
     ("rename echo levels dB.", "rename echo_levels_db."),
     ("a test for ambient floor", "a test for AmbientFloor"),
     ("print room level DB in the converse result", "print room_level_db in the ConverseResult"),
     ("the room level", "the room_level"),
     ("start the HTTP server", "start the HTTPServer"),
     ("parse_config as spelled", "parse_config as spelled"),
     # A name with a function word at an edge is ordinary speech far more often.
     ("the build is ready", "the build is ready"), ("go to dict", "go to dict"),
     # Only whole words: "parse configuration" is not the name.
     ("parse configuration", "parse configuration")],
)  # fmt: skip
def test_hinted_names_said_aloud_are_written_as_spelled(heard: str, written: str) -> None:
    assert respell(heard, NAMES_SAID) == written
    assert spoken_parts("MAX_HINT_CHARS") == ["max", "hint", "chars"]


def test_hints_keep_every_name_to_respell_not_only_those_that_fit() -> None:
    names = [f"name_{i:03d}" for i in range(200)]
    hints = resolve_hints(", ".join(names), from_git=False)
    assert hints.names == tuple(names) and len(hints.text) <= MAX_HINT_CHARS
    prose = resolve_hints("We work on parse_config today.", from_git=False)
    assert prose.names == ("parse_config",) and prose.text == "We work on parse_config today."


def test_the_loader_hands_out_an_engine_that_respells() -> None:
    from vocal.hearing.stt_loading import SttLoader
    from vocal.stt import Transcript

    class Heard:
        name = "fake"

        def transcribe(self, audio) -> Transcript:
            return Transcript(text="open parse config")

    loader = SttLoader(warm_up=False, hints=lambda: resolve_hints("parse_config", from_git=False))
    loader.wait()
    loader._engine = Heard()  # what loading made is not the point here: what is handed out is
    assert loader.engine().transcribe(None).text == "open parse_config"
    assert loader.ready_engine().name == "fake"


# -- what the recognizers get ---------------------------------------------------------------------
SAID = "Please open parse config and then run test conch stress."
NAMES = "parse_config, test_conch_stress"


def spelled(text: str) -> int:
    """How many of NAMES `text` spells (up to case and separator)."""
    lowered = text.lower().replace("-", "_")
    return sum(name in lowered for name in ("parse_config", "test_conch_stress"))


@pytest.mark.slow
@pytest.mark.parametrize("short_window", [True, False])
def test_whisper_writes_the_names_it_is_hinted(short_window: bool) -> None:
    from vocal.stt.faster_whisper import FasterWhisperEngine

    audio = espeak(SAID)
    plain = FasterWhisperEngine()
    hinted = FasterWhisperEngine(hints=resolve_hints(NAMES, from_git=False).text)
    plain.short_window = hinted.short_window = short_window
    without, with_hints = plain.transcribe(audio).text, hinted.transcribe(audio).text
    assert spelled(without) == 0, without  # "pass config", "test conscious stress"
    assert spelled(with_hints) >= 1, with_hints


def test_listen_reports_the_hints_it_used_and_rejects_a_bad_file(tmp_path: Path) -> None:
    clip_path = write_wav(tmp_path / "said.wav", espeak(SAID))
    result = run_vocal("listen", "--input", str(clip_path), "--json", "--hints", NAMES)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hints"] == {"text": as_prompt(["parse_config", "test_conch_stress"]),
                               "source": "setting", "prompt": True,
                               "names": ["parse_config", "test_conch_stress"]}  # fmt: skip
    assert spelled(report["text"]) >= 1, report["text"]
    plain = json.loads(run_vocal("listen", "--input", str(clip_path), "--json").stdout)
    assert plain["hints"] is None
    bad = run_vocal("listen", "--input", str(clip_path), "--hints", f"@{tmp_path / 'nope'}")
    assert bad.returncode == EXIT_USAGE and b"cannot read the hints file" in bad.stderr


def test_without_the_prompt_names_heard_are_still_written_as_spelled(tmp_path: Path) -> None:
    """`stt_hints_prompt = false`: Whisper decodes as without hints (the corpus WER exactly
    unchanged, benchmarks/hints), and the names it heard said aloud are respelled."""
    said = "Set vocal home to the temporary directory, then call load settings."
    clip_path = write_wav(tmp_path / "said.wav", espeak(said))
    names, env = "VOCAL_HOME, load_settings", {"VOCAL_STT_HINTS_PROMPT": "false"}
    result = run_vocal("listen", "--input", str(clip_path), "--json", "--hints", names, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hints"]["prompt"] is False
    assert "VOCAL_HOME" in report["text"] or "load_settings" in report["text"], report["text"]
