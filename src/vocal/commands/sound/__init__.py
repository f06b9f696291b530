"""Commands for what is heard and when: mute, unmute, volume, play, replay, cue.

A topic folder, not a command: each `sound/NAME.py` is `vocal NAME`, found by file name like
the modules one level up (see vocal.commands).
"""
