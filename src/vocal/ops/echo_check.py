"""`vocal doctor --echo`: play a probe, measure this device pair's echo, keep the profile.

The measurement is `vocal.duplex.echo_probe.measure_echo`; the profile it leaves
(`vocal.duplex.echo_profile`) is what `converse --aec auto` reads: the delay for the
canceller, and the verdict (full duplex fine / use headphones / half-duplex).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vocal.duplex.echo_profile import FULL_DUPLEX, HALF_DUPLEX, HALF_DUPLEX_DB, HEADPHONES
from vocal.errors import VocalError
from vocal.ops.doctor import FAIL, OK, WARN, Check

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.duplex.echo_probe import EchoMeasurement

#: A drift worth telling a person about: a USB or Bluetooth output on its own clock (two clocks
#: on one card agree within a few ppm).
NOTABLE_DRIFT_PPM = 20.0

_FIXES = {
    HEADPHONES: "barge-in works but may stop the reply on its own echo now and then: use "
    "headphones, lower the speaker volume, or move the microphone away from the speaker",
    HALF_DUPLEX: "`converse --aec auto` now runs half-duplex here (no barge-in: speak after "
    "the reply); use headphones for barge-in, or lower the speaker volume and run "
    "`vocal doctor --echo` again",
}


def check_echo(settings: Settings, *, save: bool = True) -> Check:
    """Measure the echo of the output and input vocal uses and keep the profile (`save`).
    The check carries the measurement in `data` (for `--json`)."""
    from vocal.audio.endpoints import device_pair
    from vocal.duplex.echo_probe import measure_echo
    from vocal.duplex.echo_profile import save_profile

    output, input = device_pair(settings.output_device, settings.input_device)
    try:
        measured = measure_echo(output=output, input=input,
                                output_device=settings.output_device,
                                input_device=settings.input_device)  # fmt: skip
    except VocalError as exc:
        return Check("echo", FAIL, str(exc), fix=exc.hint or "run `vocal doctor` first")
    data: dict[str, object] = measured.to_dict()
    if save:
        data["profile"] = str(save_profile(settings.home, measured.profile()))
    status = OK if measured.verdict == FULL_DUPLEX else WARN
    return Check("echo", status, describe(measured), fix=_FIXES.get(measured.verdict), data=data)


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
        clauses.append(f"{measured.underflows} output underflows, "
                       f"{measured.overflows} input overflows")  # fmt: skip
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


__all__ = ["check_echo", "describe"]
