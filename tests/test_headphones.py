"""`--aec auto`: headphones, speakers or unknown, from what PulseAudio says about the sink."""

from __future__ import annotations

import subprocess

import pytest

from vocal.audio.headphones import (
    OutputDetection,
    OutputKind,
    aec_wanted,
    classify_sink,
    detect_output,
    detect_pulseaudio,
    parse_sinks_text,
)
from vocal.errors import UsageError

# `LC_ALL=C pactl list sinks` for a laptop's analog card, in the layout pactl 16 prints
# (src/utils/pactl.c: "\t\t%s: %s (type: %s, priority: %u, availability group: %s, %s)").
LAPTOP_SINKS = """Sink #0
\tState: RUNNING
\tName: alsa_output.pci-0000_00_1f.3.analog-stereo
\tDescription: Built-in Audio Analog Stereo
\tDriver: module-alsa-card.c
\tProperties:
\t\talsa.card = "0"
\t\tdevice.bus = "pci"
\t\tdevice.form_factor = "internal"
\t\tdevice.description = "Built-in Audio Analog Stereo"
\tPorts:
\t\tanalog-output-speaker: Speakers (type: Speaker, priority: 10000, \
availability group: Legacy 3, availability unknown)
\t\tanalog-output-headphones: Headphones (type: Headphones, priority: 9900, \
availability group: Legacy 3, available)
\tActive Port: analog-output-headphones
\tFormats:
\t\tpcm

Sink #1
\tState: SUSPENDED
\tName: bluez_sink.00_11_22_33_44_55.a2dp_sink
\tDescription: Headset
\tDriver: module-bluez5-device.c
\tProperties:
\t\tdevice.bus = "bluetooth"
\t\tdevice.form_factor = "headset"
\tFormats:
\t\tpcm
"""


def test_parse_pactl_text() -> None:
    sinks = parse_sinks_text(LAPTOP_SINKS)
    assert [s["name"] for s in sinks] == [
        "alsa_output.pci-0000_00_1f.3.analog-stereo",
        "bluez_sink.00_11_22_33_44_55.a2dp_sink",
    ]
    laptop = sinks[0]
    assert laptop["active_port"] == "analog-output-headphones"
    assert laptop["ports"][1] == {
        "name": "analog-output-headphones", "description": "Headphones", "type": "Headphones",
    }  # fmt: skip
    assert laptop["properties"]["device.form_factor"] == "internal"
    assert sinks[1]["ports"] == [] and sinks[1]["active_port"] is None


def test_the_active_port_decides_before_the_form_factor() -> None:
    laptop, bluetooth = parse_sinks_text(LAPTOP_SINKS)
    assert classify_sink(laptop).kind is OutputKind.HEADPHONES  # jack plugged in
    laptop["active_port"] = "analog-output-speaker"
    assert classify_sink(laptop).kind is OutputKind.SPEAKERS
    assert classify_sink(bluetooth).kind is OutputKind.HEADPHONES  # form factor "headset"


@pytest.mark.parametrize(
    ("port", "kind"),
    [
        ({"name": "analog-output-headphones", "type": "Unknown"}, OutputKind.HEADPHONES),
        ({"name": "[Out] Headphones", "type": ""}, OutputKind.HEADPHONES),
        ({"name": "analog-output-lineout", "type": "Analog"}, OutputKind.SPEAKERS),
        ({"name": "hdmi-output-0", "type": "HDMI"}, OutputKind.SPEAKERS),
        ({"name": "headset-output", "type": "Headset"}, OutputKind.HEADPHONES),
        ({"name": "handsfree-output", "type": "Handsfree"}, OutputKind.UNKNOWN),
        ({"name": "analog-output", "type": "Analog"}, OutputKind.UNKNOWN),
    ],
)
def test_ports(port: dict, kind: OutputKind) -> None:
    sink = {"name": "s", "ports": [port], "active_port": port["name"], "properties": {}}
    assert classify_sink(sink).kind is kind


def test_aec_modes() -> None:
    headphones = lambda: OutputDetection(OutputKind.HEADPHONES, "test")  # noqa: E731
    speakers = lambda: OutputDetection(OutputKind.SPEAKERS, "test")  # noqa: E731
    unknown = lambda: OutputDetection(OutputKind.UNKNOWN, "test")  # noqa: E731
    assert aec_wanted("auto", headphones) == (False, headphones())
    assert aec_wanted("auto", speakers)[0] is True
    assert aec_wanted("auto", unknown)[0] is True  # unknown keeps echo cancellation on
    assert aec_wanted("on", headphones) == (True, None)
    assert aec_wanted("OFF") == (False, None)
    with pytest.raises(UsageError, match="--aec"):
        aec_wanted("maybe")


# -- the real PulseAudio -------------------------------------------------------------------------
@pytest.fixture
def sink_with_form_factor(pulse, monkeypatch):
    """A null sink whose device.form_factor says what it is, as a Bluetooth or USB sink's does;
    this process's streams routed to it."""
    made = []

    def make(form_factor: str) -> str:
        name = f"{pulse.prefix}_formfactor_{form_factor}"
        module = subprocess.run(
            ["pactl", "load-module", "module-null-sink", f"sink_name={name}",
             f"sink_properties=device.form_factor={form_factor}"],
            check=True, capture_output=True, text=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        made.append(module)
        monkeypatch.setenv("PULSE_SINK", name)
        return name

    yield make
    for module in made:
        subprocess.run(["pactl", "unload-module", module], capture_output=True, timeout=10)


@pytest.mark.audio
@pytest.mark.parametrize(
    ("form_factor", "kind"),
    [("headphone", OutputKind.HEADPHONES), ("speaker", OutputKind.SPEAKERS)],
)
def test_pulseaudio_sink_form_factor(sink_with_form_factor, form_factor, kind) -> None:
    name = sink_with_form_factor(form_factor)
    detection = detect_pulseaudio()
    assert detection.device == name
    assert detection.kind is kind
    assert detection.source == "pulseaudio"


@pytest.mark.audio
def test_a_null_sink_is_unknown_so_aec_stays_on(pulse) -> None:
    detection = detect_output()
    assert detection.device == pulse.speaker  # PULSE_SINK, not the machine's default
    assert detection.kind is OutputKind.UNKNOWN
    assert aec_wanted("auto")[0] is True


@pytest.mark.audio
def test_no_such_sink_is_unknown(pulse, monkeypatch) -> None:
    monkeypatch.setenv("PULSE_SINK", "no_such_sink_anywhere")
    assert detect_pulseaudio().kind is OutputKind.UNKNOWN
