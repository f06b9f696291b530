"""Record until the speaker stops (or for a fixed window), transcribe, print the text."""

from __future__ import annotations

from pathlib import Path

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def listen(
    vad: bool = typer.Option(
        True, "--vad/--no-vad", help="End when the speaker stops (VAD), or record --seconds."
    ),
    seconds: float = typer.Option(
        5.0, "--seconds", min=0.1, help="The fixed window with --no-vad, in seconds."
    ),
    max_seconds: float | None = typer.Option(
        None, "--max-seconds", min=0.1, help="Hard cap on the recording, in seconds [60]."
    ),
    silence_ms: int | None = typer.Option(
        None, "--silence-ms", min=100, help="Silence that ends the turn, in ms [700]."
    ),
    no_speech_timeout: float | None = typer.Option(
        None,
        "--no-speech-timeout",
        min=0.1,
        help="Give up (exit 4) when nobody speaks for this long, in seconds [15].",
    ),  # fmt: skip
    input_file: Path | None = typer.Option(
        None, "--input", "-i", help="Read this WAV instead of the microphone (any rate)."
    ),
    save: Path | None = typer.Option(None, "--save", help="Also write the recording to this WAV."),
    json_output: bool = typer.Option(
        False, "--json", help="Print JSON: text, language, durations, timings of each stage."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Whisper model: tiny.en (embedded), a name such as base.en or small (downloaded "
        "once), a hub id, or a model directory.",
    ),  # fmt: skip
    engine: str | None = typer.Option(
        None, "--engine", help="Speech recognition engine: auto, faster-whisper, mlx-whisper."
    ),
    language: str | None = typer.Option(
        None, "--language", "-l", help="Language code, or auto to detect (multilingual models)."
    ),
    device: str | None = typer.Option(
        None, "--device", envvar="VOCAL_INPUT_DEVICE", help="Input device index or name part."
    ),
) -> None:
    """Listen for one utterance and print its transcript on stdout.

    With --vad (the default) recording ends ~0.7 s after the speaker stops (--silence-ms), so a
    one-word answer costs about a second; --no-vad records a fixed --seconds window. Ctrl-C ends
    the recording and still transcribes what was heard (press it twice to abort). On a
    terminal a level meter runs on stderr.

    Exit codes: 0 ok, 2 a bad option or unreadable input WAV, 4 nobody spoke (or no words were
    made out), 5 no microphone or the speech engine/model is unavailable, 130 Ctrl-C before
    anyone spoke (or pressed twice).
    """
    # The microphone opens first: everything else (numpy, the VAD, Whisper) loads while it
    # records, since a turn is a process (vocal.devices imports no numpy for this).
    from vocal.config import load_settings
    from vocal.devices import Microphone, WavSource
    from vocal.errors import UsageError

    settings = load_settings(
        silence_ms=silence_ms,
        max_seconds=max_seconds,
        no_speech_timeout_s=no_speech_timeout,
        stt_engine=engine,
        stt_model=model,
        language=language,
        input_device=device,
    )
    if input_file is not None:
        source = WavSource(input_file).open()
    else:
        source = Microphone(device=settings.input_device).open()

    from vocal.vad import EndpointOptions

    try:
        endpoint = EndpointOptions(
            min_silence_ms=settings.silence_ms,
            max_duration_s=settings.max_seconds,
            no_speech_timeout_s=settings.no_speech_timeout_s,
        )
    except ValueError as exc:  # a bad value from VOCAL_* or config.toml
        source.close()
        raise UsageError(f"bad listening setting: {exc}") from None

    import sys
    import threading

    from vocal.errors import Interrupted, NoSpeechError
    from vocal.listening import ListenOptions, SttLoader, ctrl_c_ends
    from vocal.listening import listen as listen_once

    loader = SttLoader(settings.stt_engine, settings.stt_model, language=settings.language,
                       warm_up=settings.stt_warm_up)  # fmt: skip
    options = ListenOptions(vad=vad, seconds=seconds, endpoint=endpoint,
                            early_after_ms=settings.early_transcription_ms)  # fmt: skip
    meter = LevelMeter() if input_file is None and sys.stderr.isatty() else None
    stop = threading.Event()
    try:
        with ctrl_c_ends(stop):
            result = listen_once(source, stt=loader, options=options, stop=stop, on_block=meter)
    finally:
        if meter is not None:
            meter.clear()
        loader.wait()  # never exit while the engine loads in native code (it aborts)

    if save is not None:
        from vocal.audio import write_wav

        write_wav(save, result.recording)
    if json_output:
        import json

        typer.echo(json.dumps(result.to_dict()))
    elif result.text:
        typer.echo(result.text)
    if not result.speech_heard:
        if result.end_reason == "requested":
            raise Interrupted("stopped before anyone spoke")
        where = "in the file" if input_file else f"in {result.durations['recording_s']:.1f} s"
        raise NoSpeechError(
            f"no speech heard {where}",
            hint="check the microphone with `vocal devices`" if input_file is None else None,
        )
    if not result.text:
        raise NoSpeechError("heard sound but made out no words")


class LevelMeter:
    """A one-line input level meter on stderr (a terminal only), redrawn at most 20 times/s."""

    WIDTH = 30
    FLOOR_DB = -60.0

    def __init__(self) -> None:
        import sys
        import time

        self._stream = sys.stderr
        self._clock = time.monotonic
        self._last = 0.0
        self._peak_db = self.FLOOR_DB

    def __call__(self, samples, state) -> None:  # noqa: ANN001 (numpy array, VadState)
        import math

        rms = math.sqrt(float((samples * samples).mean())) if samples.size else 0.0
        db = max(self.FLOOR_DB, 20 * math.log10(rms) if rms > 0 else self.FLOOR_DB)
        self._peak_db = max(self._peak_db, db)
        now = self._clock()
        if now - self._last < 0.05:
            return
        self._last = now
        filled = round((self._peak_db - self.FLOOR_DB) / -self.FLOOR_DB * self.WIDTH)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        label = "speaking" if state.value in ("starting", "speaking") else "listening"
        self._stream.write(f"\r[{bar}] {self._peak_db:6.1f} dBFS  {label:<9}")
        self._stream.flush()
        self._peak_db = self.FLOOR_DB

    def clear(self) -> None:
        self._stream.write("\r\x1b[K")
        self._stream.flush()
