"""One thin module per command: `commands/NAME.py` defines `app` and becomes `vocal NAME`.

A command with verbs (`vocal conch status`) is a Typer group in its one module. `__init__.py`,
`_*.py`, `*_helpers.py` and `types.py` are never commands. See vocal.cli for discovery and
VOCAL_COMMANDS_ENABLED / VOCAL_COMMANDS_DISABLED.

Command modules parse options and call the library. They import nothing heavy at module level:
`vocal --help` and shell completion load them (see vocal.cli).
"""
