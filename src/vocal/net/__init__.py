"""HTTP to remote engines (speech synthesis and recognition servers), standard library only.

`client.post` sends one request with a deadline and retries where a retry can help, and turns
every failure into one clear `EngineError`; `multipart.form_data` encodes an upload. Both
`vocal.tts` and `vocal.stt` use them, so they sit below both (the two may not import each
other: pyproject.toml's layers).
"""
