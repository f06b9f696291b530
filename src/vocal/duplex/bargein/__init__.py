"""Barge-in: the detector that stops the reply when the person talks over it, the room's own
level it must hear them above (other talkers; kept per device pair between turns), and the
backchannels ("yeah") that only pause the reply."""
