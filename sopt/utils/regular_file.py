"""Opening a file that must be a regular file, without blocking on it or reading it without end.

Configs and checkpoints are named by users, and what a name points to may have become anything: a FIFO blocks
its reader until a writer comes, a character device such as ``/dev/zero`` never ends, a folder cannot be read.
:func:`open_regular` looks with ``stat`` before opening, opens non-blocking, and looks again with ``fstat`` on the
descriptor, so a FIFO swapped in between the two is neither waited for nor read.
"""

from __future__ import annotations

import os
import pathlib
import stat
from typing import BinaryIO

NAME_MAX = 255    # bytes of one folder or file name (Linux filesystems')
PATH_MAX = 4096   # bytes of a whole path (Linux's)
KINDS = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket"}
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class NotRegularFileError(OSError):
    """``path`` names something other than a regular file; ``kind`` says what, in words ("a FIFO (named pipe)",
    "a character device (a symbolic link to '/dev/zero')")."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(f"{os.fspath(path)!r} is {kind}, not a regular file")
        self.kind = kind


def _refuse_unless_regular(mode: int, path: str | os.PathLike[str]) -> None:
    if not stat.S_ISREG(mode):
        kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
        if os.path.islink(path):
            kind += f" (a symbolic link to {os.path.realpath(path)!r})"
        raise NotRegularFileError(path, kind)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file (links followed); NotRegularFileError at once
    if it is anything else, OSError if it cannot be examined or opened (missing, a name too long, ...)."""
    _refuse_unless_regular(os.stat(path).st_mode, path)
    fd = os.open(path, _FLAGS)
    try:
        _refuse_unless_regular(os.fstat(fd).st_mode, path)
        os.set_blocking(fd, True)   # a regular file never blocks; reads need not see EAGAIN handling
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class FileTooLargeError(OSError):
    """``path`` holds more than the reader's limit of bytes (``size`` is at least what it holds)."""

    def __init__(self, path: str | os.PathLike[str], size: int, limit: int) -> None:
        super().__init__(f"{os.fspath(path)!r} holds {size} bytes or more; at most {limit} are read")
        self.size, self.limit = size, limit


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """The contents of the regular file ``path`` (:func:`open_regular`), at most ``limit`` bytes: FileTooLargeError
    for a larger file, checked before reading and bounded while reading (the file may grow meanwhile)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    size = max(size, len(data))
    if size > limit:
        raise FileTooLargeError(path, size, limit)
    return data


def name_problem(path: str | os.PathLike[str]) -> str | None:
    """Why no filesystem takes ``path`` as a name (a NUL character, a name over NAME_MAX bytes, a path over
    PATH_MAX bytes), in words after the path ("has a name too long for the filesystem (300 bytes in one name, ...)"),
    or None; found from the string alone, before the filesystem is asked."""
    text = os.fspath(path)
    if "\0" in text:
        return "has a NUL character in the name"
    size = len(os.fsencode(text))
    longest = max((len(os.fsencode(part)) for part in pathlib.PurePath(text).parts), default=0)
    if size > PATH_MAX or longest > NAME_MAX:
        return (f"has a name too long for the filesystem ({longest} bytes in one name, {size} in the path; at most "
                f"{NAME_MAX} and {PATH_MAX})")
    return None


def file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` names no regular file that can be read (its name, missing, a folder, a FIFO, a device, a
    socket, unexaminable), in words after the path, or None. ``os.stat`` only: nothing is opened."""
    problem = name_problem(path)
    if problem is not None:
        return problem
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a folder"
    if not stat.S_ISREG(mode):
        return f"is {KINDS.get(stat.S_IFMT(mode), 'not a regular file')}, not a regular file"
    return None
