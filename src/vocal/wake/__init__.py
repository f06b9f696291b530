"""Waking on a spoken phrase (`vocal wake`, issue 39): "hey jarvis, run the tests" -> "run the
tests".

`detection` what a detector promises and reports; `micro` the bundled phrases' microWakeWord
models; `spotter` any other phrase, Whisper on the stretches of speech Silero finds;
`soundalike` matching a phrase by sound in what Whisper wrote; `gate` never woken while vocal
speaks or is muted; `recent` the last seconds of the stream; `waiting` the wait for the phrase;
`request` what was said after it; `turn` the whole of `vocal wake` as a library.
"""
