"""The echo canceller: WebRTC AEC3 fed from the audio callbacks in 10 ms frames, its far end
compensated for an output's clock drift, and what vocal knows of a device pair's echo between
turns (the echo profile: its delay, drift and verdict)."""
