"""Streaming writer: one file per episode, written under a temporary name and renamed at the end."""

from __future__ import annotations

import hashlib
import logging
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import numpy as np

from simuguard_gym.recording.format import (
    FORMAT_NAME,
    PARTIAL_SUFFIX,
    SCHEMA_VERSION,
    encode_array,
)
from simuguard_gym.output_files import refuse_link
from simuguard_gym.recording.trust import signed_body

logger = logging.getLogger(__name__)


_syncer: ThreadPoolExecutor | None = None


def sync_in_background(file: BinaryIO) -> None:
    """Close ``file`` now and fsync it in a thread of its own (one for the process; the
    interpreter waits for it at exit): a file's durability costs the env's loop nothing."""
    global _syncer
    descriptor = os.dup(file.fileno())  # the thread's own: the file closes here, its errors are the caller's
    try:
        file.close()
    except BaseException:
        os.close(descriptor)
        raise
    if _syncer is None:
        _syncer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="simuguard-fsync")
    _syncer.submit(_sync_and_close, descriptor, str(getattr(file, "name", "")))


def _sync_and_close(descriptor: int, name: str) -> None:
    try:
        os.fsync(descriptor)
    except OSError as error:  # whole in the page cache: only a crash of the machine could lose it now
        logger.warning("simuguard: could not sync %s to disk: %s", name, error)
    finally:
        os.close(descriptor)


def _forget_syncer() -> None:
    global _syncer
    _syncer = None  # a forked child starts a thread of its own if it ever writes a recording


os.register_at_fork(after_in_child=_forget_syncer)


def pack_record(kind: str, payload: dict[str, Any]) -> bytes:
    return record_of(kind, msgpack.packb(payload, use_bin_type=True))


def record_of(kind: str, body: bytes) -> bytes:
    """The file record of a payload packed already (``body``: its msgpack bytes)."""
    return msgpack.packb([kind, body, zlib.crc32(body)], use_bin_type=True)


def pack_chunk(columns: dict[str, np.ndarray], *, index: int, first: int, n: int) -> bytes:
    """The file record of chunk ``index`` (substeps ``first`` to ``first + n``)."""
    payload = {name: encode_array(a) for name, a in columns.items()}
    return pack_record("chunk", {"index": index, "first": first, "n": n, "columns": payload})


class RecordingWriter:
    """Writes a recording record by record; memory stays bounded by one chunk.

    The file is ``<path>.partial`` until :meth:`close` writes the footer and renames it (synced
    to disk in a thread of its own),
    so a crash never leaves a half-written file under the final name, and the complete chunks
    of a ``.partial`` file still read (``load_recording(..., allow_partial=True)``). Neither name
    may be taken, by a file or a symbolic link. The header is signed with this user's key
    (:mod:`simuguard_gym.recording.trust`): their replays may run the code it names.

    >>> import tempfile, numpy as np
    >>> from simuguard_gym.recording.writer import RecordingWriter
    >>> path = tempfile.mkdtemp() + "/episode.msgpack"
    >>> writer = RecordingWriter(path, {"engine": "mujoco"})
    >>> writer.write_chunk({"fingerprint": np.arange(3, dtype=np.uint64)}, first=0, n=3)
    >>> writer.close({"substeps": 3})
    PosixPath('...episode.msgpack')
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any]) -> None:
        self.path = Path(path)
        if os.path.lexists(self.path):
            raise FileExistsError(f"refusing to overwrite existing recording {self.path}")
        self.partial_path = self.path.with_name(self.path.name + PARTIAL_SUFFIX)
        # "x" (O_EXCL): another writer (a second env recording into the same directory) never gets
        # clobbered, and a symbolic link of that name is never followed.
        self._file = open(self.partial_path, "xb")
        self._sha = hashlib.sha256()
        self._chunks = 0
        self.substeps = 0
        # Packed once: the signature is appended to the bytes it signs (trust.signed_body).
        record = record_of("header", signed_body({"format": FORMAT_NAME, "schema": SCHEMA_VERSION, **header}))
        self._file.write(record)
        self._sha.update(record)
        # Out of Python's buffer before the first substep runs: a process killed at any later
        # point leaves the seed, the env and the initial state readable in the .partial file.
        self._file.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def _write(self, kind: str, payload: dict[str, Any]) -> None:
        record = pack_record(kind, payload)
        self._file.write(record)
        self._sha.update(record)

    def write_chunk(self, columns: dict[str, np.ndarray], *, first: int, n: int) -> None:
        self._write_record(pack_chunk(columns, index=self._chunks, first=first, n=n), index=self._chunks,
                           first=first, n=n)

    def write_packed_chunk(self, record: bytes, *, index: int, first: int, n: int) -> None:
        """Write a chunk record made by :func:`pack_chunk` elsewhere (a recorder's helper process)."""
        self._write_record(record, index=index, first=first, n=n)

    def _write_record(self, record: bytes, *, index: int, first: int, n: int) -> None:
        if first != self.substeps or index != self._chunks:
            raise ValueError(f"chunk {index} starts at substep {first}, expected chunk {self._chunks} "
                             f"at substep {self.substeps}")
        self._file.write(record)
        self._sha.update(record)
        self._chunks += 1
        self.substeps += n
        # A crash after this point keeps the chunk: flush it out of Python's buffer.
        self._file.flush()

    def write_error(self, error: dict[str, Any]) -> None:
        self._write("error", error)
        self._file.flush()

    def close(self, footer: dict[str, Any]) -> Path:
        """Write the footer and give the file its final name; it is made durable (fsync) in a
        thread of its own, maybe after the rename: a crash of the machine before that leaves a
        file whose checksums fail, never one that reads as whole."""
        payload = {**footer, "chunks": self._chunks, "substeps": self.substeps, "sha256": self._sha.hexdigest()}
        self._file.write(pack_record("footer", payload))
        self._file.flush()
        sync_in_background(self._file)
        refuse_link(self.path)
        os.replace(self.partial_path, self.path)
        return self.path

    def abandon(self) -> None:
        """Stop writing; the ``.partial`` file stays as evidence of what was recorded. Never
        raises: closing flushes what Python still buffers, which fails again on a full disk."""
        try:
            if not self._file.closed:
                self._file.close()
        except Exception:  # noqa: BLE001 - abandoning after a failure; the file may be what failed
            pass
