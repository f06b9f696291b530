"""Hearing the person: voice activity, end of turn, and the listen turn."""
