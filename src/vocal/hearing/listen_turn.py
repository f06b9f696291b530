"""`vocal listen` as a library: open the microphone (or read a WAV), listen for one utterance,
transcribe it, and hand back the `ListenResult`.

The microphone opens first: numpy, the VAD and the STT engine load while it records, since a
turn is a process (this module and vocal.audio.devices import no numpy before that). Ctrl-C
ends the recording and still transcribes what was heard (twice aborts). On a terminal a level
meter runs on stderr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vocal.hearing import DEFAULT_FIXED_SECONDS

if TYPE_CHECKING:
    import threading
    from pathlib import Path

    from vocal.config import Settings
    from vocal.hearing.listening import ListenResult
    from vocal.hearing.push_to_talk import PushToTalk


def listen_turn(
    settings: Settings,
    *,
    vad: bool = True,
    seconds: float = DEFAULT_FIXED_SECONDS,
    input_file: Path | None = None,
    meter: bool = True,
    push_to_talk: bool = False,
) -> ListenResult:
    """Listen for one utterance (or a fixed `seconds` window with `vad=False`) from the
    microphone, or from `input_file` on the file's own clock, and transcribe it.

    `meter` shows the input level on stderr when it is a terminal (never for a file). Nobody
    speaking is not an error here: `speech_heard` is False. `push_to_talk`: the recording ends
    when the person presses Enter or Space on the terminal, not on a pause (end reason "key";
    `max_seconds` still caps it), and Esc cancels (vocal.hearing.push_to_talk).

    Raises:
        UsageError: a bad listening setting, an unreadable input WAV, `push_to_talk` with no
            terminal, with `vad=False` or with an input file (exit 2).
        Interrupted: Esc with `push_to_talk` (exit 130).
        DeviceError / EngineError: no microphone, the STT engine or model unavailable (exit 5).
        Interrupted: Ctrl-C pressed twice (exit 130).
    """
    import threading

    from vocal.errors import UsageError

    stop = threading.Event()
    keys = None
    if push_to_talk:
        if input_file is not None or not vad:
            flag = "--input" if input_file is not None else "--no-vad"
            raise UsageError(f"--ptt records from the microphone until a key, not with {flag}")
        from vocal.hearing.push_to_talk import PushToTalk

        # Before the microphone opens: no terminal is a usage error, and nothing is heard.
        keys = PushToTalk(on_done=stop.set).__enter__()
    try:
        return _listen(settings, vad, seconds, input_file, meter, stop, keys)
    finally:
        if keys is not None:
            keys.close()


def _listen(
    settings: Settings,
    vad: bool,
    seconds: float,
    input_file: Path | None,
    meter: bool,
    stop: threading.Event,
    keys: PushToTalk | None,
) -> ListenResult:
    from vocal.audio.devices import Microphone
    from vocal.audio.file_devices import WavSource

    source: WavSource | Microphone
    if input_file is not None:
        source = WavSource(input_file).open()
    else:
        source = Microphone(device=settings.input_device).open()

    import sys

    from vocal.errors import UsageError
    from vocal.hearing.listening import ctrl_c_ends, listen, listen_options
    from vocal.hearing.live import LevelMeter, status_line
    from vocal.hearing.push_to_talk import PROMPT, push_to_talk_options
    from vocal.hearing.stt_loading import stt_loader

    try:
        options = listen_options(settings, vad=vad, seconds=seconds)
        if keys is not None:
            options = push_to_talk_options(options)
        loader = stt_loader(settings)
    except UsageError:  # a bad value from VOCAL_* or config.toml
        source.close()
        raise
    models = None
    if options.vad and options.end_of_turn.enabled:
        from vocal.hearing.turn_models import EndOfTurnModels

        # A file is not the person: it learns their rhythm within itself, and keeps nothing.
        models = EndOfTurnModels.start(settings, person=input_file is None)
    line = status_line() if meter and input_file is None else None
    level = LevelMeter(line) if line is not None else None
    if keys is not None and sys.stderr.isatty():
        print(PROMPT, file=sys.stderr)
    try:
        with ctrl_c_ends(stop):
            on_block = level if keys is None else keys.watching(level)
            result = listen(
                source,
                stt=loader,
                options=options,
                stop=stop,
                on_block=on_block,
                models=models,
                on_words=level.words if level is not None else None,
            )
    finally:
        if level is not None:
            level.clear()
        loader.wait()  # never exit while the engine loads in native code (it aborts)
        if models is not None:
            models.wait()
    if models is not None and input_file is None:
        models.keep(settings.home)
    return keys.ended(result) if keys is not None else result


__all__ = ["listen_turn"]
