"""Shared fixtures: an isolated state directory for every test, and real audio for `audio` tests.

Audio tests (`pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]`) open real
PortAudio streams on a PulseAudio null sink that belongs to this session
(tests/harness/pulse.py). scripts/test installs and starts PulseAudio; without it, audio tests
fail on CI and are skipped elsewhere (a developer's Mac, say) with the reason.
VOCAL_TEST_SOUND_SERVER=pipewire runs the session on a private PipeWire server
(scripts/pipewire-up) instead: the same sinks, through pipewire-pulse.

Helpers live in the `harness` package (tests/harness/); this file holds only fixtures.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from harness.pulse import (
    SOUND_SERVER,
    PulseSinks,
    missing_programs,
    session_prefix,
    warm_up_streams,
)


def pytest_configure() -> None:
    """Ctrl-C, SIGQUIT and SIGHUP reach the processes the tests start, however the suite was
    started. A script's background job starts with SIGINT and SIGQUIT ignored (and `nohup`
    ignores SIGHUP), every process it starts inherits that, and Python keeps a SIGINT ignored
    at its start: `vocal speak` then kept speaking through the Ctrl-C its test sent, as any
    program started so should. Restored here, the tests judge vocal's handling, not how the
    suite was launched."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGQUIT, signal.SIGHUP):  # SIGHUP: the suite run under nohup
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)


def pytest_report_header() -> str:
    return f"sound server: {SOUND_SERVER} (VOCAL_TEST_SOUND_SERVER)"


@pytest.fixture(autouse=True)
def vocal_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own VOCAL_HOME and no VOCAL_* settings from the outer environment."""
    for name in list(os.environ):
        if name.startswith("VOCAL_"):
            monkeypatch.delenv(name)
    home = tmp_path / "vocal-home"
    monkeypatch.setenv("VOCAL_HOME", str(home))
    # A turn phase move that vocal.floor.phases does not allow raises here (production warns).
    monkeypatch.setenv("VOCAL_STRICT_PHASES", "1")
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


@pytest.fixture
def tmux(pulse: PulseSinks):
    """A private tmux server (harness.tmux) whose panes run on this session's sound server."""
    from harness.tmux import tmux_server

    with tmux_server() as server:
        yield server


@pytest.fixture(scope="session")
def pulse() -> PulseSinks:
    """This session's null sinks, with this process and its children routed to them."""
    missing = missing_programs()
    if missing:
        what = f"{SOUND_SERVER} is not installed (no {', '.join(missing)})"
        if os.environ.get("CI"):
            pytest.fail(f"{what}: scripts/test installs it")
        pytest.skip(f"{what}; scripts/test installs it on Debian/Ubuntu")
    sinks = PulseSinks(session_prefix()).load()
    warm_up_streams(sinks)
    os.environ.update(sinks.route())
    yield sinks
    sinks.unload()
