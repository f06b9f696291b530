-- vocal's private, headless test server (scripts/pipewire-up), WirePlumber 0.4: no Bluetooth
-- devices (see main.lua.d/51-vocal-headless.lua).
bluez_monitor.enabled = false
