"""Recording files taken apart into records and written back, their checksums made anew: what an
author of a crafted file (or a corrupted one) can write."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from simuguard_gym.recording.reader import iter_records
from simuguard_gym.recording.writer import pack_record

Records = list[tuple[str, dict[str, Any]]]


def records_of(path: str | Path) -> Records:
    """A recording's records as (kind, payload)."""
    return [(kind, payload) for _, kind, payload in iter_records(path)]


def craft(records: Records, path: Path, tail: bytes = b"") -> Path:
    """Write records with valid checksums, the footer's file hash made anew."""
    out = b""
    for kind, payload in records:
        if kind == "footer":
            payload = {**payload, "sha256": hashlib.sha256(out).hexdigest()}
        out += pack_record(kind, payload)
    path.write_bytes(out + tail)
    return path
