"""Shared fixtures: an isolated state directory for every test, and real audio for `audio` tests.

Audio tests (`pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]`) open real
PortAudio streams on a PulseAudio null sink that belongs to this session
(tests/pulse.py). scripts/test installs and starts PulseAudio; without it, audio tests fail on CI
and are skipped elsewhere (a developer's Mac, say) with the reason.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pulse import PulseSinks, pulse_available, session_prefix  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def warm_up_streams(sinks: PulseSinks) -> None:
    """Run an output and an input stream on each new sink until audio flows in real time.

    The first streams on a fresh null sink stall and lose their first few hundred ms; tests
    must not see that. libpulse reads PULSE_SINK/PULSE_SOURCE when a stream opens, so each
    sink is warmed by pointing them at it in turn."""
    import numpy as np

    from vocal.audio.devices import Microphone
    from vocal.audio.player import Player

    for sink in (sinks.room, sinks.speaker):  # the speaker last: the route tests start with
        os.environ.update(sinks.route(sink, f"{sink}.monitor"))
        mic = Microphone(16_000, block_frames=160).open()
        with Player(16_000) as player:
            player.play(np.zeros(16_000, np.float32))
            player.finish()
            player.wait(10)
        mic.close()


@pytest.fixture(autouse=True)
def vocal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own VOCAL_HOME and no VOCAL_* settings from the outer environment."""
    for name in list(os.environ):
        if name.startswith("VOCAL_"):
            monkeypatch.delenv(name)
    home = tmp_path / "vocal-home"
    monkeypatch.setenv("VOCAL_HOME", str(home))
    return home


@pytest.fixture(scope="module")
def tts_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory with hibari's fast-start caches built (once per module)."""
    from vocal.tts import load_tts

    cache = tmp_path_factory.mktemp("tts-cache")
    load_tts("hibari", cache_dir=cache).close()
    return cache


@pytest.fixture
def shared_tts_cache(vocal_home: Path, tts_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `vocal` run of the test uses `tts_cache` (a module opts in with
    `pytestmark = pytest.mark.usefixtures("shared_tts_cache")`)."""
    monkeypatch.setenv("VOCAL_TTS_CACHE_DIR", str(tts_cache))


@pytest.fixture(scope="session")
def pulse() -> PulseSinks:
    """This session's null sinks, with this process and its children routed to them."""
    if not pulse_available():
        if os.environ.get("CI"):
            pytest.fail("PulseAudio is not installed: scripts/test installs it")
        pytest.skip("PulseAudio is not installed (scripts/test installs it on Debian/Ubuntu)")
    sinks = PulseSinks(session_prefix()).load()
    warm_up_streams(sinks)
    os.environ.update(sinks.route())
    yield sinks
    sinks.unload()
