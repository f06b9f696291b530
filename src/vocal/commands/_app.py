"""The Typer app factory every command module uses, so all commands behave alike."""

from __future__ import annotations

import math
from typing import Any

import click
import typer

from vocal.config import SETTING_CHOICES, SETTING_RANGES, Settings, flag_range


def command_app(**settings: Any) -> typer.Typer:
    """A Typer app for one command module: plain help (Rich doubles --help time: docs/design.md,
    "Fast start"), no per-command completion options (`vocal completions` serves all), no pretty
    tracebacks (vocal.cli.main reports errors)."""
    defaults: dict[str, Any] = {
        "add_completion": False,
        "rich_markup_mode": None,
        "pretty_exceptions_enable": False,
        "no_args_is_help": False,
        "context_settings": {"help_option_names": ["-h", "--help"]},
    }
    defaults.update(settings)
    return typer.Typer(**defaults)


class FiniteFloatRange(click.FloatRange):
    """Click's FloatRange that first refuses NaN and infinity as not finite numbers: NaN passes
    every comparison of a range, and infinity would be only "not in the range"."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def choice(setting: str) -> click.Choice:
    """The type of an option that sets the mode `setting`: the words it may be, so a bad one
    is refused naming the flag (the setting's own check names the setting)."""
    return click.Choice(SETTING_CHOICES[setting], case_sensitive=False)


def float_range(setting: str) -> FiniteFloatRange:
    """The type of a float option that sets `setting`: the setting's range (issue 37: a
    `--max-seconds` of 1e300 ended in an OverflowError), finite."""
    low, high = SETTING_RANGES[setting]
    return FiniteFloatRange(low, high)


def shown_default(setting: str) -> str:
    """The default of `setting` as `--help` shows it (on/off, 60 for 60.0): read from
    `Settings`, where each default is stated once (issue 38)."""
    value = getattr(Settings, setting)
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


# -- options that several commands share ---------------------------------------------------------
def silence_ms_option(what: str = "the turn") -> Any:
    return typer.Option(
        None,
        "--silence-ms",
        **flag_range("silence_ms"),
        help=f"Silence that ends {what} when the turn model is off or has no signal, in ms "
        f"[{shown_default('silence_ms')}].",
    )


def turn_model_option() -> Any:
    return typer.Option(
        None,
        "--turn-model/--no-turn-model",
        help="Let the voice (Smart Turn v3) and the words so far set each pause's wait; "
        f"--no-turn-model ends every turn after --silence-ms [{shown_default('turn_model')}].",
    )


def turn_check_ms_option() -> Any:
    return typer.Option(
        None,
        "--turn-check-ms",
        **flag_range("turn_check_ms"),
        help=f"Silence before the turn model is asked, in ms [{shown_default('turn_check_ms')}].",
    )


def max_pause_ms_option() -> Any:
    return typer.Option(
        None,
        "--max-pause-ms",
        **flag_range("max_pause_ms"),
        help="The wait when the words sound unfinished, the longest pause waited, in ms "
        f"[{shown_default('max_pause_ms')}].",
    )


def max_seconds_option(what: str) -> Any:
    """`--max-seconds`, shared by listen and converse (the `max_seconds` setting)."""
    return typer.Option(
        None,
        "--max-seconds",
        click_type=float_range("max_seconds"),
        help=f"Hard cap on {what}, in seconds [{shown_default('max_seconds')}].",
        callback=finite,
    )


def no_speech_timeout_option(when: str = "") -> Any:
    """`--no-speech-timeout`, shared by listen and converse (`no_speech_timeout_s`)."""
    return typer.Option(
        None,
        "--no-speech-timeout",
        click_type=float_range("no_speech_timeout_s"),
        help=f"Give up (exit 4) when nobody speaks for this long{when}, in seconds "
        f"[{shown_default('no_speech_timeout_s')}].",
        callback=finite,
    )


def stt_engine_help() -> str:
    """The recognition engines an `--engine`/`--stt-engine` option takes (no import)."""
    return (
        "Speech recognition engine: auto (local: faster-whisper, or mlx-whisper on Apple "
        "Silicon), faster-whisper, mlx-whisper, or openai (remote: the utterance goes to "
        "openai_stt_base_url, key in OPENAI_API_KEY)."
    )


def hints_option() -> Any:
    """`--hints TEXT|@FILE`, shared by listen and converse (the `stt_hints` setting)."""
    return typer.Option(
        None,
        "--hints",
        help="Words to expect (names, identifiers such as parse_config), or @FILE to read "
        "them from a file; given to the recognizer as its prompt (setting stt_hints; "
        "stt_hints_git adds the identifiers of the files you are working on in git).",
    )


def report_fallback(result: Any) -> None:
    """On stderr: the remote recognizer failed and its local fallback made the transcript."""
    reason = getattr(result, "stt_fallback_reason", None)
    if reason:
        typer.echo(
            f"vocal: remote recognition failed ({reason}); transcribed by {result.stt_engine}",
            err=True,
        )


def finite(ctx: typer.Context, param: typer.CallbackParam, value: float | None) -> float | None:
    """Callback for float options: NaN and infinity are usage errors (exit 2), reported as
    every vocal error is, on one line. Click's FloatRange lets NaN through, since every
    comparison with it is false (issue 17)."""
    import math

    if ctx.resilient_parsing or value is None or math.isfinite(value):
        return value
    from vocal.config import require_finite

    name = param.opts[0] if param.opts else str(param.name)
    return require_finite(name, value)
