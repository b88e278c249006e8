"""Whose recording is this: the headers this user's recorder writes carry an HMAC made with a key
of this user's, and a file that does not carry it is data only (docs/security.md).

A recording names the code that rebuilds its env (a factory ``module:function``, the module that
registers its id, an id of the form ``module:Id``, the methods a harness's env is driven by).
That code runs only when the user names it (``env_fn=``, ``--env-fn``), says they trust the file
(``trust=True``, ``--trust``), or the file is signed with their key, as Jupyter trusts the notebooks
its user wrote. The key (32 random bytes) is created on first use in the user's config directory:
``$SIMUGUARD_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/simuguard``, else ``~/.config/simuguard``.

>>> import os, tempfile
>>> os.environ["SIMUGUARD_CONFIG_DIR"] = tempfile.mkdtemp()
>>> from simuguard_gym.recording.trust import sign, signed_by_user
>>> header = sign({"env": {"id": None, "factory": {"callable": "mymodule:make_env", "kwargs": {}}}})
>>> signed_by_user(header)
True
>>> header["env"]["factory"]["callable"] = "subprocess:run"     # anyone else's edit
>>> signed_by_user(header)
False
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

import msgpack

from simuguard_gym.recording.format import RecordingError

logger = logging.getLogger(__name__)

#: Where a header keeps its signature; the HMAC covers every other field.
SIGNATURE = "signature"
_SCHEME = "hmac-sha256:"
_KEY_FILE = "recording_key"
# What is signed starts with this, so that a signature made for a recording means nothing elsewhere.
_CONTEXT = b"simuguard-recording-header\0"


class UntrustedRecordingError(RecordingError):
    """A recording asks to import or call code, and nothing says the user trusts it."""


def config_directory() -> Path:
    """Where simuguard keeps this user's settings (the recording key)."""
    given = os.environ.get("SIMUGUARD_CONFIG_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "simuguard"


_keys: dict[str, bytes] = {}  # by key file: the keys read or made
_unmakeable: set[str] = set()  # key files that could not be made (said once)


def user_key(*, create: bool = True) -> bytes | None:
    """This user's recording key, created on first use (None where it cannot be read or made:
    recordings are then written unsigned, and a warning says so once)."""
    path = config_directory() / _KEY_FILE
    where = str(path)
    key = _keys.get(where) or _read_key(path)
    if key is None and create and where not in _unmakeable:
        try:
            key = _create_key(path)
        except OSError as error:
            _unmakeable.add(where)
            logger.warning("simuguard: cannot create the recording key %s (%s): recordings are written "
                           "unsigned, and replaying them needs --trust", path, error.strerror or error)
    if key is not None:
        _keys[where] = key
    return key


def use_key(key: bytes) -> None:
    """Sign and check recordings with ``key`` in this process (an audit's Ray workers get the
    user's, so that what they record is the user's as local episodes are)."""
    _keys[str(config_directory() / _KEY_FILE)] = key


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        text = file.read(256).strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    return key if len(key) >= 32 else None


def _create_key(path: Path) -> bytes:
    """A new key, made visible whole (written aside, then linked into place): two processes that
    start at once end up with the same key, the one linked first."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, aside = tempfile.mkstemp(dir=path.parent, prefix=".recording_key-")  # mode 0600
    try:
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_hex(32) + "\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(aside)
    key = _read_key(path)
    if key is None:
        raise OSError(f"{path} holds no key")
    return key


def _mac(key: bytes, header: dict[str, Any]) -> str:
    unsigned = {k: v for k, v in header.items() if k != SIGNATURE}
    body = msgpack.packb(unsigned, use_bin_type=True)
    return _SCHEME + hmac.new(key, _CONTEXT + body, hashlib.sha256).hexdigest()


def signed_body(header: dict[str, Any]) -> bytes:
    """The msgpack bytes of :func:`sign`'s ``header`` (the signature its last field), with the
    header packed once: the signature is an HMAC of the very bytes it is appended to.

    >>> import msgpack
    >>> header = {"format": "simuguard-recording", "seed": 3}
    >>> msgpack.unpackb(signed_body(header)) == sign(header)
    True
    """
    unsigned = {k: v for k, v in header.items() if k != SIGNATURE}
    body = msgpack.packb(unsigned, use_bin_type=True)
    key = user_key()
    if key is None:
        return body
    packer = msgpack.Packer(use_bin_type=True)
    signature = _SCHEME + hmac.new(key, _CONTEXT + body, hashlib.sha256).hexdigest()
    # A map's bytes are its length, then its keys and values: one more field is a new length.
    return (packer.pack_map_header(len(unsigned) + 1) + body[len(packer.pack_map_header(len(unsigned))):]
            + packer.pack(SIGNATURE) + packer.pack(signature))


def sign(header: dict[str, Any]) -> dict[str, Any]:
    """``header`` with this user's signature (unsigned where there is no key)."""
    key = user_key()
    if key is None:
        return {k: v for k, v in header.items() if k != SIGNATURE}
    return {**header, SIGNATURE: _mac(key, header)}


def signed_by_user(header: dict[str, Any]) -> bool:
    """Whether ``header`` carries this user's signature over all its fields."""
    signature = header.get(SIGNATURE)
    if not isinstance(signature, str) or not signature.startswith(_SCHEME):
        return False
    key = user_key(create=False)
    return key is not None and hmac.compare_digest(signature, _mac(key, header))


def refusal(path: Any, asked: list[str]) -> UntrustedRecordingError:
    """The error that says what an unsigned file asked for and how to allow it."""
    return UntrustedRecordingError(
        f"{path}: refused: the recording asks {'; '.join(asked)}, and it is not signed by you. A recording is "
        "data: pass your own env factory (--env-fn MODULE:CALLABLE, env_fn=...) or, if you trust its author, "
        "--trust (trust=True)")
