"""Agent integration: hooks installed into agents and the cues they play."""
