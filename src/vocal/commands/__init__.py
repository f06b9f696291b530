"""One thin module per command: `commands/NAME.py` defines `app` and becomes `vocal NAME`.

Command modules parse options and call the library. They import nothing heavy at module level:
`vocal --help` and shell completion load them (see vocal.cli).
"""
