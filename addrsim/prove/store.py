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
``write`` each (O_APPEND), so workers can share a file.  Each line carries a checksum keyed by
the source digest; a line that does not parse, fails its checksum or holds a value of the
wrong shape (a crash mid-write, an edit) is skipped and decided again.  A file or folder that
cannot be read or written makes the store an in-memory one: the cache never changes a verdict.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Optional

from addrsim import __version__
from addrsim.backends.z3_run import WALLCLOCK_NOTE
from addrsim.prove.verdict import Counterexample, ReplayFailure, Witness

SCHEMA = 3
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


def _well_formed(value) -> bool:
    """The shapes the prover stores: a decision tuple (answer, model, reason, minimal, SMT-LIB2,
    resource units) or a loop decision (answer, model, reason, resource units), an int-mode answer, a witness model (a dict)
    or its absence, a replay (Counterexample, Witness, ReplayFailure), an unsat core ("core", texts or None),
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
    return (isinstance(value, tuple) and len(value) in (4, 6) and value[0] in ("proved", "refuted", "unknown")
            and (value[1] is None or isinstance(value[1], dict)) and isinstance(value[-1], int))


def _checksum(key_text: str, value_text: str) -> str:
    return hashlib.blake2b((key_text + "\0" + value_text).encode(), digest_size=8,
                           key=code_digest().encode()).hexdigest()


class Store(dict):
    """A query cache; with ``path``, what is set is also appended to that JSON-lines file and
    what the file holds is read first."""

    def __init__(self, path: Optional[Path] = None):
        super().__init__()
        self.path = path
        self.loaded = 0
        self._earlier = set()
        if path is not None:
            try:
                if path.exists():
                    self._load(path)
            except OSError:
                self.path = None   # unreadable (a folder, no permission): in memory only

    def _load(self, path: Path) -> None:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                    k, v = json.dumps(rec["k"], separators=(",", ":")), json.dumps(rec["v"], separators=(",", ":"))
                    if rec.get("c") != _checksum(k, v):
                        continue
                    key, value = _dec(rec["k"]), _dec(rec["v"])
                    if not _well_formed(value):
                        continue
                    super().__setitem__(key, value)
                    self._earlier.add(key)
                    self.loaded += 1
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue       # a torn or edited line: the entry is decided again

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
        line = '{"k":' + k + ',"v":' + v + ',"c":"' + _checksum(k, v) + '"}\n'
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


def open_store(directory) -> Store:
    """The store in ``directory`` (created), or an in-memory one when ``directory`` is None or
    cannot be created."""
    if directory is None:
        return Store()
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except OSError:
        return Store()
    return Store(store_path(directory))


def default_dir() -> Optional[Path]:
    """``$ADDRSIM_CACHE/queries`` (default ``~/.cache/addrsim/queries``); None when
    ``$ADDRSIM_NO_CACHE`` is set (the tests set it: their verdicts must not depend on an
    earlier run)."""
    if os.environ.get("ADDRSIM_NO_CACHE"):
        return None
    return Path(os.environ.get("ADDRSIM_CACHE", Path.home() / ".cache" / "addrsim")) / "queries"

