"""The conch: which agent on this machine may speak now and who waits, in FIFO order, kept in
files so no daemon is needed. `queue` takes and gives the floor (`Conch`), `hold` keeps a hold
alive while a turn runs, `files` reads and writes the conch's directory, `records` holds its
records and their parsers."""
