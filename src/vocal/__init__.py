"""vocal: a voice loop for the terminal and for coding agents."""

__version__ = "0.1.0"
