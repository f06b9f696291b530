"""The doctor's measurement of the room's echo (`vocal doctor --echo`): a probe played and
recorded as a turn wires its streams, the echo's delay followed through it (clock drift,
underruns), a forecast of what the canceller would take out of a spoken reply, and ERLE, the
figure they report. The turn never imports it (the `duplex` contract in pyproject.toml)."""
