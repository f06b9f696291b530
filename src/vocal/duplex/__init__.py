"""The duplex turn: speak and listen at once, with echo cancellation and barge-in."""
