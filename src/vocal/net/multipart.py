"""`multipart/form-data` for an upload (RFC 7578), as an OpenAI-compatible transcription
endpoint takes it: text fields and files, in one body.

Hand-written with the standard library: `email`'s MIME classes write headers for mail (line
folding, a MIME-Version part) that form parsers do not expect, and urllib has no form encoder;
a client library would be a dependency for twenty lines.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass


@dataclass(frozen=True)
class FilePart:
    """One file of a form: its field name, file name, content type and bytes."""

    field: str
    filename: str
    content_type: str
    data: bytes


def _quoted(value: str) -> str:
    """A name or file name inside a header's quotes: no quote, CR or LF can end it early."""
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


def form_data(fields: dict[str, str], files: list[FilePart]) -> tuple[bytes, str]:
    """The body and its Content-Type header for `fields` (text) and `files`, in that order."""
    parts: list[bytes] = []
    for name, value in fields.items():
        head = f'Content-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'
        parts.append(head.encode("utf-8") + value.encode("utf-8"))
    for part in files:
        head = (
            f'Content-Disposition: form-data; name="{_quoted(part.field)}"; '
            f'filename="{_quoted(part.filename)}"\r\nContent-Type: {part.content_type}\r\n\r\n'
        )
        parts.append(head.encode("utf-8") + part.data)
    boundary = secrets.token_hex(16)
    while any(boundary.encode() in part for part in parts):  # vanishingly rare
        boundary = secrets.token_hex(16)
    delimiter = f"--{boundary}\r\n".encode()
    body = b"".join(delimiter + part + b"\r\n" for part in parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


__all__ = ["FilePart", "form_data"]
