"""`python -m vocal` runs the CLI."""

from vocal.launch import main

main()
