"""The sound card and sound files: WAV values, devices, PortAudio start-up, playback, headphones.

The lowest stage: it imports nothing of vocal but the base modules. Kept light: nothing heavy
at import (see tests/test_startup.py).
"""
