"""Commands that set vocal up on this machine and check it: setup, teardown, warmup, hooks,
completions, doctor, devices.

A topic folder, not a command: each `machine/NAME.py` is `vocal NAME`, found by file name like
the modules one level up (see vocal.commands).
"""
