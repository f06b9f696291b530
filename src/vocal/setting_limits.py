"""The range of every setting (issue 37): the bounds of a number, the longest text or path,
the words a mode may be. vocal.config checks every value it reads against them, and the
command-line flags of the same settings take the same bounds.
"""

from __future__ import annotations

from typing import TypedDict

# Every field of `Settings` is in exactly one table here, or is a bool (whose range is
# true/false): a number has inclusive bounds, a text or a path a longest length and, where it
# names one of a few fixed modes, the words it may be. A test fails when a field is added
# without its range. Outside it a value is a usage error (exit 2) naming the setting, before
# anything runs: a beam of 100000 once grew past 6 GB, a `--max-seconds` of 1e300 ended in an
# OverflowError.

#: A day, the longest any wait, hold or lease is meant to last.
DAY_S = 86_400.0
#: An hour, the longest recording (16 kHz float samples: 230 MB).
HOUR_S = 3_600.0

#: Numeric settings: (lowest, highest), inclusive. The command-line flags of the same settings
#: take the same bounds (`flag_range`, vocal.commands._app.float_range).
SETTING_RANGES: dict[str, tuple[float, float]] = {
    # Beam width of faster-whisper's decoding: memory grows with it; 5 is the default, and
    # accuracy stops growing long before 16.
    "stt_beam_size": (1, 16),
    "openai_stt_timeout_s": (0.1, 600.0),
    # The end of a turn: the flags' minimums (one VAD chunk is 32 ms), and waits a person
    # would still call a pause.
    "silence_ms": (100, 10_000),
    "turn_check_ms": (32, 10_000),
    "max_pause_ms": (100, 30_000),
    "max_seconds": (0.1, HOUR_S),
    "no_speech_timeout_s": (0.1, HOUR_S),
    "wake_timeout_s": (1.0, DAY_S),
    "speed": (0.25, 4.0),
    "sentence_pause_ms": (0, 5_000),
    "conch_lock_expiry_s": (0.5, DAY_S),
    "conch_timeout_s": (0.0, DAY_S),
    # 0 counts as 1: `vocal replay` and skip_back need one utterance (vocal.floor.history).
    "history_size": (0, 1_000),
    "conch_remote_ttl_s": (0.5, DAY_S),
    "tts_http_timeout_s": (0.1, 600.0),
    # Barge-in: chunks of 32 ms; probabilities strictly between 0 and 1 (BargeInOptions).
    "barge_in_chunks": (1, 50),
    "barge_in_threshold": (0.01, 0.99),
    "piece_timeout_s": (0.0, 600.0),
    "conch_wait_cap_s": (0.0, HOUR_S),
    "focus_hold_s": (0.0, DAY_S),
    "early_transcription_ms": (0, 10_000),
    "barge_in_onset_threshold": (0.01, 0.99),
    "barge_in_fast_chunks": (1, 50),
    "barge_in_double_talk_db": (-20.0, 60.0),
    "barge_in_strong_chunk_db": (-20.0, 60.0),
}

#: Longest names (devices, engines, models, voices, sessions, agents): far past any real one.
NAME_CHARS = 256
#: Longest URL (what browsers and servers commonly accept).
URL_CHARS = 2_048
#: Longest path (Linux's PATH_MAX).
PATH_CHARS = 4_096
#: Longest prompt text (the hints are cut to 400 characters when used: vocal.stt.hints).
PROMPT_CHARS = 65_536

#: Text and path settings: the most characters each may hold. A model (stt_model) may be a
#: local directory and a voice a file; stt_hints is the words themselves or @FILE.
_PATHS = "home stt_model voice chatterbox_dir tts_cache_dir piper_voices_dir"
_URLS = "openai_stt_base_url openai_base_url elevenlabs_base_url chatterbox_providers"
_NAMES = (
    "input_device output_device stt_engine language openai_stt_model stt_fallback tts_engine "
    "conch_mode session agent chatterbox_repo openai_tts_model elevenlabs_model aec cue_player"
)
SETTING_MAX_CHARS: dict[str, int] = {
    **dict.fromkeys(_PATHS.split(), PATH_CHARS),
    **dict.fromkeys(_URLS.split(), URL_CHARS),
    **dict.fromkeys(("openai_stt_prompt", "stt_hints"), PROMPT_CHARS),
    **dict.fromkeys(_NAMES.split(), NAME_CHARS),
    "wake_phrase": NAME_CHARS,
}

#: Text settings that name one of a few fixed modes (compared without case and surrounding
#: blanks, as their readers do). Engine names are not here: their registries check them.
SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "conch_mode": ("wait", "callback"),
    "aec": ("auto", "on", "off"),
    "cue_player": ("auto", "paplay", "portaudio"),
}


class FlagRange(TypedDict):
    """Keyword arguments of a Typer option: its inclusive bounds."""

    min: float
    max: float


def flag_range(name: str) -> FlagRange:
    """`min=` and `max=` for a Typer option that sets the setting `name`, so the flag and the
    setting share one range."""
    low, high = SETTING_RANGES[name]
    return FlagRange(min=low, max=high)


__all__ = [
    "DAY_S",
    "HOUR_S",
    "SETTING_CHOICES",
    "SETTING_MAX_CHARS",
    "SETTING_RANGES",
    "FlagRange",
    "flag_range",
]
