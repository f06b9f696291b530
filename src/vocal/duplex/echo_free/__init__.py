"""The person's words heard from the raw microphone minus the reply's fitted echo, where AEC3's
suppressor clips them (an interruption's first sound, an answer begun as the question ends):
taps of both streams, the linear echo path fitted on them, and that path followed where an
underrun moved it."""
