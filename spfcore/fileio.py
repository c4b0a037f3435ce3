"""Atomic file writes, shared by every writer of results, pages and traces,
and the one-writer lock of a results file."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import filelock


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike, mode: str = "w") -> Iterator:
    """Open a temporary file beside ``path`` for writing (``mode`` "w" for
    UTF-8 text, "wb" for bytes) and, when the body ends without an error,
    ``os.replace`` it onto ``path``: readers see the old file or the new one,
    never a part; an error in the body leaves no file behind. The file gets
    the usual permissions (0666 minus the umask), not ``mkstemp``'s 0600.
    A symlink at ``path`` is followed: its target is replaced, the link stays.
    An existing ``path`` that is not a regular file (``/dev/null``, a FIFO,
    ``/dev/stdout``) is written in place: replacing it would swap a device
    node for a plain file.

    Raises:
        OSError: the folder cannot be written; ``IsADirectoryError``: ``path``
            is a folder.
    """
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, text: str | Iterable[str]) -> Path:
    """Write ``text`` (a string, or lines written each with a trailing
    newline) to ``path`` with :func:`open_atomic`: readers see the old file or
    the new one, never a part; an error mid-write (a failing line generator
    included) leaves no file behind.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OSError: the folder cannot be written.
    """
    with open_atomic(path) as f:
        if isinstance(text, str):
            f.write(text)
        else:
            for line in text:
                f.write(line)
                f.write("\n")
    return Path(path)


class OutputInUseError(RuntimeError):
    """Another live run holds the lock of this output file."""


def lock_path(path: str | os.PathLike) -> Path:
    """``<path>.lock``: the lock file of results file ``path`` (in its folder),
    symlinks resolved, so two names of one file share one lock."""
    path = Path(os.path.realpath(path))
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def output_lock(path: str | os.PathLike) -> Iterator[Path]:
    """Hold ``<path>.lock`` (:func:`lock_path`) exclusively for the body: one
    writer per results file (its sidecar and plots included). Refuses at once,
    never waits. The lock is an OS lock (``flock``, through the ``filelock``
    library): it dies with its process, so a killed run never blocks the next
    one; the lock file records the holder (pid, host, command) for the
    message, and is removed on release. Temporary files a killed writer of
    ``path`` left (:func:`write_atomic`'s) are removed. A folder created for the lock is
    removed again on release when left empty (a refused run writes nothing).

    Yields:
        The lock file's path.

    Raises:
        OutputInUseError: another live process (or another ``output_lock`` in
            this one) holds the lock; the message names the file and the holder.
        OSError: the folder cannot be created or written.
    """
    lock_file = lock_path(path)
    made = []
    for d in reversed([lock_file.parent, *lock_file.parent.parents]):
        if not d.exists():
            made.append(d)
    lock_file.parent.mkdir(parents=True, exist_ok=True)

    def describe(fd: int) -> None:
        who = f"pid {os.getpid()} on {socket.gethostname()}: {' '.join(sys.argv)[:300]}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, who, 0)

    lock = filelock.FileLock(lock_file, timeout=0, on_acquired=describe)
    try:
        try:
            lock.acquire()
        except filelock.Timeout:
            try:
                holder = lock_file.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                holder = ""
            raise OutputInUseError(
                f"{path}: another run is writing this output ({holder or 'holder unknown'}; lock {lock_file}); "
                "wait for it to finish or choose another output") from None
        try:
            for stale in lock_file.parent.glob(f".{Path(os.path.realpath(path)).name}.*.tmp"):  # write_atomic's, of a killed writer
                stale.unlink(missing_ok=True)
            yield lock_file
        finally:
            # unlinked while held: filelock refuses an inode found unlinked after its flock, so no two holders
            lock_file.unlink(missing_ok=True)
            lock.release()
    finally:
        for d in reversed(made):  # deepest first; a folder another run now uses is not empty
            try:
                d.rmdir()
            except OSError:
                break


def hold_output_lock(path: str | os.PathLike | None) -> None:
    """In a click command: hold :func:`output_lock` on ``path`` until the
    command ends (``click.Context.with_resource``); nothing for ``None``.

    Raises:
        click.ClickException: another live run holds ``path``, or its folder
            cannot be written (exit status 1).
    """
    import click

    if path is None:
        return
    try:
        click.get_current_context().with_resource(output_lock(path))
    except OutputInUseError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise click.ClickException(f"{path}: cannot lock: {exc.strerror or exc}{where}") from None
