"""The floor agents share: the conch, the control socket, the turn, history, state files, gates,
focus and reply pieces. Nothing here makes sound of its own beyond playing a file."""
