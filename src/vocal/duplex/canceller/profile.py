"""What vocal knows of one loudspeaker and microphone's echo, kept between turns (issue 20).

Every turn is a new process, so AEC3 starts cold every turn: it has to find the echo's delay
and learn the echo path before it cancels well, and a short reply can end before it does.
livekit's APM cannot save its filter; what vocal can give the next turn is the delay: past
AEC3's reach (a 600 ms room) vocal delays the reverse stream by most of it and tells AEC3 the
rest, and the barge-in detector's echo window and tail follow it (`vocal.duplex.canceller.aec`). A
turn whose echo fit held keeps its delay too (`learn_delay`). `vocal doctor --echo` measures
the delay, the echo's level at the microphone and what the canceller takes out of it
(`vocal.duplex.measure.probe`), and keeps them here, one record per (output, input) pair
(`vocal.audio.endpoints.device_pair`):

    <state dir>/echo/<sha256 of the pair, 16 hex>.json

`converse` reads the record for its pair: the delay goes to the canceller, and with
`--aec auto` a "half-duplex" verdict (the echo cannot be cancelled well enough for barge-in)
makes the turn half-duplex, said once on stderr and in `--json`. With no record it behaves as
before. A record that is not what vocal writes is quarantined and treated as absent
(`vocal.floor.statefiles.read_record`).

Standard library only: converse reads it before any audio module is imported.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from vocal.floor.statedir import ensure_private_dir
from vocal.floor.statefiles import BadRecord, read_record, record_from, write_json

#: The canceller takes at least this much out of the echo (dB): barge-in works (the design
#: room converges to 40-60 dB; the false barge-ins seen came where AEC3 had lost the path and
#: took 0-30 dB out).
FULL_DUPLEX_DB = 25.0
#: Below this much the echo left is loud enough to be taken for a person, and a person's start
#: is lost under the suppressor: the turn runs half-duplex. Between the two, full duplex
#: works with an occasional false stop, and headphones are advised.
HALF_DUPLEX_DB = 15.0
#: An echo this quiet at the microphone (the probe's echo, dBFS RMS) needs no cancelling:
#: headphones, or a loudspeaker far from the microphone.
NO_ECHO_DBFS = -60.0

FULL_DUPLEX, HEADPHONES, HALF_DUPLEX = "full-duplex", "use-headphones", "half-duplex"
VERDICTS = (FULL_DUPLEX, HEADPHONES, HALF_DUPLEX)
#: Who measured a profile: `vocal doctor --echo`, or a converse turn's echo fit.
SOURCES = ("doctor", "turn")
#: A turn's echo fit must remove this much (dB) for its delay to be kept: it then holds on
#: the whole reply (the hand-over's own bar, `HANDOVER_MIN_REMOVED_DB`). A reply whose streams
#: glitched (an output underflow, an input overflow) keeps nothing: an underflow delays that
#: stream's echo for good, and the next turn's fresh stream starts without it (issue 38: a
#: loaded machine's turn kept 577 ms for a 140 ms room). A late callback alone moves nothing,
#: nor does an underflow before the reply's first sound (`Player.underflows_before_audio`).
LEARN_MIN_REMOVED_DB = 30.0
#: Where profiles live in the state directory (`vocal.floor.statedir.STATE_ENTRY_NAMES`).
PROFILE_DIR_NAME = "echo"
#: Echo delays a profile may hold (ms): output latency + the room + input latency.
DELAY_BOUNDS_MS = (0.0, 2000.0)


@dataclass(frozen=True)
class EchoProfile:
    """One device pair's echo, as last measured.

    `delay_ms`: from the output callback handing a sample over to its echo reaching the input
    callback (I/O latency included), which is what AEC3's stream delay means here.
    `echo_dbfs`: the echo's level at the microphone during the probe (RMS). `echo_gain_db`:
    that level over the probe's own. `reduction_db`: what the canceller took out of the echo
    after its first second (ERLE; None: not measured). `verdict`: one of `VERDICTS`.
    `drift_ppm`: the output's clock over the input's (`vocal.duplex.canceller.drift` compensates
    it). A turn that fitted the reply's echo well (`learn_delay`, `source` "turn") keeps only the
    delay: the other fields stay as `vocal doctor --echo` left them, or None (not judged)."""

    output: str
    input: str
    delay_ms: float
    echo_dbfs: float | None
    echo_gain_db: float | None
    reduction_db: float | None
    verdict: str | None
    measured_at: float
    source: str = "doctor"
    drift_ppm: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def stream_delay_ms(self) -> int:
        """The delay as `EchoCanceller(stream_delay_ms=...)` takes it."""
        return round(self.delay_ms)


def verdict_for(echo_dbfs: float, reduction_db: float | None) -> str:
    """Full duplex fine, use headphones, or half-duplex, from what the probe measured."""
    if echo_dbfs < NO_ECHO_DBFS:
        return FULL_DUPLEX  # nothing reaches the microphone to cancel
    if reduction_db is None or reduction_db < HALF_DUPLEX_DB:
        return HALF_DUPLEX
    return FULL_DUPLEX if reduction_db >= FULL_DUPLEX_DB else HEADPHONES


def profile_path(home: Path, output: str, input: str) -> Path:
    """The pair's record (device names may hold anything: the file is named by a digest)."""
    digest = hashlib.sha256(f"{output}\0{input}".encode()).hexdigest()[:16]
    return Path(home) / PROFILE_DIR_NAME / f"{digest}.json"


def parse_profile(data: object) -> EchoProfile:
    """An `EchoProfile` from its JSON; raises BadRecord for anything vocal does not write."""
    profile = record_from(
        EchoProfile,
        data,
        {
            "delay_ms": DELAY_BOUNDS_MS,
            "echo_dbfs": (-200.0, 20.0),
            "echo_gain_db": (-200.0, 100.0),
            "reduction_db": (-100.0, 200.0),
            "measured_at": (0.0, 1e11),
            "drift_ppm": (-1000.0, 1000.0),
        },
    )
    if profile.verdict is not None and profile.verdict not in VERDICTS:
        raise BadRecord(f"verdict: {profile.verdict[:40]!r} is not one of {', '.join(VERDICTS)}")
    if profile.source not in SOURCES:
        raise BadRecord(f"source: {profile.source[:40]!r} is not one of {', '.join(SOURCES)}")
    return profile


def load_profile(home: Path, output: str, input: str) -> EchoProfile | None:
    """The pair's profile, or None (never measured, or a bad record, set aside)."""
    path = profile_path(home, output, input)
    profile = read_record(path, parse_profile, log_dir=Path(home) / "logs")
    if profile is None or (profile.output, profile.input) != (output, input):
        return None  # a digest collision, or a record copied from elsewhere
    return profile


def known_pair(
    home: Path, output_device: str | None, input_device: str | None
) -> tuple[str, str] | None:
    """The (output, input) pair these devices (None: the defaults) make, if anything was ever
    kept for a pair (an echo profile, a room level), else None. Costs a directory check when
    nothing was, else a `pactl info` for unnamed devices: resolve it once per turn."""
    if not (Path(home) / PROFILE_DIR_NAME).is_dir():
        return None
    from vocal.audio.endpoints import device_pair

    return device_pair(output_device, input_device)


def learn_delay(
    home: Path,
    output_device: str | None,
    input_device: str | None,
    delay_ms: float,
    *,
    now_s: float,
) -> EchoProfile:
    """Keep the echo delay a turn measured (its reply's echo fit) for the pair these devices
    make: the pair's profile with the new delay, or a new profile with nothing else judged."""
    import dataclasses

    from vocal.audio.endpoints import device_pair

    output, input = device_pair(output_device, input_device)
    known = load_profile(home, output, input)
    if known is None:
        known = EchoProfile(
            output=output,
            input=input,
            delay_ms=delay_ms,
            echo_dbfs=None,
            echo_gain_db=None,
            reduction_db=None,
            verdict=None,
            measured_at=now_s,
            source="turn",
        )
    learned = dataclasses.replace(known, delay_ms=delay_ms, measured_at=now_s, source="turn")
    save_profile(home, learned)
    return learned


def learn_delay_in_background(
    home: Path,
    output_device: str | None,
    input_device: str | None,
    delay_ms: float,
    on_learned: Callable[[float], object],
) -> threading.Thread:
    """`learn_delay` in a thread (started; join it before the process exits), so that a turn
    writes its file off its own path while the person talks. A state directory that cannot take
    it never fails the turn: nothing is kept then, and `on_learned` is not called."""
    import contextlib
    import time

    from vocal.errors import VocalError

    def learn() -> None:
        with contextlib.suppress(VocalError, OSError):
            on_learned(
                learn_delay(home, output_device, input_device, delay_ms, now_s=time.time()).delay_ms
            )

    thread = threading.Thread(target=learn, name="vocal-echo-learn", daemon=True)
    thread.start()
    return thread


def save_profile(home: Path, profile: EchoProfile) -> Path:
    """Keep `profile` for its pair (replacing the last one); returns the file written."""
    path = profile_path(home, profile.output, profile.input)
    ensure_private_dir(path.parent)
    write_json(path, profile.to_dict())
    return path


__all__ = [
    "FULL_DUPLEX",
    "FULL_DUPLEX_DB",
    "HALF_DUPLEX",
    "learn_delay_in_background",
    "HALF_DUPLEX_DB",
    "HEADPHONES",
    "LEARN_MIN_REMOVED_DB",
    "NO_ECHO_DBFS",
    "VERDICTS",
    "EchoProfile",
    "known_pair",
    "learn_delay",
    "load_profile",
    "parse_profile",
    "profile_path",
    "save_profile",
    "verdict_for",
]
