-- vocal's private, headless test server (scripts/pipewire-up), WirePlumber 0.4: null sinks
-- loaded through pactl are its only devices, so the device monitors stay off (a host's sound
-- card, camera or headset must not join the tests' graph or be held open by it).
alsa_monitor.enabled = false
v4l2_monitor.enabled = false
libcamera_monitor.enabled = false

-- Every test session loads sinks of its own and names them in PULSE_SINK/PULSE_SOURCE; a
-- stream's remembered target from an earlier session would name a sink that is gone.
stream_defaults.properties["restore-target"] = false
