"""Writing files that never follow a link: every file sopt writes into a run, sweep or report folder goes through
here.

A whole-file write (:func:`write_bytes`, :func:`write_text`, :func:`write_figure`, :func:`write_image`) goes to a
new temporary file ``.<name>.<random>.tmp`` in the target's folder, made by :func:`tempfile.mkstemp` (``O_CREAT |
O_EXCL``: never an existing name, so never a link someone planted there), is flushed and fsynced, then
:func:`os.replace`\\ d over the target. So a reader, or a crash, sees the old file or the new one and never half of
one; a symbolic link at the target's name is replaced by the new file, never written through (a link could send
the bytes to any file its owner can write); and on any failure (a full disk, an exception while rendering a
figure, KeyboardInterrupt) the temporary file is removed and the target is left as it was. Temporary files that a
``kill -9`` left behind are removed by the next successful write of the same name.

:func:`append_text` and :func:`open_append` append in place (a log that must survive ``kill -9`` line by line cannot
be rewritten whole at every line, and a trial's output is appended to as it runs) and refuse a link at the name with
``O_NOFOLLOW``.

:func:`overwrite_in_place` is the one exception to whole-file replacement, for a full disk, where a replacement
needs room for a second copy: it writes over an existing regular file's own bytes (sopt uses it only to mark a run's
small summary.json failed when the disk refused its replacement).

Only the last component of a path is guarded: a folder that is itself a link (a run folder the user linked
elsewhere) is used as it is.
"""

from __future__ import annotations

import errno
import glob
import io
import os
import pathlib
import stat
import tempfile
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from PIL.Image import Image

_TMP_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")   # tempfile.mkstemp's random names
_TMP_SUFFIX = ".tmp"


def _file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file (0o666 less the umask): mkstemp's is 0o600."""
    mask = os.umask(0o022)   # the only way to read the umask; set straight back
    os.umask(mask)
    return 0o666 & ~mask


_FILE_MODE = _file_mode()


def _temp_prefix(target: pathlib.Path) -> str:
    return f".{target.name}."


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` into ``path`` atomically through a fresh temporary file and a rename (see the module's docstring):
    a link at ``path`` is replaced, not followed; on any failure the temporary file is removed and ``path`` is
    untouched."""
    target = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=_TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(fd, _FILE_MODE)
            os.fsync(fd)
        os.replace(tmp, target)
    except BaseException:   # KeyboardInterrupt included: never leave a temporary file behind
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    remove_leftovers(target)


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """``text`` as UTF-8 into ``path`` atomically (:func:`write_bytes`); newlines are written as they are."""
    write_bytes(path, text.encode("utf-8"))


def write_figure(path: str | os.PathLike[str], figure: "Figure", **savefig: Any) -> None:
    """A matplotlib ``figure`` into ``path`` atomically: rendered into memory first (``figure.savefig`` with
    ``savefig``'s arguments, the format from ``path``'s suffix unless ``format`` is given), so a failure while
    rendering leaves no file at all."""
    fmt = savefig.pop("format", None) or pathlib.Path(path).suffix.lstrip(".").lower() or None
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt, **savefig)
    write_bytes(path, buffer.getvalue())


def write_image(path: str | os.PathLike[str], image: "Image", **save: Any) -> None:
    """A Pillow ``image`` into ``path`` atomically: encoded into memory first (``image.save`` with ``save``'s
    arguments, e.g. ``save_all=True`` for an animated GIF; the format from ``path``'s suffix unless ``format`` is
    given)."""
    from PIL import Image as PILImage

    fmt = save.pop("format", None)
    if fmt is None:
        suffix = pathlib.Path(path).suffix.lower()
        fmt = PILImage.registered_extensions().get(suffix)
        if fmt is None:
            raise ValueError(f"image path {os.fspath(path)!r}: Pillow has no format for the suffix {suffix!r}; "
                             "name a .png, .gif, .jpg, ... file or pass format=")
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **save)
    write_bytes(path, buffer.getvalue())


def open_append(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for appending bytes (created 0o666 less the umask when missing). A symbolic link at ``path``
    is refused (``O_NOFOLLOW``) with an OSError naming the file, rather than appending to whatever file the link
    points to (a log or metrics file in a run or sweep folder that someone else can write)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"{os.fspath(path)!r} is a symbolic link; sopt appends to it only as a "
                                       "regular file, never through a link (remove the link)") from None
        raise
    return os.fdopen(fd, "ab")


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` (UTF-8) to ``path`` (:func:`open_append`) in one write, flushed when this returns."""
    with open_append(path) as f:
        f.write(text.encode("utf-8"))


def overwrite_in_place(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` written over the existing file ``path`` from its first byte, then the file cut to ``len(data)``:
    no temporary file, so a file no longer than the blocks it already has takes it on a full disk. Not atomic (a
    crash midway leaves a mix of old and new bytes): only for when :func:`write_bytes` failed for want of room.
    OSError, nothing written, unless ``path`` is a regular file with no other hard link (a symbolic link there is
    refused, ``O_NOFOLLOW``; a FIFO or device is not opened for a wait)."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise OSError(errno.EPERM, "not overwritten in place: not a regular file with one name", os.fspath(path))
        view, done = memoryview(data), 0
        while done < len(data):
            done += os.pwrite(fd, view[done:], done)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_leftovers(target: str | os.PathLike[str]) -> None:
    """Delete the ``.<name>.<random>.tmp`` files that writes to ``target`` interrupted by ``kill -9`` left behind
    (mkstemp's pattern exactly: never another file that happens to share the prefix; a link so named is removed,
    never followed). A write in progress elsewhere to the same path loses its temporary file and fails, as two
    writers of one file would anyway."""
    target = pathlib.Path(target)
    prefix = _temp_prefix(target)
    for leftover in target.parent.glob(f"{glob.escape(prefix)}*{_TMP_SUFFIX}"):
        middle = leftover.name[len(prefix):-len(_TMP_SUFFIX)]
        if len(middle) == 8 and set(middle) <= _TMP_CHARS and (leftover.is_symlink() or leftover.is_file()):
            try:
                leftover.unlink()
            except OSError:
                pass   # removed meanwhile, or not ours to remove: the write itself succeeded
