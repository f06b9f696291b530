"""`vocal voices` and the voice store: every verb, the clip rules, and how --voice is resolved.

Clips are made at test time: speech with espeak-ng (tests/harness/sounds.py), bad clips with numpy.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from harness.runner import run_vocal
from harness.sounds import espeak, tone, with_silence
from vocal.audio.wav import Audio, read_wav, write_wav
from vocal.config import load_settings
from vocal.errors import EXIT_UNAVAILABLE, EXIT_USAGE, EngineError, UsageError
from vocal.tts.clips import ClipError, prepare_clip
from vocal.tts.resolve import resolve_stored_voice, stored_voice
from vocal.tts.voices import CLONING_ENGINE, VoiceStore, sample_name_for, validate_voice_name

SENTENCE_A = (
    "The quick brown fox jumps over the lazy dog, and then it runs far away into the deep green "
    "forest to rest."
)
SENTENCE_B = (
    "Please remember to water the plants on the balcony every morning, and close the windows "
    "before you leave for work."
)


def speech_clip(text: str = SENTENCE_A, *, voice: str = "en-us", gain: float = 1.0) -> Audio:
    """About 6.5 s of espeak speech with a second of silence either side (16 kHz mono)."""
    audio = with_silence(espeak(text, voice=voice), before_s=1.0, after_s=1.0)
    return Audio(audio.mono_samples * np.float32(gain), audio.sample_rate)


def save(path: Path, audio: Audio) -> Path:
    write_wav(path, audio)
    return path


@pytest.fixture
def good_clip(tmp_path: Path) -> Path:
    return save(tmp_path / "my take.wav", speech_clip())


@pytest.fixture
def store(vocal_home: Path) -> VoiceStore:
    return VoiceStore.from_settings(load_settings())


def wav_format(path: Path) -> tuple[int, int, int]:
    """(channels, sample_rate, bits) from a WAV header."""
    data = path.read_bytes()
    pos = 12
    while data[pos : pos + 4] != b"fmt ":
        pos += 8 + struct.unpack_from("<I", data, pos + 4)[0]
    _tag, channels, rate, _byte_rate, _align, bits = struct.unpack_from("<HHIIHH", data, pos + 8)
    return channels, rate, bits


def stderr(result) -> str:  # noqa: ANN001
    return result.stderr.decode()


# -- names ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["alice", "Bob_2", "narrator.calm", "voix-été", "a" * 64])
def test_good_names_are_accepted(name: str) -> None:
    assert validate_voice_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../evil", "path separator"),
        ("a/b", "path separator"),
        ("a\\b", "path separator"),
        ("..", "'..'"),
        ("a..b", "'..'"),
        (".hidden", "hidden"),
        ("", "empty"),
        ("a" * 65, "longer than 64"),
        ("two words", "letters, digits"),
        ("-flag", "letters, digits"),
        ("alice\n", "letters, digits"),  # `$` matched before a trailing newline (issue 17)
        ("alice\r", "letters, digits"),
        ("al\x00ice", "letters, digits"),
    ],
)
def test_bad_names_are_refused_with_the_reason(name: str, reason: str) -> None:
    with pytest.raises(UsageError, match="invalid voice name") as caught:
        validate_voice_name(name)
    assert reason in str(caught.value)
    assert caught.value.exit_code == EXIT_USAGE


def test_sample_names_come_from_the_file_name() -> None:
    assert sample_name_for(Path("my take.WAV")) == "my-take"
    assert sample_name_for(Path("default.wav")) == "sample"
    assert sample_name_for(Path("...wav")) == "sample"


# -- clip rules -------------------------------------------------------------------------------
def test_a_good_clip_is_trimmed_converted_and_normalised() -> None:
    stored, report = prepare_clip(speech_clip())
    assert stored.sample_rate == 24_000 and stored.channels == 1
    assert 5.0 <= report.speech_s <= 9.0
    # One second of silence either side is trimmed to the 0.15 s margins.
    assert report.stored_duration_s < report.source_duration_s - 1.5
    assert report.stored_duration_s == pytest.approx(report.speech_s + 0.3, abs=0.05)
    # Speech RMS at -20 dBFS, unless that would push the peaks past the -1 dBFS ceiling.
    ceiling = 10 ** (-1 / 20)
    assert stored.peak() <= ceiling + 1e-3
    assert report.speech_rms_dbfs == pytest.approx(
        -20.0, abs=0.6
    ) or stored.peak() == pytest.approx(ceiling, abs=2e-3)


def test_loudness_is_normalised_whatever_the_input_level() -> None:
    quiet, quiet_report = prepare_clip(speech_clip(gain=0.05))
    loud, loud_report = prepare_clip(speech_clip(gain=1.0))
    assert quiet_report.gain_db > loud_report.gain_db + 20
    assert quiet.rms() == pytest.approx(loud.rms(), rel=0.05)
    assert max(quiet.peak(), loud.peak()) <= 0.892  # -1 dBFS ceiling


def test_a_stereo_44k_clip_becomes_mono_24k() -> None:
    mono = speech_clip().resample(44_100).mono_samples
    stereo = Audio(np.stack([mono, mono * 0.5], axis=1), 44_100)
    stored, report = prepare_clip(stereo)
    assert (report.source_channels, report.source_sample_rate) == (2, 44_100)
    assert (stored.channels, stored.sample_rate) == (1, 24_000)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: with_silence(espeak("Hello there, how are you."), 1.0, 1.0), "holds 1."),
        (lambda: Audio(np.tile(speech_clip().mono_samples, 3), 16_000), "holds 2"),
        (lambda: Audio(np.zeros(16_000 * 7, np.float32), 16_000), "is silent"),
        (lambda: Audio(np.clip(speech_clip().mono_samples * 12, -1, 1), 16_000), "is clipped"),
        (lambda: Audio(tone(220, 7.0, amplitude=0.3), 16_000), "is not speech"),
    ],
    ids=["2s", "20s", "silence", "clipped", "tone"],
)
def test_bad_clips_are_refused_with_the_reason(make, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ClipError, match=message) as caught:
        prepare_clip(make(), name="take.wav")
    assert caught.value.exit_code == EXIT_USAGE


def test_faint_noise_is_silence_not_speech() -> None:
    noise = np.random.default_rng(1).standard_normal(16_000 * 7).astype(np.float32) * 0.001
    with pytest.raises(ClipError, match="is silent"):
        prepare_clip(Audio(noise, 16_000))


def test_a_single_full_scale_peak_is_not_clipping() -> None:
    samples = speech_clip().mono_samples.copy()
    samples /= np.abs(samples).max()  # one sample exactly at full scale
    prepare_clip(Audio(samples, 16_000))


# -- vocal voices add -------------------------------------------------------------------------
def test_add_stores_a_16_bit_mono_24k_default(good_clip: Path, tmp_path: Path) -> None:
    persona = tmp_path / "persona.md"
    persona.write_text("# Alice\nWarm, brief, never sarcastic.\n")
    result = run_vocal(
        "voices",
        "add",
        "alice",
        str(good_clip),
        "--description",
        "A warm\nnarrator",
        "--persona",
        str(persona),
    )
    assert result.returncode == 0, stderr(result)
    assert "added voice 'alice'" in stderr(result)
    assert result.stdout == b""
    directory = load_settings().voices_dir / "alice"
    default = directory / "default.wav"
    assert default.is_symlink() and os.readlink(default) == "my-take.wav"
    assert wav_format(default) == (1, 24_000, 16)
    assert 5.0 <= read_wav(default).duration_s <= 9.5
    assert (directory / "description.txt").read_text() == "A warm narrator\n"
    assert (directory / "persona.md").read_text() == persona.read_text()


def test_voices_dir_override(good_clip: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "my-voices"
    result = run_vocal(
        "voices", "add", "bob", str(good_clip), env={"VOCAL_VOICES_DIR": str(elsewhere)}
    )
    assert result.returncode == 0, stderr(result)
    assert (elsewhere / "bob" / "default.wav").is_file()
    assert not (load_settings().home / "voices").exists()


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("2s", "holds 1."),
        ("20s", "holds 2"),
        ("silence", "is silent"),
        ("clipped", "is clipped"),
        ("text", "not an audio file"),
    ],
)
def test_add_refuses_bad_clips(tmp_path: Path, kind: str, message: str) -> None:
    path = tmp_path / f"{kind}.wav"
    if kind == "2s":
        save(path, with_silence(espeak("Hello there, how are you."), 0.5, 0.5))
    elif kind == "20s":
        save(path, Audio(np.tile(speech_clip().mono_samples, 3), 16_000))
    elif kind == "silence":
        save(path, Audio(np.zeros(16_000 * 7, np.float32), 16_000))
    elif kind == "clipped":
        save(path, Audio(np.clip(speech_clip().mono_samples * 12, -1, 1), 16_000))
    else:
        path.write_text("this is not audio, just some words in a file\n" * 100)
    result = run_vocal("voices", "add", "bad", str(path))
    assert result.returncode == EXIT_USAGE
    lines = stderr(result).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vocal: error: ") and message in lines[0]
    assert not (load_settings().voices_dir / "bad").exists()
    leftovers = (
        list(load_settings().voices_dir.glob(".*")) if load_settings().voices_dir.exists() else []
    )
    assert leftovers == []


def test_add_reads_flac(tmp_path: Path) -> None:
    import soundfile

    path = tmp_path / "take.flac"
    clip = speech_clip()
    soundfile.write(str(path), clip.mono_samples, clip.sample_rate)
    result = run_vocal("voices", "add", "flac", str(path))
    assert result.returncode == 0, stderr(result)


def test_add_refuses_a_name_with_dot_dot(good_clip: Path, vocal_home: Path) -> None:
    result = run_vocal("voices", "add", "../escape", str(good_clip))
    assert result.returncode == EXIT_USAGE
    assert "invalid voice name '../escape'" in stderr(result)
    assert not (vocal_home / "escape").exists() and not (vocal_home.parent / "escape").exists()


def test_add_refuses_an_existing_name_unless_forced(good_clip: Path, tmp_path: Path) -> None:
    assert run_vocal("voices", "add", "alice", str(good_clip), "-d", "first").returncode == 0
    other = save(tmp_path / "second.wav", speech_clip(SENTENCE_B, voice="en-gb"))
    refused = run_vocal("voices", "add", "alice", str(other), "-d", "second")
    assert refused.returncode == EXIT_USAGE
    assert "already exists" in stderr(refused) and "--force" in stderr(refused)
    voice = VoiceStore.from_settings(load_settings()).get("alice")
    assert voice.description == "first" and voice.default == "my-take"

    forced = run_vocal("voices", "add", "alice", str(other), "-d", "second", "--force")
    assert forced.returncode == 0, stderr(forced)
    voice = VoiceStore.from_settings(load_settings()).get("alice")
    assert voice.description == "second" and voice.default == "second"
    assert [s.name for s in voice.samples] == ["second"]


def test_a_failed_forced_add_leaves_the_old_voice(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    store.add("alice", good_clip)
    short = save(tmp_path / "short.wav", espeak("Hi."))
    with pytest.raises(ClipError):
        store.add("alice", short, force=True)
    assert store.get("alice").default == "my-take"
    assert [p.name for p in store.root.iterdir()] == ["alice"]


# -- list / show ------------------------------------------------------------------------------
def make_bin(store: VoiceStore, good_clip: Path, tmp_path: Path) -> Path:
    """Voice 'bin' with two takes and default.wav on the first."""
    store.add("bin", good_clip)
    second = prepare_clip(speech_clip(SENTENCE_B, voice="en-gb"))[0]
    write_wav(store.root / "bin" / "second.wav", second)
    return store.root / "bin"


def test_list_shows_voices_and_reports_a_bin_without_default(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    store.add("alice", good_clip, description="Warm narrator")
    directory = make_bin(store, good_clip, tmp_path)
    (store.root / "broken").mkdir()
    for name in ("a.wav", "b.wav"):
        (store.root / "broken" / name).write_bytes((directory / "second.wav").read_bytes())
    (store.root / ".hidden").mkdir()

    result = run_vocal("voices", "list")
    assert result.returncode == 0, stderr(result)
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 3
    name, length, unit, sample, *about = lines[0].split()
    assert (name, unit, sample, " ".join(about)) == ("alice", "s", "my-take", "Warm narrator")
    assert 5.0 < float(length) < 9.5
    assert "bin" in lines[1] and "(+1 more)" in lines[1]
    assert lines[2].startswith("! broken")
    assert "2 samples (a, b) and no default.wav" in lines[2]
    assert "vocal voices use broken SAMPLE" in lines[2]

    listed = json.loads(run_vocal("voices", "list", "--json").stdout)
    by_name = {v["name"]: v for v in listed}
    assert set(by_name) == {"alice", "bin", "broken"}
    assert by_name["alice"]["description"] == "Warm narrator"
    assert by_name["alice"]["samples"][0]["sample_rate"] == 24_000
    assert by_name["broken"]["problem"].startswith("2 samples")
    assert by_name["bin"]["problem"] is None and len(by_name["bin"]["samples"]) == 2


def test_list_with_no_voices(vocal_home: Path) -> None:
    result = run_vocal("voices", "list")
    assert result.returncode == 0 and result.stdout == b""
    assert "no voices" in stderr(result)
    assert json.loads(run_vocal("voices", "list", "--json").stdout) == []


def test_show_prints_samples_persona_and_the_engine_status(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    persona = tmp_path / "p.md"
    persona.write_text("Speaks like a ship's captain.\n")
    store.add("alice", good_clip, description="Captain", persona=persona)
    result = run_vocal("voices", "show", "alice")
    assert result.returncode == 0, stderr(result)
    out = result.stdout.decode()
    assert "description: Captain" in out
    assert "* my-take" in out and "24000 Hz" in out
    assert "Speaks like a ship's captain." in out
    # No weights here: the engine line says what is missing and how to get it.
    assert "weights missing" in out and "onnx/speech_encoder.onnx" in out
    assert "vocal setup --engine chatterbox" in out

    shown = json.loads(run_vocal("voices", "show", "alice", "--json").stdout)
    assert shown["persona"] == "Speaks like a ship's captain.\n"
    assert shown["default"] == "my-take"


def test_show_an_unknown_voice_lists_the_known_ones(good_clip: Path, store: VoiceStore) -> None:
    store.add("alice", good_clip)
    result = run_vocal("voices", "show", "nobody")
    assert result.returncode == EXIT_USAGE
    assert "no voice named 'nobody'" in stderr(result) and "alice" in stderr(result)


# -- use / remove -----------------------------------------------------------------------------
def test_use_switches_the_default_symlink(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    directory = make_bin(store, good_clip, tmp_path)
    result = run_vocal("voices", "use", "bin", "second")
    assert result.returncode == 0, stderr(result)
    assert os.readlink(directory / "default.wav") == "second.wav"
    assert "now speaks with sample 'second'" in stderr(result)
    assert run_vocal("voices", "use", "bin", "my-take.wav").returncode == 0
    assert os.readlink(directory / "default.wav") == "my-take.wav"


def test_use_fixes_a_bin_without_default(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    directory = make_bin(store, good_clip, tmp_path)
    (directory / "default.wav").unlink()
    assert store.get("bin").problem is not None
    with pytest.raises(UsageError, match="no default.wav"):
        store.get("bin").reference()
    store.use("bin", "second")
    assert store.get("bin").problem is None
    assert store.get("bin").reference() == directory / "default.wav"


def test_use_keeps_a_hand_made_default_in_the_bin(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    directory = make_bin(store, good_clip, tmp_path)
    (directory / "default.wav").unlink()
    (directory / "default.wav").write_bytes((directory / "my-take.wav").read_bytes())
    store.use("bin", "second")
    assert os.readlink(directory / "default.wav") == "second.wav"
    assert (directory / "previous-default.wav").is_file()


def test_use_refuses_unknown_and_bad_samples(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    directory = make_bin(store, good_clip, tmp_path)
    missing = run_vocal("voices", "use", "bin", "nope")
    assert missing.returncode == EXIT_USAGE
    assert "no sample 'nope'" in stderr(missing) and "my-take, second" in stderr(missing)
    write_wav(directory / "short.wav", espeak("Hi there."))
    short = run_vocal("voices", "use", "bin", "short")
    assert short.returncode == EXIT_USAGE and "holds 0." in stderr(short)
    assert os.readlink(directory / "default.wav") == "my-take.wav"
    escape = run_vocal("voices", "use", "bin", "../alice")
    assert escape.returncode == EXIT_USAGE


def test_remove_deletes_the_voice(good_clip: Path, store: VoiceStore) -> None:
    store.add("alice", good_clip)
    cached = load_settings().cache_dir / "chatterbox" / "conditioning" / "alice-0123.npz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"x")
    result = run_vocal("voices", "remove", "alice")
    assert result.returncode == 0, stderr(result)
    assert not (store.root / "alice").exists() and not cached.exists()
    again = run_vocal("voices", "remove", "alice")
    assert again.returncode == EXIT_USAGE and "no voice named 'alice'" in stderr(again)
    assert run_vocal("voices", "remove", "../..").returncode == EXIT_USAGE


# -- only what vocal made (issue 17) -----------------------------------------------------------
@pytest.fixture
def user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """VOCAL_VOICES_DIR pointed at a folder of the user's, with a project in it."""
    folder = tmp_path / "user"
    (folder / "Projects" / "src").mkdir(parents=True)
    (folder / "Projects" / "src" / "main.py").write_text("print('years of work')\n")
    (folder / "Projects" / "README.md").write_text("# mine\n")
    monkeypatch.setenv("VOCAL_VOICES_DIR", str(folder))
    return folder


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_folder_of_the_users_is_never_removed_or_replaced(
    user_folder: Path, good_clip: Path
) -> None:
    before = snapshot(user_folder)
    removed = run_vocal("voices", "remove", "Projects")
    assert removed.returncode == EXIT_USAGE
    assert "refusing to remove" in stderr(removed) and "README.md, src" in stderr(removed)
    assert "Traceback" not in stderr(removed)
    replaced = run_vocal("voices", "add", "Projects", str(good_clip), "--force")
    assert replaced.returncode == EXIT_USAGE and "refusing to replace" in stderr(replaced)
    plain = run_vocal("voices", "add", "Projects", str(good_clip))
    assert plain.returncode == EXIT_USAGE and "--force" not in stderr(plain)
    used = run_vocal("voices", "use", "Projects", "x")
    assert used.returncode == EXIT_USAGE and "refusing to change" in stderr(used)
    listed = run_vocal("voices", "list")
    assert listed.returncode == 0, stderr(listed)
    assert "! Projects" in listed.stdout.decode() and "not a voice" in listed.stdout.decode()
    assert "--force" not in listed.stdout.decode()
    assert snapshot(user_folder) == before


def test_remove_takes_a_voice_vocal_made_but_not_an_unmarked_one(
    good_clip: Path, store: VoiceStore
) -> None:
    store.add("alice", good_clip, description="made here")
    assert (store.root / "alice" / ".vocal-voice").is_file()
    older = store.root / "older"  # no manifest: vocal's layout only proves nothing (issue 37)
    older.mkdir()
    (older / "default.wav").write_bytes((store.root / "alice" / "my-take.wav").read_bytes())
    (older / "description.txt").write_text("older\n")
    result = run_vocal("voices", "remove", "alice")
    assert result.returncode == 0, stderr(result)
    assert not (store.root / "alice").exists()
    refused = run_vocal("voices", "remove", "older")
    assert refused.returncode == EXIT_USAGE and "no .vocal-voice manifest" in stderr(refused)
    assert sorted(p.name for p in older.iterdir()) == ["default.wav", "description.txt"]


def test_a_voice_with_a_file_of_the_users_in_it_is_not_removed(
    good_clip: Path, store: VoiceStore
) -> None:
    store.add("alice", good_clip)
    (store.root / "alice" / "notes.txt").write_text("mine\n")
    result = run_vocal("voices", "remove", "alice")
    assert result.returncode == EXIT_USAGE and "notes.txt" in stderr(result)
    assert (store.root / "alice" / "notes.txt").read_text() == "mine\n"
    assert (store.root / "alice" / "my-take.wav").is_file()


def test_a_default_link_leading_out_of_the_voice_is_refused(
    good_clip: Path, store: VoiceStore, tmp_path: Path
) -> None:
    store.add("alice", good_clip)
    secret = tmp_path / "secret.wav"
    secret.write_bytes((store.root / "alice" / "my-take.wav").read_bytes())
    for target in (str(secret), "../../secret.wav"):
        link = store.root / "alice" / "default.wav"
        link.unlink()
        link.symlink_to(target)
        voice = store.get("alice")
        assert voice.problem is not None and "outside the voice's directory" in voice.problem
        with pytest.raises(UsageError, match="outside"):
            voice.reference()
        result = run_vocal("voices", "remove", "alice")
        assert result.returncode == EXIT_USAGE
        assert secret.is_file()


# -- resolve_stored_voice: what --voice NAME means ---------------------------------------------
def test_a_stored_voice_resolves_to_the_cloning_engine(
    good_clip: Path, store: VoiceStore, tmp_path: Path, monkeypatch
) -> None:  # noqa: ANN001
    from harness.chatterbox_bundle import build_bundle

    store.add("alice", good_clip)
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(build_bundle(tmp_path / "bundle")))
    engine, voice = resolve_stored_voice("alice", load_settings())
    assert engine == CLONING_ENGINE
    assert voice == str(store.root / "alice" / "default.wav")


def test_other_names_go_to_the_configured_engine(
    good_clip: Path, store: VoiceStore, monkeypatch
) -> None:  # noqa: ANN001
    store.add("alice", good_clip)
    settings = load_settings()
    assert resolve_stored_voice("en-us", settings) == (settings.tts_engine, "en-us")
    assert resolve_stored_voice(None, settings) == (settings.tts_engine, None)
    assert resolve_stored_voice("en-gb", settings, engine="espeak-ng") == ("espeak-ng", "en-gb")
    assert resolve_stored_voice("../alice", settings) == (settings.tts_engine, "../alice")
    assert stored_voice("en-us", settings) is None and stored_voice(None, settings) is None
    assert stored_voice("alice", settings, check=False)[0] == CLONING_ENGINE
    monkeypatch.setenv("VOCAL_VOICE", "en-gb")
    assert resolve_stored_voice(None, load_settings()) == (settings.tts_engine, "en-gb")


def test_a_stored_voice_without_weights_is_exit_5_naming_the_files(
    good_clip: Path, store: VoiceStore
) -> None:
    store.add("alice", good_clip)
    with pytest.raises(EngineError) as caught:
        resolve_stored_voice("alice", load_settings())
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert message.startswith("the cloned voice 'alice' needs the Chatterbox ONNX weights")
    for name in (
        "onnx/speech_encoder.onnx",
        "onnx/embed_tokens.onnx",
        "tokenizer.json",
        "onnx/language_model_q4.onnx",
        "onnx/conditional_decoder.onnx_data",
    ):
        assert name in message
    assert "vocal setup --engine chatterbox" in message and "VOCAL_CHATTERBOX_DIR" in message
    # Without the check (the lead may check later) it still resolves to the cloning engine.
    assert resolve_stored_voice("alice", load_settings(), check=False)[0] == CLONING_ENGINE


def test_a_stored_voice_is_not_silently_given_to_another_engine(
    good_clip: Path, store: VoiceStore
) -> None:
    store.add("alice", good_clip)
    with pytest.raises(UsageError, match="only the chatterbox engine speaks"):
        resolve_stored_voice("alice", load_settings(), engine="espeak-ng", check=False)


def test_a_broken_voice_is_reported_not_guessed(
    good_clip: Path, tmp_path: Path, store: VoiceStore
) -> None:
    directory = make_bin(store, good_clip, tmp_path)
    (directory / "default.wav").unlink()
    with pytest.raises(UsageError, match="2 samples .* and no default.wav"):
        resolve_stored_voice("bin", load_settings(), check=False)


def test_add_checks_a_flac_header_against_the_limits_before_decoding(tmp_path: Path) -> None:
    """FLAC, OGG and MP3 clips go through soundfile: the same duration and rate limits as a
    WAV, read from the header (issue 17)."""
    import soundfile

    path = tmp_path / "long.flac"
    rate = 8_000
    with soundfile.SoundFile(str(path), "w", samplerate=rate, channels=1, format="FLAC") as out:
        silence = np.zeros(rate * 60, np.float32)
        for _ in range(21):  # 21 minutes of near-nothing: small on disk, over the limit
            out.write(silence)
    result = run_vocal("voices", "add", "long", str(path))
    assert result.returncode == 2, stderr(result)
    assert "over the limit" in stderr(result) and "Traceback" not in stderr(result)
