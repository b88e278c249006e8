"""The compiled models a directory's recordings were made on, each stored once, by fingerprint.

A recording names its env, and a replay rebuilds it from code: a colleague who receives the file
needs the same benchmark, version and seeds. The model store takes that away for MuJoCo: each
distinct compiled model (MJB, by the fingerprint of its physics arrays) is written once per output
directory, compressed, as ``models/<fingerprint>.mjb.gz``, and every recording made on it names the
file in its header (``model_file``). A replay that cannot rebuild the env, or rebuilds another
model, or is asked to (``--from-file``) loads the model from there instead: the same MuJoCo
version replays the episode bit for bit with no benchmark installed.

Budget: a model is stored when its MJB is at most ``max_model_bytes`` (default 512 MiB) and the
directory's ``models/`` holds at most ``max_total_bytes`` (default 2 GiB) before it is added; a
model left out is said in the header (``model_file_skipped``). Compressing and writing run on a
thread of their own, never in the env's step; the file appears whole (written aside, renamed) or
not at all.

A stored model is data from a file: its name must be a fingerprint, it is read without following
links, decompressed up to the size the header gives and no further, loaded by MuJoCo only where the
recording's replay runs (a child process for files not signed by this user), and accepted only if
its arrays give the fingerprint the recording names.

>>> import tempfile
>>> from pathlib import Path
>>> from simuguard_gym.recording.model_store import ModelStore, read_model_file
>>> directory = Path(tempfile.mkdtemp())
>>> store = ModelStore(directory)
>>> entry, why = store.add("0123456789abcdef0123456789abcdef", b"MJB bytes")
>>> store.close()                                      # waits for the file
>>> entry["name"], why
('0123456789abcdef0123456789abcdef.mjb.gz', None)
>>> read_model_file(directory / "episode_000000.msgpack", entry)
b'MJB bytes'
"""

from __future__ import annotations

import logging
import os
import queue
import re
import stat
import threading
import zlib
from pathlib import Path
from typing import Any

from simuguard_gym.output_files import UnsafeOutputError, output
from simuguard_gym.recording.format import RecordingError

logger = logging.getLogger(__name__)

MODELS_DIR = "models"
SUFFIX = ".mjb.gz"
#: A stored model's name: its fingerprint (hex) and the suffix; nothing else is ever opened.
_NAME = re.compile(r"^[0-9a-f]{16,64}\.mjb\.gz$")
#: LIBERO's scenes compile to 270 MB MJBs (half of it textures), robosuite's to 64 MB.
MAX_MODEL_BYTES = 512 * 1024 * 1024
MAX_TOTAL_BYTES = 2 * 1024 * 1024 * 1024
#: zlib's fastest level: MJBs compress to about a third with it, barely less with higher levels
#: at three times the time.
LEVEL = 1


class ModelStore:
    """The ``models/`` directory beside an output directory's recordings.

    :meth:`add` returns at once (the header entry, or None and why not); the model is compressed
    and written on the store's thread. :meth:`close` waits for what is queued.
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_model_bytes: int = MAX_MODEL_BYTES,
                 max_total_bytes: int = MAX_TOTAL_BYTES) -> None:
        self.directory = Path(directory) / MODELS_DIR
        self.max_model_bytes, self.max_total_bytes = int(max_model_bytes), int(max_total_bytes)
        self._known: dict[str, dict[str, Any]] = {}  # fingerprint -> header entry: stored, queued or found
        self._queued_bytes = 0
        self._jobs: queue.Queue[tuple[Path, bytes] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        #: Failures of the store's thread (a full disk): said in the log, and in the next headers.
        self.errors: list[str] = []

    def entry(self, fingerprint: str) -> dict[str, Any] | None:
        """The header entry of a model this store has taken (stored, being written or found on
        disk), else None."""
        return self._known.get(fingerprint)

    def add(self, fingerprint: str, mjb: bytes) -> tuple[dict[str, Any] | None, str | None]:
        """Store ``mjb`` under ``fingerprint`` unless held already or over budget: the header entry
        (``name``, ``fingerprint``, ``size`` of the MJB) or None, and why not."""
        if not _NAME.match(fingerprint + SUFFIX):
            raise ValueError(f"a stored model's fingerprint must be hex, got {fingerprint!r}")
        held = self._known.get(fingerprint)
        if held is not None:
            return held, None
        entry: dict[str, Any] = {"name": fingerprint + SUFFIX, "fingerprint": fingerprint, "size": len(mjb)}
        path = self.directory / entry["name"]
        try:
            if stat.S_ISREG(path.lstat().st_mode):  # an earlier run stored it
                self._known[fingerprint] = entry
                return entry, None
        except OSError:
            pass
        if self.errors:
            return None, f"the model store failed: {self.errors[-1]}"
        try:
            if not stat.S_ISDIR(self.directory.lstat().st_mode):  # a link: the writer refuses it too
                return None, f"{self.directory} is not a directory (a stored model is never written through a link)"
        except FileNotFoundError:
            pass
        if len(mjb) > self.max_model_bytes:
            return None, f"its MJB is {len(mjb)} bytes, over the store's {self.max_model_bytes} per model"
        used = self._used_bytes() + self._queued_bytes
        if used + len(mjb) // 3 > self.max_total_bytes:  # a third: what compression leaves, usually
            return None, f"the directory's models/ holds {used} bytes, the store's budget is {self.max_total_bytes}"
        self._known[fingerprint] = entry
        self._queued_bytes += len(mjb) // 3
        if self._thread is None:
            self._thread = threading.Thread(target=self._write_all, name="simuguard-model-store", daemon=True)
            self._thread.start()
        self._jobs.put((path, mjb))
        return entry, None

    def close(self) -> None:
        """Wait until every queued model is written."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def _used_bytes(self) -> int:
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return 0
        return sum(e.stat(follow_symlinks=False).st_size for e in entries
                   if _NAME.match(e.name) and e.is_file(follow_symlinks=False))

    def _write_all(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            path, mjb = job
            try:
                self.directory.mkdir(exist_ok=True)
                if not stat.S_ISDIR(self.directory.lstat().st_mode):  # a link to somewhere else
                    raise UnsafeOutputError(f"refusing to write into {self.directory}: it is not a directory")
                if not path.exists():
                    with output(path) as file:
                        file.write(zlib.compress(mjb, LEVEL))
            except Exception as error:  # noqa: BLE001 - the store's failure never reaches the env's loop
                self._known.pop(path.name[:-len(SUFFIX)], None)  # later episodes name no model that is not there
                self.errors.append(f"{type(error).__name__}: {error}")
                logger.warning("simuguard: could not store the model %s: %s", path.name, error)


def model_file_entry(header: dict[str, Any]) -> dict[str, Any] | None:
    """The header's ``model_file`` checked (its name a fingerprint's, its size a positive int), or
    None where the recording names no stored model."""
    entry = header.get("model_file")
    if entry is None:
        return None
    if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and _NAME.match(entry["name"])
            and entry.get("name") == f"{entry.get('fingerprint')}{SUFFIX}"
            and type(entry.get("size")) is int and 0 < entry["size"] <= 4 * MAX_TOTAL_BYTES):
        raise RecordingError("model_file must name a stored model (<fingerprint>.mjb.gz) and its size in bytes")
    return entry


def read_model_file(recording_path: str | os.PathLike[str], entry: dict[str, Any]) -> bytes:
    """The MJB bytes of a stored model (``entry`` from :func:`model_file_entry`), found in the
    ``models/`` beside ``recording_path``: a regular file, not a link; decompressed to exactly
    the size the entry gives (a file that inflates further is refused)."""
    path = Path(recording_path).parent / MODELS_DIR / entry["name"]
    try:
        found = path.lstat()
    except FileNotFoundError:
        raise RecordingError(f"the recording's model {entry['name']} is not in {path.parent}") from None
    if not stat.S_ISREG(found.st_mode):
        raise RecordingError(f"{path}: not a regular file (a stored model is never read through a link)")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(path, flags), "rb") as file:
        packed = file.read(entry["size"] + 1024 * 1024)  # zlib never makes a file much larger than its input
    inflate = zlib.decompressobj()
    try:
        mjb = inflate.decompress(packed, entry["size"])
    except zlib.error as error:
        raise RecordingError(f"{path}: not a stored model ({error})") from None
    if len(mjb) != entry["size"] or inflate.unconsumed_tail or not inflate.eof:
        raise RecordingError(f"{path}: its content is not the {entry['size']} bytes the recording names")
    return mjb
