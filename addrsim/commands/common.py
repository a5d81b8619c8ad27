"""What the CLI commands share: the argument parser, common options, output checks, emitting.

Owns :class:`Parser` (usage errors are one line, exit 3), the option types, :func:`add_common`,
:func:`check_output`, :func:`check_outputs`, :func:`emit`, :func:`smt_dir`, :func:`fail` and the key of a
kernel's whole report in the query cache (:func:`report_key`, read back by verify and scan).
May import addrsim.errors, addrsim.loader and addrsim.model.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import List, Optional

from addrsim.errors import EXIT_BAD_INPUT, AddrsimError, InputError
from addrsim.files import atomic_open


#: Most worker processes of ``--jobs`` (verify, scan); each holds its models and Z3.
MAX_JOBS = 256

class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, exit 3
        sys.stderr.write(f"addrsim: {message}\n")
        sys.exit(EXIT_BAD_INPUT)


class Once(argparse.Action):
    """An option that takes one value: given twice with two values it is bad input (exit 3),
    never the last one silently (``repro --buffer lse --buffer d`` wrote D's script); the same
    value twice is that value."""

    def __call__(self, parser, namespace, values, option_string=None):
        prev = getattr(namespace, self.dest, None)
        if prev is not None and prev != self.default and prev != values:
            parser.error(f"{option_string} given twice ({prev}, {values}): this command takes one")
        setattr(namespace, self.dest, values)


def bound_arg(text: str):
    """NAME=MIN:MAX (a --bound)."""
    try:
        name, rng = text.split("=", 1)
        lo, hi = rng.split(":", 1)
        return name.strip(), (int(lo), int(hi))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=MIN:MAX, got {text!r}") from None



def bounds_of(args) -> dict:
    """The --bound options as name -> (min, max).  Raises InputError when a name is bounded
    twice (the later one would silently replace the earlier) or a range is empty."""
    out = {}
    for name, (lo, hi) in getattr(args, "bound", None) or []:
        if name in out:
            raise InputError("--bound", f"{name} is bounded twice ({name}={out[name][0]}:{out[name][1]} and "
                                        f"{name}={lo}:{hi}): give one range")
        if lo > hi:
            raise InputError("--bound", f"{name}={lo}:{hi} is an empty range (MIN > MAX)")
        out[name] = (lo, hi)
    return out


def props_arg(text: str):
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in ("address", "bounds")]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"expected address, bounds or address,bounds, got {text!r}")
    return out


class _MergedProps(argparse.Action):
    """``--check`` given more than once: the union of the lists, in the order first named
    (``--check bounds --check address`` checks both; each occurrence once replaced the last)."""

    def __call__(self, parser, namespace, values, option_string=None):
        now = getattr(namespace, self.dest)
        have = [] if now is self.default else list(now)        # the first --check replaces the default
        setattr(namespace, self.dest, have + [v for v in values if v not in have])


def add_common(sp, checks_default: str):
    """Options of verify, scan and diff for the properties, the arithmetic, device memory,
    the query cache and solver hygiene."""
    sp.add_argument("--cache-dir", metavar="DIR", default=None,
                    help="the query cache: decided queries and replays, kept between runs and shared by "
                         "workers (default $ADDRSIM_CACHE/queries, i.e. ~/.cache/addrsim/queries)")
    sp.add_argument("--no-cache", action="store_true", help="decide every query again (no query cache)")
    sp.add_argument("--check", type=props_arg, default=props_arg(checks_default), metavar="PROPS", action=_MergedProps,
                    help="properties, comma-separated: address (slice bases against the model), bounds (every "
                         f"checked access inside its allocation and the V#'s num_records); default {checks_default}")
    sp.add_argument("--arith", choices=("bv", "int"), default="bv",
                    help="bv: hardware arithmetic (32-bit registers, 64-bit pairs, the host's u32 casts); "
                         "int: unbounded integers (default bv)")
    sp.add_argument("--memory-gib", type=float, default=None, metavar="GIB",
                    help="device memory that every tensor must fit in (default: 192 for gfx942, 288 for gfx950)")
    sp.add_argument("--host", metavar="NAME", default=None,
                    help="the host model that launches the kernels (default: chosen by the argument ABI; "
                         "aiter-0.1.7.post2.dev18 or aiter-e4048607)")
    sp.add_argument("--routed", action="store_true",
                    help="decide the verdict with the host's routing in the domain (default: the kernel's own "
                         "verdict, routing reported beside it)")
    sp.add_argument("--smt-dir", metavar="DIR", default=None,
                    help="where undecided obligations are written as SMT-LIB2 (default: addrsim-smt2 next to "
                         "--json/--sarif/--junit; none when the run only prints)")


def add_budgets(sp, query_mru: float, check_mru: float, min_mru: float) -> None:
    """The solver budgets, in Mru (millions of Z3 resource units: the same answer on any
    machine at any load), and ``--timeout`` (nominal ms, converted at
    :data:`addrsim.prove.options.MRU_PER_S`; kept for older scripts)."""
    sp.add_argument("--query-budget", type=float, default=None, metavar="MRU",
                    help=f"resource units (millions) of one solver call (default {query_mru:g})")
    sp.add_argument("--check-budget", type=float, default=None, metavar="MRU",
                    help=f"resource units (millions) of one kernel x buffer x layout check: no query starts once "
                         f"they are spent, the verdict is then unknown (default {check_mru:g})")
    sp.add_argument("--min-budget", type=float, default=None, metavar="MRU",
                    help=f"resource units (millions) spent minimising each counterexample (0: report the first "
                         f"found; default {min_mru:g})")
    sp.add_argument("--timeout", type=int, default=None, metavar="MS",
                    help="the query budget written as nominal milliseconds (converted to resource units; the run "
                         "never reads the clock)")
    sp.set_defaults(budget_defaults=(query_mru, check_mru, min_mru))


def budgets_of(args) -> dict:
    """Options keywords of the budgets given to :func:`add_budgets` (Mru wins over --timeout)."""
    q, c, m = args.budget_defaults
    out = {"query_mru": args.query_budget, "check_mru": args.check_budget if args.check_budget is not None else c,
           "min_mru": args.min_budget if args.min_budget is not None else m}
    if args.query_budget is None and args.timeout is not None:
        out["timeout_ms"] = args.timeout
    elif args.query_budget is None:
        out["query_mru"] = q
    return out


def check_output(path: Optional[str], what: str) -> None:
    """An output file must be creatable: its folder exists and is writable, and it is not a
    folder itself.  Raises InputError (checked before any work is done)."""
    import os
    if not path or path == "-":
        return
    if path.endswith(os.sep) or os.path.isdir(path):
        raise InputError(path, f"{what}: is a directory, not a file")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        raise InputError(path, f"{what}: cannot write here (folder {d} missing or not writable)")


def check_outputs(args, flags) -> None:
    """Every output of ``flags`` ((attribute, option) pairs of ``args``) can be created
    (:func:`check_output`), no two name one file, and none is a file the command reads (any
    other option or argument naming an existing file: the kernel, a model, --like,
    --accepted, --baseline ...).  Raises InputError before any work is done."""
    import os
    outs = [(getattr(args, a, None), opt) for a, opt in flags]
    outs = [(p, opt) for p, opt in outs if p and p != "-"]
    for p, opt in outs:
        check_output(p, opt)
    seen = {}
    for p, opt in outs:
        real = os.path.realpath(p)
        if real in seen:
            raise InputError(p, f"{opt}: the same file as {seen[real]}: one output would overwrite the other")
        seen[real] = opt
    taken = {a for a, _ in flags}
    for name, value in vars(args).items():
        if name in taken:
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, str) and os.path.isfile(v) and os.path.realpath(v) in seen:
                raise InputError(v, f"{seen[os.path.realpath(v)]}: is an input of this command (would be overwritten)")


def emit(report: dict, json_path: Optional[str], text) -> Optional[int]:
    """Write ``report`` as JSON to stdout (``json_path`` "-") or print ``text()`` and also
    write the JSON to ``json_path``; EXIT_BAD_INPUT when that file cannot be written."""
    if json_path == "-":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return None
    print(text())
    if json_path:
        try:
            with atomic_open(json_path, "w") as fh:
                json.dump(report, fh, indent=2)
        except OSError as e:
            sys.stderr.write(f"addrsim: {json_path}: cannot write ({e.strerror})\n")
            return EXIT_BAD_INPUT
    return None


def smt_dir(args) -> Optional[str]:
    """The folder of undecided obligations (absolute, so that scan's report cache keys one
    folder by one name): --smt-dir, else ``addrsim-smt2`` next to the --json, --sarif or
    --junit file the user asked for; None (nothing written) when no file output was asked for:
    a run that only prints writes nothing into the working directory (issue 40)."""
    import os
    if args.smt_dir:
        return os.path.abspath(args.smt_dir)
    for f in (getattr(args, "json", None), getattr(args, "sarif", None), getattr(args, "junit", None)):
        if f and f != "-":
            return os.path.join(os.path.dirname(os.path.abspath(f)), "addrsim-smt2")
    return None


def fail(e) -> int:
    """Report an AddrsimError as one line on stderr; its ``exit_code`` (EXIT_BAD_INPUT, or 2
    for a kernel no family models)."""
    sys.stderr.write(f"addrsim: {e}\n")
    return getattr(e, "exit_code", EXIT_BAD_INPUT)


class _Bar:
    """A tqdm bar on stderr driven by ``progress(done, total, label)`` callbacks."""

    def __init__(self, desc: str, unit: str):
        from tqdm import tqdm
        self.bar = tqdm(total=0, desc=desc, unit=unit, leave=False, file=sys.stderr)

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.bar.total != total:
            self.bar.total = total
        self.bar.set_postfix_str(label[-60:], refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def progress_bar(args, desc: str, unit: str):
    """A progress bar on stderr (with an estimate of the time left) when stderr is a terminal
    or ``--progress`` is given, and not ``--quiet``; None otherwise."""
    if getattr(args, "quiet", False) or not (getattr(args, "progress", False) or sys.stderr.isatty()):
        return None
    return _Bar(desc, unit)


def query_store(args):
    """The query cache of ``args`` (:func:`addrsim.prove.store.open_store`): ``--cache-dir``, else
    the default; an in-memory one with ``--no-cache`` or ``$ADDRSIM_NO_CACHE``."""
    from addrsim.prove.store import default_dir, open_store
    if getattr(args, "no_cache", False):
        return open_store(None)
    return open_store(args.cache_dir or default_dir())


def cache_dir_of(args):
    """The cache folder the workers of ``scan`` open (None: in memory only)."""
    from addrsim.prove.store import default_dir
    if getattr(args, "no_cache", False):
        return None
    return args.cache_dir or default_dir()


def report_key(path, like, buffers, layouts, ms, bounds, budgets, opts, label=None) -> Optional[str]:
    """The key of a kernel's whole report in the query cache: BLAKE2b over ``label`` (the
    file's stable name: its path, or ``WHEEL!member`` for a wheel member, whose extracted path
    is a fresh temporary folder each run) and the bytes of the code object (and of the one
    whose metadata a listing takes), of every model file read *in load order* (a later file's
    layout or family replaces an earlier one of the same name), of each host evidence file
    beside the code object (or its absence: it chooses the host), the llvm-objdump that
    decodes them (path and version) and every setting of the scan.  A report is a function of
    these (budgets are resource units; addrsim's own code is in the store's file name,
    :func:`addrsim.prove.store.store_path`), so a rerun over unchanged kernels reads it back
    without exploring the kernel.  None when a file cannot be read or is not a regular file."""
    from addrsim.loader.disasm import find_objdump
    h = hashlib.blake2b(b"report 2", digest_size=20)
    h.update(str(label if label is not None else path).encode())
    try:
        for n, f in enumerate([path, like] + list(ms.files)):
            if f and not Path(f).is_file():      # a FIFO or a device: never read here (it may block)
                return None
            # the code object by its bytes alone: ``label`` names it (a wheel member's extracted
            # path changes every run, and with it every key: a warm wheel scan explored again)
            h.update(b"\0" + (str(f).encode() if n else b"") + b"\0" + (Path(f).read_bytes() if f else b"-"))
        for f in evidence_files(path, like, ms):
            h.update(b"\0" + f.name.encode() + b"\0" + (f.read_bytes() if f.is_file() else b"absent"))
        h.update(repr(find_objdump()).encode())
    except (OSError, AddrsimError):
        return None
    h.update(json.dumps([sorted(buffers) if buffers else None, list(layouts), bounds, budgets, opts],
                        sort_keys=True, default=repr).encode())
    return "report:" + h.hexdigest()


def evidence_files(path, like, ms) -> List[Path]:
    """The host evidence files (:func:`addrsim.model.hosts.choose_host`) that may lie beside
    the code object or the one a listing takes, present or not."""
    names = sorted({ev for h in ms.hosts for ev in (h.get("evidence") or [])})
    folders = [Path(f).parent for f in (path, like) if f]
    return [d / n for d in folders for n in names]


def _files_kept(rep: dict) -> bool:
    """Every SMT-LIB2 file a stored report names (an undecided obligation) is still there."""
    return all(Path(p).exists() for p in _SMT_PATH.findall(json.dumps(rep)))


_SMT_PATH = re.compile(r"obligation written to ([^)\"]+\.smt2)")


def _repathed(rep: dict, path: str) -> dict:
    """A stored report with its file named ``path`` (a wheel member's extracted path changes
    each run), marked cached."""
    old = {k.get("file") for k in rep["kernels"]} - {None, path}
    if old:
        text = json.dumps(rep)
        for o in old:
            text = text.replace(json.dumps(o)[1:-1], json.dumps(path)[1:-1])
        rep = json.loads(text)
    return dict(rep, kernels=[dict(k, cached=True) for k in rep["kernels"]])


def stored_report(cache, key: Optional[str], path) -> Optional[dict]:
    """The report an earlier run stored under ``key`` (:func:`report_key`, or a pair from
    :func:`report_keys`), its file named ``path`` and each kernel marked cached; None when
    there is none or an SMT-LIB2 file it names is gone.  With a pair, the key without the
    obligations folder is asked first and serves only a report that names no obligation."""
    if isinstance(key, tuple):
        hit = stored_report(cache, key[0], path)
        if hit is not None and smt_free(hit):
            return hit
        return stored_report(cache, key[1], path)
    hit = cache.get(key) if key is not None else None
    if hit is None or not _files_kept(hit[1]):
        return None
    return _repathed(hit[1], str(path))


def report_keys(path, like, buffers, layouts, ms, bounds, budgets, settings: dict, label=None):
    """(key without the obligations folder, key with it) of :func:`report_key`: a report in
    which no check was left with an obligation (nothing undecided) does not depend on where
    obligations would be written, so ``verify K`` and ``verify K --json r.json`` (whose
    obligations go beside r.json) share it (a fresh-user trial: adding --json decided every
    query again, 35 s instead of 0.5 s)."""
    without = {k: v for k, v in settings.items() if k != "smt_dir"}
    return (report_key(path, like, buffers, layouts, ms, bounds, budgets, without, label),
            report_key(path, like, buffers, layouts, ms, bounds, budgets, settings, label))


def store_report(cache, keys, rep: dict) -> None:
    """Store ``rep`` under the key of :func:`report_keys` it may be read back by: the one
    without the obligations folder when it names no obligation, else the full one."""
    key = keys[0] if smt_free(rep) else keys[1]
    if key is not None:
        cache[key] = ("report", rep)


def smt_free(rep: dict) -> bool:
    """Does the report name no obligation: no check undecided with its SMT-LIB2 written, or
    with the hint to write it (the only text the obligations folder changes)?"""
    text = json.dumps(rep)
    return "obligation written to" not in text and "writes the obligation as SMT-LIB2" not in text \
        and '"smt2":' not in text and "obligation not written" not in text
