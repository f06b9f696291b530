"""`python -m vocal` runs the CLI."""

from vocal.cli import main

main()
