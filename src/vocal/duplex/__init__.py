"""The duplex turn: speak and listen at once (`converse`, with its options, wiring, hand-over,
paused reply and outcome here), on the echo canceller (`canceller`), barge-in (`bargein`) and the
person's words rebuilt from the raw capture (`echo_free`). `measure` is the doctor's room
measurement."""
