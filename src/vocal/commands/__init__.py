"""One thin module per command: `commands/NAME.py` defines `app` and becomes `vocal NAME`.

Here: the turn (listen, speak, converse, voices) and its floor (conch, control, focus). The
other commands sit one level down in topic folders, found the same way: `machine/` sets vocal
up on this machine and checks it, `sound/` is what is heard and when. A topic folder is a
package whose name starts with neither `_` nor `.`; it is never a command itself and adds
nothing to a command's name (`sound/mute.py` is `vocal mute`), and deeper folders are not read.

A command with verbs (`vocal conch status`) is a Typer group in its one module. `__init__.py`,
`_*.py`, `*_helpers.py` and `types.py` are never commands. See vocal.cli for discovery and
VOCAL_COMMANDS_ENABLED / VOCAL_COMMANDS_DISABLED.

Command modules parse options and call the library. They import nothing heavy at module level:
`vocal --help` and shell completion load them (see vocal.cli).
"""
