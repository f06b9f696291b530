"""The lean `vocal cue` hooks run: `python -c 'import vocal.cuehook' EVENT [--tool NAME] [--json]`
(or `python -m vocal.cuehook ...`). Importing it plays the cue and exits.

`-c 'import ...'` rather than `-m`: `-m` loads runpy and compiles its module on every run (no
.pyc for `__main__`), ~10 ms of a cue's 100 ms (benchmarks/cue).
"""

import sys

from vocal.agents.cues import main

sys.exit(main())
