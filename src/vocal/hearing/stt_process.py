"""The speech recognizer in a child process, for a turn that plays audio while it loads.

Loading Whisper in the turn's own process holds the GIL in long native stretches: importing
faster-whisper's extension modules, and parsing its tokenizer.json (2 MB, 0.1-0.14 s, never
released by the tokenizers package). Every audio callback waits meanwhile. During a converse
reply that made 2-4 output underflows in every turn, 0.15-0.5 s after the first sample; each
moved the echo path (by up to 70 ms) under AEC3 and under the onset fit, which then removed
10-20 dB where it removes 30-60 dB once the path holds (benchmarks/RESULTS.md, issue 19).
With the load in another process the turn's GIL stays free for its callbacks.

`vocal.hearing.stt_loading.ProcessSttLoader` starts the child (`spawn`: `python -m
vocal.hearing.stt_process CONFIG`), which loads and warms up the engine, and hands out a
`ProcessStt`: an `SttEngine` whose `transcribe` sends the samples down a pipe.

Protocol (pipes, one request at a time): the child's first line is {"ready": name} or an
error; then for each request line {"frames": n} followed by n float32 samples at 16 kHz it
answers one line, {"text", "language", "duration_s", "transcribe_s", "segments"} or an error:
{"message", "hint", "exit_code"}, as the speech worker sends them (`vocal.errors.error_reply`,
read back by `error_from_reply`). It ends at the end of its input, and ignores
SIGINT (Ctrl-C reaches the whole process group; the parent decides).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, TypedDict

from vocal.errors import EngineError, error_from_reply

if TYPE_CHECKING:
    from vocal.audio.wav import Audio
    from vocal.stt import Transcript


class ChildConfig(TypedDict):
    """What the child is started with (its one argument, as JSON): the engine to load."""

    name: str
    model: str
    warm_up: bool
    options: dict[str, object]


#: How long closing waits for the child to end before killing it.
CLOSE_WAIT_S = 2.0
SAMPLE_RATE = 16_000


class ProcessStt:
    """An `SttEngine` running in the child process `process` (see the module docstring)."""

    def __init__(self, process: subprocess.Popen[bytes], name: str) -> None:
        self.process = process
        self.name = name
        self._lock = threading.Lock()

    def transcribe(self, audio: Audio) -> Transcript:
        """Transcribe `audio` in the child (EngineError if it fails or has gone)."""
        import numpy as np

        from vocal.stt import Transcript

        samples = np.ascontiguousarray(audio.for_stt().mono_samples, dtype=np.float32)
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        with self._lock:
            try:
                stdin.write(json.dumps({"frames": int(samples.shape[0])}).encode() + b"\n")
                stdin.write(samples.tobytes())
                stdin.flush()
                line = stdout.readline()
            except (BrokenPipeError, ValueError, OSError):
                line = b""
        if not line:
            raise EngineError(
                "the speech recognizer's process ended", hint=f"exit status {self.process.poll()}"
            )
        reply = json.loads(line)
        if "message" in reply:
            raise error_from_reply(reply)
        return Transcript(**reply)

    def close(self) -> None:
        """End the child: its input closes, and it is killed if it has not ended soon after."""
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        try:
            self.process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def spawn(name: str, model: str, *, warm_up: bool, options: dict[str, object]) -> ProcessStt:
    """Start the child for engine `name` with `model` and wait until it has loaded (and warmed
    up): its `ProcessStt`, or raises the error it reported (an EngineError with its exit
    code)."""
    config: ChildConfig = {"name": name, "model": model, "warm_up": warm_up, "options": options}
    process = subprocess.Popen(
        [sys.executable, "-m", "vocal.hearing.stt_process", json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        reply = (
            json.loads(line)
            if line
            else {"message": "the speech recognizer's process ended while loading"}
        )
        if "message" in reply:
            raise error_from_reply(reply)
        return ProcessStt(process, reply["ready"])
    except BaseException:
        ProcessStt(process, "").close()
        raise


# -- the child ----------------------------------------------------------------------------------
def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _send(stream: IO[bytes], message: Mapping[str, object]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def _failure(exc: Exception, doing: str) -> dict[str, Any]:
    """An error as a reply line: a VocalError as the speech worker sends one
    (`vocal.errors.error_reply`), anything else as what failed while `doing`."""
    from vocal.errors import VocalError, error_reply

    if isinstance(exc, VocalError):
        return error_reply(exc)
    return {"message": f"{doing} failed: {exc}", "exit_code": EngineError.exit_code}


def serve(config: ChildConfig, requests: IO[bytes], replies: IO[bytes]) -> None:
    """The child's work: load the engine `config` names, then transcribe each request."""
    import numpy as np

    from vocal.audio.wav import Audio
    from vocal.stt import load_stt

    try:
        engine = load_stt(config["name"], config["model"], **config["options"])
        warm_up = getattr(engine, "warm_up", None) if config.get("warm_up") else None
        if warm_up is not None:
            try:
                warm_up()
            except Exception:  # a warm-up only: the real call will tell
                pass
    except Exception as exc:
        _send(replies, _failure(exc, "loading the speech recognizer"))
        return
    _send(replies, {"ready": engine.name})
    while True:
        line = requests.readline()
        if not line:
            return
        frames = int(json.loads(line)["frames"])
        data = _read_exactly(requests, frames * 4)
        if data is None:
            return
        samples = np.frombuffer(data, dtype=np.float32)
        try:
            transcript = engine.transcribe(Audio(samples, SAMPLE_RATE))
        except Exception as exc:
            _send(replies, _failure(exc, "transcription"))
            continue
        _send(
            replies,
            {
                "text": transcript.text,
                "language": transcript.language,
                "duration_s": transcript.duration_s,
                "transcribe_s": transcript.transcribe_s,
                "segments": transcript.segments,
            },
        )


def main() -> None:
    import signal

    # Ctrl-C reaches the whole process group: the parent decides, and closes our input.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(json.loads(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()


__all__ = ["ProcessStt", "serve", "spawn"]
