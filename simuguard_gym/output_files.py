"""Every file simuguard writes (reports, traces, videos, views, exports, side files): written aside
and renamed into place, never through a symbolic link, never outside its directory.

The content goes to a new file beside the target, created exclusively and without following links
(``O_CREAT | O_EXCL | O_NOFOLLOW``), and is renamed over the target once it is whole: a process
killed meanwhile leaves the old file or none, never half of one. A target that is a symbolic link
(a downloaded directory of recordings can hold ``report.csv -> ~/.bashrc``) is an
:class:`UnsafeOutputError` and nothing is written.

>>> import tempfile
>>> from pathlib import Path
>>> from simuguard_gym.output_files import write_output
>>> directory = Path(tempfile.mkdtemp())
>>> write_output(directory / "report.csv", "task,n\\n").read_text()
'task,n\\n'
>>> (directory / "link.csv").symlink_to(directory / "elsewhere")
>>> write_output(directory / "link.csv", "x")
Traceback (most recent call last):
...
simuguard_gym.output_files.UnsafeOutputError: refusing to write .../link.csv: it is a symbolic link
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Any, Iterator

PARTIAL = ".partial"


class UnsafeOutputError(OSError):
    """An output's name is taken by something that is not a regular file (a symbolic link)."""


def refuse_link(path: Path) -> None:
    """Raise :class:`UnsafeOutputError` if ``path`` is a symbolic link or anything else but a
    regular file (or nothing)."""
    try:
        found = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode):
        raise UnsafeOutputError(f"refusing to write {path}: it is a symbolic link")
    if not stat.S_ISREG(found.st_mode):
        raise UnsafeOutputError(f"refusing to write {path}: it is not a regular file")


def create_aside(path: Path) -> tuple[int, Path]:
    """A new, empty file beside ``path`` (``NAME.<random>.partial``) and its descriptor, open for
    writing; created exclusively, never through a link, with the mode the umask gives."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        aside = path.with_name(f"{path.name}.{secrets.token_hex(4)}{PARTIAL}")
        try:
            return os.open(aside, flags, 0o666), aside
        except FileExistsError:
            continue


@contextlib.contextmanager
def output(path: str | os.PathLike[str], mode: str = "wb", **open_args: Any) -> Iterator[IO[Any]]:
    """A file object whose content becomes ``path`` when the block ends without an exception
    (flushed, synced, renamed over it); on an exception nothing of it stays."""
    target = Path(path)
    refuse_link(target)
    fd, aside = create_aside(target)
    try:
        with os.fdopen(fd, mode, **open_args) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        refuse_link(target)
        os.replace(aside, target)
    except BaseException:
        aside.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def output_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh file's path for a writer that opens files by name (rerun-sdk): the file is ours,
    created as :func:`output` creates it, and is renamed over ``path`` when the block ends."""
    target = Path(path)
    refuse_link(target)
    fd, aside = create_aside(target)
    os.close(fd)
    try:
        yield aside
        refuse_link(target)
        os.replace(aside, target)
    except BaseException:
        aside.unlink(missing_ok=True)
        raise


def write_output(path: str | os.PathLike[str], content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to ``path`` as :func:`output` does; returns the path."""
    with output(path, "wb") as file:
        file.write(content.encode() if isinstance(content, str) else content)
    return Path(path)
