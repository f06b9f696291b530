"""PortAudio's start-up: quiet, and begun before anything needs it.

Initializing PortAudio costs 60-120 ms here: loading libportaudio with its JACK and ALSA
libraries, then `Pa_Initialize`, which tries to reach a JACK server and probes every ALSA plugin
in /etc/alsa/conf.d. All of that is C that runs without the GIL, so `vocal.launch` starts it on
a thread first thing for the commands that open a device, where it overlaps the ~100 ms of
importing Typer and vocal's CLI on the other core. `vocal.audio.devices` waits for it before it
imports sounddevice, whose own `Pa_Initialize` then only counts one more user.

Both libraries print to stderr while probing ("Cannot connect to server socket", "ALSA lib
pcm.c: Unknown PCM cards.pcm.front"), bypassing vocal's one-line error contract. Their message
handlers are pointed at a C function that ignores its arguments, not at a Python callback: a
Python handler needs the GIL for every message, and with the main thread busy importing, the
~100 messages of one probe here stretched `Pa_Initialize` from 60 ms to 160-260 ms (measured
in one script, five runs of each).
"""

from __future__ import annotations

import atexit
import ctypes
import sys
import threading
from typing import Any

#: The soname sounddevice loads on Linux (its `find_library("portaudio")` answer).
LIBRARY = "libportaudio.so.2"
#: How long exit waits for an initialization still running (exiting inside it can crash).
EXIT_WAIT_S = 5.0

_silenced = False
_thread: threading.Thread | None = None
_library: Any = None  # set when our own Pa_Initialize succeeded: balanced at exit


def _no_op_handler() -> int | None:
    """The address of a C function that has no effect and ignores any arguments.

    `getpid` takes none and touches nothing; on the calling conventions vocal runs on
    (x86-64 System V, AArch64) a caller's extra arguments are left in registers it never reads,
    so it serves as a handler for both libraries' messages without a Python callback.
    """
    try:
        return ctypes.cast(ctypes.CDLL(None).getpid, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return None


def silence_library_messages() -> None:
    """Send libasound's and libjack's own messages nowhere (Linux; once per process).

    PortAudio reports what matters (open errors, underflow and overflow flags) through its API.
    """
    global _silenced
    if _silenced or not sys.platform.startswith("linux"):
        return
    _silenced = True
    handler = _no_op_handler()
    if handler is None:
        return
    for name, setters in (
        ("libasound.so.2", ("snd_lib_error_set_handler",)),
        ("libjack.so.0", ("jack_set_error_function", "jack_set_info_function")),
    ):
        try:
            library = ctypes.CDLL(name)
        except OSError:  # not installed: nothing of it will print either
            continue
        for setter in setters:
            function = getattr(library, setter, None)
            if function is not None:
                function.argtypes = [ctypes.c_void_p]
                function(handler)


def _initialize() -> None:
    global _library
    silence_library_messages()
    try:
        library = ctypes.CDLL(LIBRARY)  # dlopen runs without the GIL (ctypes releases it)
    except OSError:  # no PortAudio: vocal.audio.devices says what to install when it is needed
        return
    if library.Pa_Initialize() == 0:  # paNoError; a failure is reported by sounddevice later
        _library = library


def start() -> None:
    """Begin initializing PortAudio on a thread (Linux; a no-op when already started)."""
    global _thread
    if _thread is not None or not sys.platform.startswith("linux"):
        return
    _thread = threading.Thread(target=_initialize, name="portaudio-init", daemon=True)
    _thread.start()
    atexit.register(_at_exit)


def wait(timeout_s: float | None = None) -> None:
    """Return once an initialization begun by `start` has finished (at once when none was)."""
    if _thread is not None and _thread is not threading.current_thread():
        _thread.join(timeout_s)


def _at_exit() -> None:
    # Registered before sounddevice's own exit handler, so it runs after it (atexit is LIFO):
    # sounddevice's Pa_Terminate drops its count, this one drops ours, and PortAudio closes.
    wait(EXIT_WAIT_S)
    if _library is not None and not (_thread is not None and _thread.is_alive()):
        _library.Pa_Terminate()


__all__ = ["LIBRARY", "silence_library_messages", "start", "wait"]
