"""HTTP to remote engines (speech synthesis and recognition servers), standard library only:
the only way an engine talks to a server (issue 37).

`client.post` sends one request held to a real deadline (`deadline`), caps the answer, follows
no redirect (a key reaches only the configured host), retries where a retry can help, and turns
every failure into one clear `EngineError`; `urls` checks base URLs and builds endpoints;
`multipart.form_data` encodes an upload. Both `vocal.tts` and `vocal.stt` use them, so they sit
below both (the two may not import each other: pyproject.toml's layers).
"""
