"""Atomic file writes, shared by every writer of results, pages and traces."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def write_atomic(path: str | os.PathLike, text: str | Iterable[str]) -> Path:
    """Write ``text`` (a string, or lines written each with a trailing
    newline) to ``path`` through a temporary file in the same folder and
    ``os.replace``: readers see the old file or the new one, never a part; an
    error mid-write (a failing line generator included) leaves no file behind.
    The file gets the usual permissions (0666 minus the umask), not
    ``mkstemp``'s 0600.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the folder cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if isinstance(text, str):
                f.write(text)
            else:
                for line in text:
                    f.write(line)
                    f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path
