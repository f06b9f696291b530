"""Hearing the person: voice activity, end of turn, and the listen turn."""

#: How long the fixed-window mode (`vocal listen --no-vad`) records when no --seconds is given:
#: stated here, without numpy, for the command's --help, vocal.hearing.listening and listen_turn.
DEFAULT_FIXED_SECONDS = 5.0
