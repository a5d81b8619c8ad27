"""Writing the command's outputs whole or not at all.

Owns :func:`atomic_open` and :data:`PENDING`.  A report (``--json``, ``--sarif``, ``--junit``,
``--html``, a plot, a repro script) is written to a temporary file beside its target and
renamed over it once complete (``os.replace``: atomic on POSIX within one folder), so an
interrupted, killed or disk-full run leaves the old output or none, never a truncated one.
Imports nothing of addrsim (layer 0).
"""
from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

#: Temporary files being written now: an interrupt (:mod:`addrsim.commands.interrupt`) removes
#: them before the process exits.
PENDING: set = set()


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
    directly: a device is never replaced by a file.  Raises OSError when the folder is not
    writable or the disk is full."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, mode, **kw) as fh:
            yield fh
            fh.flush()
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=str(path.parent))
    PENDING.add(tmp)
    try:
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    finally:
        PENDING.discard(tmp)
