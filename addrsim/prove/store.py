"""The query cache on disk: decided queries and replays, shared by workers and runs.

Owns :class:`Store` (a dict that also appends what it learns to a JSON-lines file) and
:func:`open_store`.  May import addrsim.prove.verdict and addrsim.backends.z3_run.

A key is the stable digest of a query (:func:`addrsim.prove.query.query_key`) with its tag;
the file is named by addrsim's version and a digest of its own source code, so a changed
prover never reads another one's answers.  Only what does not depend on the machine is kept:
query answers ("proved", "refuted" with the solver's model, "unknown" within the budget:
solver budgets are resource units and each query runs in a Z3 context of its own, so the
answer is a function of the query and the budget, and the budget is part of the key),
int-mode classifications, concrete replays (Counterexample, Witness, ReplayFailure: the
concrete interpreter is deterministic) and witness models; an answer cut by the wall-clock
safety net (the one that may depend on load) is never written.  Lines are appended with one
``write`` each (O_APPEND), so workers can share a file.  A file or folder that cannot be read
or written makes the store an in-memory one: the cache never changes a verdict.

Trust (README, "The query cache"): each line is authenticated by a keyed BLAKE2b MAC whose key
is a secret, never derived from public data: ``$ADDRSIM_CACHE_KEY`` (a CI secret), else the
``key`` file of the cache folder (32 random bytes, created with mode 0600 on first use; a key
file that others may read or write, or that is not the user's own, is not used and the store
is in memory).  The source digest is mixed in too, so a changed prover never reads another's
lines.  A line that fails its MAC, does not parse, is longer than :data:`MAX_LINE` bytes,
nests deeper than the decoder allows, or holds a value of the wrong shape (a crash mid-write,
an edit, a forgery) is skipped, counted in :attr:`Store.rejected`, and decided again.  The
folder is bounded: :func:`open_store` keeps the cache files under :func:`cap_bytes` (oldest
files out first, then the oldest lines of the current file).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import time
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Optional

from addrsim import __version__
from addrsim.backends.z3_run import WALLCLOCK_NOTE
from addrsim.prove.verdict import Counterexample, ReplayFailure, Witness

SCHEMA = 4
#: Longest cache line read (bytes): a kernel's whole scan report is under 2 MiB.
MAX_LINE = 32 << 20
#: Default bound of a cache folder's query files (bytes; ``$ADDRSIM_CACHE_MAX_MB`` overrides).
CAP_BYTES = 2 << 30
KEY_ENV = "ADDRSIM_CACHE_KEY"
_TYPES = {"C": Counterexample, "W": Witness}


@lru_cache(maxsize=1)
def code_digest() -> str:
    """12 hex digits of BLAKE2b over addrsim's source files (sorted by path)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.blake2b(digest_size=6)
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _enc(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tuple):
        return {"t": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        return {"d": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if isinstance(v, ReplayFailure):
        return {"F": [v.kind, v.reason]}
    for tag, cls in _TYPES.items():
        if isinstance(v, cls):
            return {tag: {f.name: _enc(getattr(v, f.name)) for f in fields(cls)}}
    raise TypeError(type(v).__name__)


def _dec(v):
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    (tag, x), = v.items()
    if tag == "t":
        return tuple(_dec(y) for y in x)
    if tag == "d":
        return {_dec(k): _dec(y) for k, y in x}
    if tag == "F":
        return ReplayFailure(*x)
    return _TYPES[tag](**{k: _dec(y) for k, y in x.items()})


def _undecided(value) -> bool:
    """An answer that may depend on the machine's load (a check cut by the wall-clock safety
    net, :data:`addrsim.prove.query.WALLCLOCK_NOTE`): never written.  Every other answer,
    "unknown" included, is a function of the query and its resource budget, which is part of
    the key."""
    if isinstance(value, str):
        return WALLCLOCK_NOTE in value
    if isinstance(value, (tuple, list)):
        return any(_undecided(x) for x in value)
    if isinstance(value, dict):
        return any(_undecided(x) for x in value.values())
    return False


def _plain(v, depth: int = 0) -> bool:
    """A JSON value of ints, strings, lists and None (a keyed run's result)."""
    if v is None or isinstance(v, (int, str)) and not isinstance(v, bool):
        return True
    return isinstance(v, list) and depth < 4 and all(_plain(x, depth + 1) for x in v)


def _well_formed(value) -> bool:
    """The shapes the prover stores: a decision tuple (answer, model, reason, minimal, SMT-LIB2,
    resource units) or a loop decision (answer, model, reason, resource units), an int-mode answer, a witness model (a dict)
    or its absence, a replay (Counterexample, Witness, ReplayFailure), an unsat core ("core", texts or None),
    a keyed concrete run ("runs", packed visits, registers read after each stretch) and its result
    ("run-result", plain JSON: :mod:`addrsim.prove.runs`), a float-reciprocal division's answer ("division",
    positions of its operands with the counts checked, a reason, or None: :mod:`addrsim.prove.idioms`),
    a check's display formulas ("formulas", two texts, two sympy trees or None),
    a kernel's scan report ("report", dict: :func:`addrsim.commands.scan.report_key`)."""
    if value is None or isinstance(value, (Counterexample, Witness, ReplayFailure)):
        return True
    if isinstance(value, str):
        return value in ("proved", "refuted", "unknown") or value.startswith(("no witness found", "undecided"))
    if isinstance(value, dict):
        return all(isinstance(k, str) and (isinstance(v, int) or isinstance(v, dict)) for k, v in value.items())
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "report":   # a kernel's whole scan report
        return isinstance(value[1], dict) and isinstance(value[1].get("kernels"), list)
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "core":     # a minimal unsat core (its texts)
        return value[1] is None or (isinstance(value[1], list) and all(isinstance(t, str) for t in value[1]))
    if isinstance(value, tuple) and len(value) == 5 and value[0] == "formulas":   # display formulas (trees)
        return all(isinstance(t, str) for t in value[1:3]) and all(t is None or isinstance(t, list) for t in value[3:])
    if isinstance(value, tuple) and len(value) == 3 and value[0] == "runs":   # a keyed run: visits, live registers
        return (isinstance(value[1], list) and all(isinstance(t, str) for t in value[1]) and isinstance(value[2], list)
                and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], int) and isinstance(x[1], list)
                        and all(isinstance(r, str) for r in x[1]) for x in value[2]))
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "division":   # a float-reciprocal term's answer
        v = value[1]
        return v is None or isinstance(v, str) or (isinstance(v, list) and len(v) == 5)
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "run-result":   # what a keyed run gave
        return _plain(value[1])
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):   # (proved, units) of a sub-claim
        return isinstance(value[1], int) and not isinstance(value[1], bool) and value[1] >= 0
    return (isinstance(value, tuple) and len(value) in (4, 6) and value[0] in ("proved", "refuted", "unknown")
            and (value[1] is None or isinstance(value[1], dict)) and isinstance(value[-1], int))


def _mac(secret: bytes, key_text: str, value_text: str) -> str:
    """The line's MAC: keyed BLAKE2b (key: the secret, salted with the source digest) over
    the key and value texts, 128 bits."""
    return hashlib.blake2b((key_text + "\0" + value_text).encode(), digest_size=16,
                           key=hashlib.blake2b(secret, digest_size=32, person=code_digest().encode()[:16]).digest()
                           ).hexdigest()


def secret_key(directory) -> Optional[bytes]:
    """The cache's secret: ``$ADDRSIM_CACHE_KEY`` (its bytes; at least 32), else ``directory/key``,
    created with 32 random bytes and mode 0600 when missing.  None when the key file cannot be
    made or read, or is not safe: not a regular file, not owned by this user, or readable or
    writable by group or others (anyone who can read it can forge lines)."""
    env = os.environb.get(KEY_ENV.encode())
    if env:
        return env if len(env) >= 32 else None
    path = Path(directory) / "key"
    if not _made_key(path):
        return None
    for _ in range(KEY_WAITS):
        key = _read_key(path)
        if key is None or len(key) >= 32:
            return key
        time.sleep(0.05)        # another process made the file and has not written it yet (an older addrsim)
    return None


KEY_WAITS = 40
"""Reads of a key file shorter than 32 bytes, 50 ms apart, before the cache is given up."""


def _made_key(path: Path) -> bool:
    """``path`` exists, made here if missing: 32 random bytes written to a private temporary
    file, then hard-linked to ``path``, so a concurrent reader (the workers of ``--jobs 2`` on a
    fresh cache folder) sees the whole key or no file, never an empty one.  False when it
    cannot be made."""
    if path.exists() or path.is_symlink():
        return True
    tmp = path.with_name(f"key.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass                 # another process linked its key first: that one is the cache's
        finally:
            os.unlink(tmp)
    except OSError:
        return path.exists()
    return True


def _read_key(path: Path) -> Optional[bytes]:
    """The key file's bytes (stripped); None when it is not safe (not a regular file, not
    owned by this user, readable or writable by group or others, over 4 KiB) or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077
                    or st.st_size > 4096):
                return None
            return os.read(fd, 4096).strip()
        finally:
            os.close(fd)
    except OSError:
        return None


class Store(dict):
    """A query cache; with ``path``, what is set is also appended to that JSON-lines file and
    what the file holds is read first."""

    def __init__(self, path: Optional[Path] = None, secret: Optional[bytes] = None):
        super().__init__()
        self.path = path if secret is not None else None
        self.secret = secret
        self.loaded = 0
        self.rejected = 0           # lines skipped: not authenticated, torn, too long or too deep
        self.note = ""              # why a cache folder was not used (a key that is not safe)
        self._earlier = set()
        if self.path is not None:
            try:
                if self.path.exists():
                    self._load(self.path)
            except OSError:
                self.path = None   # unreadable (a folder, no permission, a FIFO): in memory only

    def _load(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{path}: not a regular file")
        with os.fdopen(fd, "rb") as fh:
            while True:
                line = fh.readline(MAX_LINE + 1)
                if not line:
                    break
                if len(line) > MAX_LINE:
                    self.rejected += 1
                    while line and not line.endswith(b"\n"):     # skip the rest of the long line
                        line = fh.readline(MAX_LINE)
                    continue
                if self._take(line):
                    self.loaded += 1
                elif line.strip():
                    self.rejected += 1

    def _take(self, raw: bytes) -> bool:
        """Keep one line's entry when its MAC holds and its value is well formed."""
        try:
            rec = json.loads(raw.decode("utf-8"))
            k, v = json.dumps(rec["k"], separators=(",", ":")), json.dumps(rec["v"], separators=(",", ":"))
            if not isinstance(rec.get("c"), str) or not hmac.compare_digest(rec["c"], _mac(self.secret, k, v)):
                return False
            key, value = _dec(rec["k"]), _dec(rec["v"])
            if not _well_formed(value):
                return False
            super().__setitem__(key, value)
            self._earlier.add(key)
            return True
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError, UnicodeDecodeError):
            return False           # a torn, edited or hostile line: the entry is decided again

    def earlier(self, key) -> bool:
        """Whether the entry of ``key`` was read from the file (decided by an earlier run)."""
        return key in self._earlier

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._earlier.discard(key)
        if self.path is None or _undecided(value):
            return
        try:
            k = json.dumps(_enc(key), separators=(",", ":"))
            v = json.dumps(_enc(value), separators=(",", ":"))
        except TypeError:
            return                 # not a value the store keeps (an in-memory object)
        line = '{"k":' + k + ',"v":' + v + ',"c":"' + _mac(self.secret, k, v) + '"}\n'
        if len(line) > MAX_LINE:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            self.path = None       # cannot write here: keep going in memory


def store_path(directory) -> Path:
    return Path(directory) / f"queries-{__version__}-{code_digest()}-s{SCHEMA}.jsonl"


def cap_bytes() -> int:
    """The bound of a cache folder's query files in bytes: ``$ADDRSIM_CACHE_MAX_MB`` MiB, else
    :data:`CAP_BYTES`."""
    try:
        mb = float(os.environ.get("ADDRSIM_CACHE_MAX_MB", ""))
        return max(1 << 20, min(int(mb * (1 << 20)), 1 << 50))
    except (ValueError, OverflowError):       # not a number, nan, inf
        return CAP_BYTES


def trim(directory, cap: int) -> None:
    """Keep the folder's ``queries-*.jsonl`` files under ``cap`` bytes: other versions' files
    go first, oldest first; then the current file keeps its newest lines up to half the cap
    (rewritten to a temporary file and renamed; a writer appending meanwhile loses its line,
    which is only decided again).  Errors leave the files as they are."""
    d = Path(directory)
    cur = store_path(d)
    try:
        files = [(p.stat().st_mtime, p.stat().st_size, p) for p in d.glob("queries-*.jsonl") if p.is_file()]
        total = sum(sz for _, sz, _ in files)
        for _, sz, p in sorted(f for f in files if f[2] != cur):
            if total <= cap:
                return
            p.unlink()
            total -= sz
        if total <= cap or not cur.is_file():
            return
        keep, size = [], 0
        with open(cur, "rb") as fh:
            fh.seek(max(0, cur.stat().st_size - cap // 2))
            fh.readline()                                  # a partial line
            for line in fh:
                keep.append(line)
                size += len(line)
        tmp = cur.with_suffix(f".trim{os.getpid()}")
        with open(tmp, "wb") as fh:
            fh.writelines(keep)
        os.replace(tmp, cur)
    except OSError:
        return


def open_store(directory) -> Store:
    """The store in ``directory`` (created, then trimmed to :func:`cap_bytes`), or an in-memory
    one when ``directory`` is None, cannot be created, or has no usable secret
    (:func:`secret_key`)."""
    if directory is None:
        return Store()
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        s = Store()
        s.note = f"{directory} cannot be a cache folder ({e.strerror or e}): the query cache is kept in memory only"
        return s
    secret = secret_key(directory)
    if secret is None:
        s = Store()
        s.note = (f"${KEY_ENV} is shorter than 32 bytes" if os.environb.get(KEY_ENV.encode()) else
                  f"its key file {Path(directory) / 'key'} is not a private regular file of this user "
                  f"(mode 0600, at least 32 bytes)") + ": the query cache is kept in memory only"
        return s
    trim(directory, cap_bytes())
    return Store(store_path(directory), secret)


def default_dir() -> Optional[Path]:
    """``$ADDRSIM_CACHE/queries`` (default ``~/.cache/addrsim/queries``); None when
    ``$ADDRSIM_NO_CACHE`` is set (the tests set it: their verdicts must not depend on an
    earlier run)."""
    if os.environ.get("ADDRSIM_NO_CACHE"):
        return None
    return Path(os.environ.get("ADDRSIM_CACHE", Path.home() / ".cache" / "addrsim")) / "queries"

