"""The test harness: what the tests and the benchmarks share, imported as `harness`.

Making sounds and scoring words:
    sounds        espeak-ng speech, tones, padding with silence
    words         word error rates (plain Python)
    listen_audio  test audio for listening: voiced spans, pauses, noise; play it to the sink
    corpus        the real-speech corpus that scripts/corpus builds (tests/corpus/README.md)
    wake_audio    wake phrases and requests said by vocal's voices, over a quiet room tone

Real audio on a private PulseAudio server (audio tests), or PipeWire's pipewire-pulse with
VOCAL_TEST_SOUND_SERVER=pipewire:
    pulse         the session's sound server and null sinks, their routing; warm_up_streams;
                  MonitorCapture (parecord of a monitor)
    room          the echo path between the sinks (also run as a process by path)
    room_effects  its signal processing: RoomConfig, the device effects and noises, and the
                  named conditions (ROOM_CONDITIONS)
    loopback      what was played against what a stream recorded
    conch_audio   tones per process and the monitor recorder; wait_until
    heard         who was heard when: rendered speech found in the monitor recording
    speak_audio   Whisper transcription of what was spoken, a fake speech server, a recorder
    stt_server    a fake OpenAI-compatible transcription server that checks each request
    hostile_http  a hostile server for every remote engine and the hub: redirects to another
                  host, trickles, huge and deeply nested answers (issue 37)
    person        a simulated person who answers a spoken turn

Processes and the floor:
    runner        `vocal ARGS` in a subprocess, as a user runs it
    converse      `vocal converse` runs and the barge-in over a long reply, on the room
    imports       which modules a `vocal` process loads
    floor         who holds the conch and who waits; waiting for `vocal` processes
    chatterbox_bundle  a tiny Chatterbox ONNX bundle with random weights

pytest finds this package through `pythonpath = ["tests"]` in pyproject.toml, the benchmarks
through the .pth file naming tests/ that scripts/setup writes into .venv. room.py, also started
by path as a process, imports only numpy, vocal (vocal's editable install) and its sibling
room_effects (by that name; chatter noise also reads harness.corpus). Nothing here edits
`sys.path`.
"""
