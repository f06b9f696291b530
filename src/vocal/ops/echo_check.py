"""`vocal doctor --echo`: play a probe, measure this device pair's echo, keep the profile.

The measurement is `vocal.duplex.measure.probe.measure_echo`; the profile it leaves
(`vocal.duplex.canceller.profile`) is what `converse --aec auto` reads: the delay for the
canceller, and the verdict (full duplex fine / use headphones / half-duplex). Plain
`vocal doctor` says what is kept for the pair, and asks for the measurement where nothing is.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from vocal.duplex.canceller.profile import FULL_DUPLEX, HALF_DUPLEX, HALF_DUPLEX_DB, HEADPHONES
from vocal.errors import VocalError
from vocal.ops.check import FAIL, OK, WARN, Check

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.duplex.measure.probe import EchoMeasurement

#: A drift worth telling a person about: a USB or Bluetooth output on its own clock (two clocks
#: on one card agree within a few ppm).
NOTABLE_DRIFT_PPM = 20.0
#: Probes in all while the streams glitch (an output underflow, an input overflow): a glitch
#: moves the echo under the canceller, whose verdict then judges the machine's load, not the
#: room (issue 38: "half-duplex" under load in a room that cancels 50 dB). A profile is kept
#: only from a probe whose streams did not glitch. A step of the delay alone does not count:
#: a device may step every time (the drift room's underrun), and the profile keeps its drift.
PROBE_TRIES = 3

_FIXES = {
    HEADPHONES: "barge-in works but may stop the reply on its own echo now and then: use "
    "headphones, lower the speaker volume, or move the microphone away from the speaker",
    HALF_DUPLEX: "`converse --aec auto` now runs half-duplex here (no barge-in: speak after "
    "the reply); use headphones for barge-in, or lower the speaker volume and run "
    "`vocal doctor --echo` again",
}
#: What a pair with no judged profile is told (the measurement plays an audible probe, so
#: plain `vocal doctor` never runs it itself).
MEASURE_FIX = (
    "run `vocal doctor --echo` (about 10 s, plays a noise probe): `converse --aec "
    "auto` then starts the canceller at the measured delay, and speaks half-duplex "
    "where the echo is too strong to cancel"
)


def check_echo(settings: Settings, *, save: bool = True) -> Check:
    """Measure the echo of the output and input vocal uses and keep the profile (`save`).
    The check carries the measurement in `data` (for `--json`)."""
    from vocal.audio.endpoints import device_pair
    from vocal.duplex.canceller.profile import save_profile
    from vocal.duplex.measure.probe import measure_echo

    output, input = device_pair(settings.output_device, settings.input_device)
    rate = reply_sample_rate(settings)
    try:
        probes: list[EchoMeasurement] = []
        while len(probes) < PROBE_TRIES and (not probes or glitched(probes[-1])):
            probes.append(
                measure_echo(
                    output=output,
                    input=input,
                    output_device=settings.output_device,
                    input_device=settings.input_device,
                    sample_rate=rate,
                )
            )
    except VocalError as exc:
        return Check("echo", FAIL, str(exc), fix=exc.hint or "run `vocal doctor` first")
    measured, tries = probes[-1], len(probes)
    data: dict[str, object] = {**measured.to_dict(), "probe_sample_rate": rate, "probes": tries}
    fix, clean = _FIXES.get(measured.verdict), not glitched(measured)
    if save and clean:
        data["profile"] = str(save_profile(settings.home, measured.profile()))
    elif not clean:  # nothing kept: a profile kept before stays
        fix = f"the audio glitched in all {tries} probes, so nothing was kept: run it again "
        fix += "when the machine is quieter"
    status = OK if measured.verdict == FULL_DUPLEX and clean else WARN
    return Check("echo", status, describe(measured), fix=fix, data=data)


def glitched(measured: EchoMeasurement) -> bool:
    """Whether the probe's streams reported a glitch: an output underflow, an input overflow."""
    return bool(measured.underflows or measured.overflows)


def reply_sample_rate(settings: Settings) -> int:
    """The rate the configured voice's replies play at, which the probe plays at: the output's
    buffering, and with it the echo's delay, depends on the stream's rate (the plain loopback:
    52 ms at 16 kHz, 35 ms at hibari's 24 kHz, 39.5 ms at espeak-ng's 22.05 kHz)."""
    from vocal.duplex.measure.probe import CAPTURE_SAMPLE_RATE
    from vocal.speaking.engine import resolve_voice
    from vocal.tts import engine_class

    try:
        return engine_class(resolve_voice(settings.voice, None, settings)[0]).sample_rate
    except VocalError:  # a voice that would not speak: the turn reports it, not the probe
        return CAPTURE_SAMPLE_RATE


def check_kept_echo(settings: Settings, *, now_s: float | None = None) -> Check:
    """What `converse --aec auto` will know of the echo of the output and input vocal uses:
    the verdict `vocal doctor --echo` kept, a delay only a turn has learnt, or nothing. The
    last two warn: without a verdict every turn keeps barge-in however strong the echo."""
    from vocal.audio.endpoints import device_pair
    from vocal.audio.headphones import aec_wanted
    from vocal.duplex.canceller.profile import load_profile

    use_aec, detection = aec_wanted(settings.aec)
    if not (use_aec and settings.barge_in):
        why = "barge-in off" if not settings.barge_in else f"aec {settings.aec}"
        why += ", headphones" if settings.barge_in and detection is not None else ""
        return Check("echo profile", OK, f"not needed: no echo is cancelled ({why})")
    output, input = device_pair(settings.output_device, settings.input_device)
    pair = f"{output} into {input}"
    try:
        profile = load_profile(settings.home, output, input)
    except OSError as exc:  # a state directory this user cannot reach: its own check says how
        reason = exc.strerror or type(exc).__name__
        return Check(
            "echo profile",
            WARN,
            f"{pair}: what was kept cannot be read ({reason})",
            fix="see the state directory's check",
        )
    if profile is None:
        return Check("echo profile", WARN, f"{pair}: not measured", fix=MEASURE_FIX)
    age = _age(time.time() if now_s is None else now_s, profile.measured_at)
    delay = f"echo delay {profile.delay_ms:.0f} ms"
    if profile.verdict is None:
        return Check(
            "echo profile",
            WARN,
            f"{pair}: {delay} learnt by a turn {age}, not judged",
            fix=MEASURE_FIX,
        )
    reduction = "" if profile.reduction_db is None else f", cancelled {profile.reduction_db:.0f} dB"
    status = OK if profile.verdict == FULL_DUPLEX else WARN
    return Check(
        "echo profile",
        status,
        f"{pair}: {profile.verdict} ({delay}{reduction}), updated {age}",
        fix=_FIXES.get(profile.verdict),
    )


def _age(now_s: float, then_s: float) -> str:
    """'just now', '5 min ago', '3 h ago', '1 day ago', '2 days ago'."""
    ago_s = max(0.0, now_s - then_s)
    if ago_s < 60:
        return "just now"
    days = int(ago_s // 86400)
    if days:
        return f"{days} day{'s' if days > 1 else ''} ago"
    return f"{ago_s // 3600:.0f} h ago" if ago_s >= 3600 else f"{ago_s // 60:.0f} min ago"


def describe(measured: EchoMeasurement) -> str:
    """One line a person reads: the delay, the echo's level, what the canceller took out of
    the probe and what it would take out of a spoken reply."""
    reduction = "not measured (no echo)"
    if measured.reduction_db is not None:
        # Cold: what every turn got before this profile; the first figure, what it gets now.
        cold = measured.cold_reduction_db
        reduction = f"{measured.reduction_db:.0f} dB" + (
            "" if cold is None else f" with this profile ({cold:.0f} dB cold)"
        )
        if measured.reply_reduction_db is not None:
            reduction += f", about {measured.reply_reduction_db:.0f} dB of a spoken reply's"
    # What went wrong in the streams, then how the echo's delay moved: each its own clause.
    clauses = []
    if measured.underflows or measured.overflows:
        clauses.append(
            f"{measured.underflows} output underflows, {measured.overflows} input overflows"
        )
    moves = []
    if abs(measured.drift_ppm) >= NOTABLE_DRIFT_PPM:
        moves.append(f"the output's clock drifts {measured.drift_ppm:+.0f} ppm")
    moves += [f"the echo moved {ms:+.0f} ms {at_s:.1f} s in" for at_s, ms in measured.delay_steps]
    if moves:
        clauses.append(", ".join(moves))
    verdict = measured.verdict
    if verdict == HALF_DUPLEX and measured.reduction_db is not None:
        verdict += f" (under {HALF_DUPLEX_DB:.0f} dB)"
    return (
        f"{verdict}: echo delay {measured.delay_ms:.0f} ms, echo at the microphone "
        f"{measured.echo_dbfs:.0f} dBFS ({measured.echo_gain_db:+.0f} dB on the probe), "
        f"cancelled {reduction}" + "".join(f"; {clause}" for clause in clauses)
    )


__all__ = [
    "MEASURE_FIX",
    "PROBE_TRIES",
    "check_echo",
    "check_kept_echo",
    "describe",
    "glitched",
    "reply_sample_rate",
]
