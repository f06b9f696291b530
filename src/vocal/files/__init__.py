"""What vocal reads from and writes to files users and peers name: whole files written or none
(`atomic`), every read within a size, a time and a depth (`bounded`). Standard library only."""
