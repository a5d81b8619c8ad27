"""Writing the command's outputs whole or not at all.

Owns :func:`atomic_open`, :data:`PENDING` and :func:`read_input` (an input file read only when
it is a regular file of bounded size: a FIFO or /dev/zero given as a model never hangs).  A report (``--json``, ``--sarif``, ``--junit``,
``--html``, a plot, a repro script) is written to a temporary file beside its target and
renamed over it once complete (``os.replace``: atomic on POSIX within one folder), so an
interrupted, killed or disk-full run leaves the old output or none, never a truncated one.
Imports nothing of addrsim (layer 0).
"""
from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

#: Temporary files being written now: an interrupt (:mod:`addrsim.commands.interrupt`) removes
#: them before the process exits.
PENDING: set = set()


#: Largest input file read (bytes): a code object or listing of aiter is under 8 MiB.
MAX_INPUT = 256 << 20


def read_input(path, limit: int = MAX_INPUT) -> bytes:
    """The bytes of input file ``path``, opened without blocking (a FIFO with no writer, a
    device) and read only when it is a regular file of at most ``limit`` bytes.  Raises
    OSError (missing, unreadable), ValueError (not a regular file, too large: the message
    says which)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes, more than {limit >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"more than {limit >> 20} MiB")
    return data


def _direct(p: str) -> bool:
    """Whether an output path is written in place: it is (or leads to) something other than
    a regular file (a device, a FIFO), or it lies under /dev or /proc (``/dev/stdout`` is a
    link to the process's own descriptor, never to be replaced)."""
    special = ("/dev/", "/proc/")
    if p.startswith(special) or os.path.realpath(p).startswith(special):
        return True
    return os.path.exists(p) and not os.path.isfile(p)


def _mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_open(path, mode: str = "w", **kw):
    """Open a temporary file in ``path``'s folder for writing (``mode`` "w" or "wb", ``kw``
    as for :func:`open`); on a clean exit of the block its data is flushed to disk and it
    replaces ``path`` (with the permissions a new file would get); on any exception, the
    interrupt included, it is removed and ``path`` is left as it was.  A ``path`` that
    exists and is not a regular file (``/dev/stdout``, a FIFO, ``/dev/full``) is written
    directly: a device is never replaced by a file; a symlink to a regular file keeps
    pointing at the new one, and a file keeps its permissions.  Raises OSError when the
    folder is not writable or the disk is full."""
    if _direct(str(path)):
        with open(path, mode, **kw) as fh:
            yield fh
            fh.flush()
        return
    path = Path(os.path.realpath(path))          # a symlink keeps pointing at the new file
    keep = path.stat().st_mode & 0o7777 if path.is_file() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=str(path.parent))
    PENDING.add(tmp)
    try:
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, keep if keep is not None else _mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        PENDING.discard(tmp)
