"""`vocal cue` on a generated sound-font tree: lookup order, variants, MUTE, formats, the conch
skip, the hook's stdin, and one real stream that carries a cue to the null sink."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from harness.runner import run_vocal
from harness.sounds import tone
from vocal.agents.cues import BUILTIN_FONT as BUILTIN
from vocal.agents.cues import (
    cue_settings,
    find_cue,
    hook_snippet,
    play_cue,
    read_pcm,
    tool_from_hook_input,
)

RATE = 16_000
BUILTIN_FONT = Path(BUILTIN)


def wav(path: Path, frequency_hz: float = 440.0, duration_s: float = 0.05) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), tone(frequency_hz, duration_s, amplitude=0.3), RATE,
                    subtype="PCM_16")  # fmt: skip
    return path


@pytest.fixture
def font(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "font"
    wav(root / "default.wav")
    wav(root / "PreToolUse" / "default.wav")
    wav(root / "PreToolUse" / "Bash" / "default.wav")
    for n in ("01", "02", "03"):
        wav(root / "PreToolUse" / "Edit" / f"{n}.wav")
    wav(root / "Stop" / "Read.wav")  # a place as a single file
    (root / "Stop" / "notes.txt").write_text("not a cue")
    wav(root / "Stop" / "1.wav")  # not a variant name (01..99): ignored
    monkeypatch.setenv("VOCAL_SOUNDFONTS_DIR", str(root))
    return root


def test_most_specific_place_wins(font: Path) -> None:
    fonts = [font, BUILTIN_FONT]
    assert find_cue("PreToolUse", "Bash", fonts)[0] == str(font / "PreToolUse/Bash/default.wav")
    assert find_cue("PreToolUse", "Grep", fonts)[0] == str(font / "PreToolUse/default.wav")
    assert find_cue("PreToolUse", None, fonts)[0] == str(font / "PreToolUse/default.wav")
    assert find_cue("Stop", "Read", fonts)[0] == str(font / "Stop/Read.wav")
    assert find_cue("Stop", None, fonts)[0] == str(font / "default.wav")  # the font's fallback
    assert find_cue("Elsewhere", "X", fonts)[0] == str(font / "default.wav")


def test_the_shipped_font_answers_what_the_user_font_lacks(font: Path) -> None:
    (font / "default.wav").unlink()
    wav(font.with_name("font.wav"))  # beside the font, not in it: never its fallback
    assert find_cue("Notification", None, [font, BUILTIN])[0] == str(
        BUILTIN_FONT / "Notification" / "default.wav"
    )
    assert find_cue("Whatever", None, [BUILTIN])[0] == str(BUILTIN_FONT / "default.wav")
    for path in BUILTIN_FONT.rglob("*.wav"):  # small, and decodable without numpy
        assert path.stat().st_size < 10_000 and read_pcm(path).sample_rate == RATE


def test_variants_are_all_picked_and_only_variants(font: Path) -> None:
    rng = random.Random(7)
    picked = {Path(find_cue("PreToolUse", "Edit", [font], rng)[0]).name for _ in range(60)}
    assert picked == {"01.wav", "02.wav", "03.wav"}
    wav(font / "PreToolUse" / "Edit" / "default.wav")
    picked = {Path(find_cue("PreToolUse", "Edit", [font], rng)[0]).name for _ in range(80)}
    assert picked == {"default.wav", "01.wav", "02.wav", "03.wav"}


def test_mute_silences_a_place_and_below_unless_something_below_has_a_sound(font: Path) -> None:
    fonts = [font, BUILTIN_FONT]
    (font / "PreToolUse" / "MUTE").touch()
    assert find_cue("PreToolUse", "Grep", fonts) == (None, str(font / "PreToolUse"))
    assert find_cue("PreToolUse", None, fonts) == (None, str(font / "PreToolUse"))
    assert find_cue("PreToolUse", "Bash", fonts)[0] == str(font / "PreToolUse/Bash/default.wav")
    (font / "MUTE").touch()  # the whole font, and the shipped one behind it
    assert find_cue("Notification", None, fonts) == (None, str(font))
    result = play_cue("Notification", None, cue_settings())
    assert not result.played and result.skipped == "muted"


@pytest.mark.parametrize("fmt", ["FLAC", "OGG", "MP3"])
def test_compressed_formats_decode(tmp_path: Path, fmt: str) -> None:
    signal = tone(523.25, 0.3, amplitude=0.3)
    path = tmp_path / f"cue.{fmt.lower()}"
    subtype = {"FLAC": "PCM_16", "OGG": "VORBIS", "MP3": "MPEG_LAYER_III"}[fmt]
    soundfile.write(str(path), signal, RATE, format=fmt, subtype=subtype)
    pcm = read_pcm(path)
    decoded = np.frombuffer(pcm.frames, "<i2").astype(np.float32) / 32768
    assert pcm.sample_rate == RATE and pcm.channels == 1
    # Lossy codecs shift and pad: compare the level and the pitch, not the samples.
    assert abs(np.sqrt(np.mean(decoded**2)) - 0.3 / np.sqrt(2)) < 0.05
    spectrum = np.abs(np.fft.rfft(decoded))
    assert abs(np.argmax(spectrum) * RATE / len(decoded) - 523.25) < 10


def test_a_float_wav_goes_through_libsndfile(tmp_path: Path) -> None:
    path = tmp_path / "f.wav"
    soundfile.write(str(path), tone(440, 0.1, amplitude=0.5), RATE, subtype="FLOAT")
    pcm = read_pcm(path)
    assert pcm.sample_rate == RATE and abs(max(np.frombuffer(pcm.frames, "<i2")) - 16384) < 300


def test_bad_names_and_undecodable_files_are_usage_errors(font: Path) -> None:
    assert run_vocal("cue", "../etc").returncode == 2
    (font / "Broken").mkdir()
    (font / "Broken" / "default.ogg").write_bytes(b"OggS not really")
    result = run_vocal("cue", "Broken")
    assert result.returncode == 2 and b"cannot decode" in result.stderr


@pytest.mark.audio  # its own session's cue really plays
@pytest.mark.usefixtures("pulse")
def test_skipped_while_another_session_holds_the_conch(font: Path) -> None:
    from vocal.config import load_settings
    from vocal.floor.conch.queue import Conch

    conch = Conch.from_settings(load_settings())
    held = conch.acquire(session="other-agent", agent="claude")
    try:
        result = run_vocal("cue", "Stop", "--json")
        mine = run_vocal("cue", "Stop", "--json", env={"VOCAL_SESSION": "other-agent"})
    finally:
        conch.release(held.token)
    assert result.returncode == 0
    payload = json.loads(result.stdout)
    assert payload["skipped"] == "conch" and not payload["played"]
    assert b"cue skipped: other-agent (claude) holds the conch" in result.stderr
    assert json.loads(mine.stdout)["skipped"] != "conch"  # its own session is not "another"


def test_muted_vocal_plays_no_cue(font: Path) -> None:
    assert run_vocal("mute").returncode == 0
    payload = json.loads(run_vocal("cue", "Stop", "--json").stdout)
    assert payload["skipped"] == "gates" and not payload["played"]


def test_the_tool_comes_from_the_hooks_json_on_stdin(tmp_path: Path) -> None:
    hook = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {}})
    read_end, write_end = os.pipe()
    os.write(write_end, hook.encode())
    os.close(write_end)
    with os.fdopen(read_end) as stdin:
        assert tool_from_hook_input(stdin) == "Bash"
    read_end, write_end = os.pipe()  # a pipe nobody writes to: no wait beyond STDIN_WAIT_S
    with os.fdopen(read_end) as stdin:
        started = time.monotonic()
        assert tool_from_hook_input(stdin) is None
        assert time.monotonic() - started < 1.0
    os.close(write_end)


def test_install_snippet_is_claude_code_hooks_json() -> None:
    result = run_vocal("cue", "--install-snippet")
    assert result.returncode == 0
    hooks = json.loads(result.stdout)["hooks"]
    assert {"PreToolUse", "PostToolUse", "Notification", "Stop"} <= set(hooks)
    assert hooks["PreToolUse"][0]["matcher"] == "*"
    command = hooks["Stop"][0]["hooks"][0]["command"]
    assert command.endswith("-c 'import vocal.cuehook' Stop")
    assert hooks["Stop"][0]["hooks"][0]["type"] == "command"
    custom = hook_snippet(["vocal-cue"])["hooks"]["Stop"][0]["hooks"][0]
    assert custom["command"] == "vocal-cue Stop"


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
@pytest.mark.parametrize("player", ["paplay", "portaudio"])
def test_a_cue_reaches_the_null_sink_through_the_lean_entry_point(font: Path, player: str) -> None:
    from vocal.audio.devices import Microphone

    signal = tone(700, 0.25, amplitude=0.4)
    soundfile.write(str(font / "Stop" / "default.wav"), signal, RATE, subtype="PCM_16")
    with Microphone(RATE, block_frames=160) as mic:
        time.sleep(0.2)
        done = subprocess.run(
            [sys.executable, "-c", "import vocal.cuehook", "Stop", "--json"], input=b"",
            capture_output=True, timeout=30, env={**os.environ, "VOCAL_CUE_PLAYER": player},
        )  # fmt: skip
        time.sleep(0.3)
        mic.close()
        recorded = np.concatenate([b.samples for b in mic.blocks()])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["player"] == player
    loud = np.abs(recorded) > 0.05
    heard_s = loud.sum() / RATE
    assert 0.15 < heard_s < 0.35, heard_s  # the whole 0.25 s tone, once
    spectrum = np.abs(np.fft.rfft(recorded))
    assert abs(np.argmax(spectrum) * RATE / len(recorded) - 700) < 10


def test_the_lean_path_reads_settings_and_files_as_their_owners_do(
    vocal_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vocal.agents.cues resolves its few settings and stats these files without importing
    # vocal.config, vocal.floor.gates and vocal.floor.conch; they must still agree with those
    # modules.
    import dataclasses

    from vocal.agents.cues import CONCH_HOLDER_FILE, CONFIG_FILE, CUE_ENV, GATES_FILE
    from vocal.config import CONFIG_FILE_NAME, Settings, env_name, load_settings
    from vocal.floor.conch.queue import Conch
    from vocal.floor.gates import GATES_FILE_NAME

    assert GATES_FILE == GATES_FILE_NAME and CONFIG_FILE == CONFIG_FILE_NAME
    assert Conch(Path("/x"))._holder_path.name == CONCH_HOLDER_FILE
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert {name: env_name(fields[name]) for name in CUE_ENV} == CUE_ENV
    for env in ({}, {"VOCAL_SESSION": "s1", "VOCAL_CUE_PLAYER": "portaudio"}):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        lean, full = cue_settings(), load_settings()
        assert (lean.home, lean.conch_dir) == (str(full.home), str(full.conch_dir))
        assert (lean.session, lean.cue_player) == (full.session, full.cue_player)
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text('session = "from-file"\n')
    monkeypatch.delenv("VOCAL_SESSION")
    assert cue_settings().session == "from-file"
