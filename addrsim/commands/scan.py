"""``addrsim scan``: every buffer of every kernel in a corpus of code objects, for every layout.

Inputs are code-object files, directory trees (every ``*.co`` below them), aiter wheels
(``*.whl``: the ``*.co`` members are extracted to a temporary directory) or, with
``aiter=True``, the kernels of the aiter installed in this Python.  A code object whose
kernels no kernel family of the models describes is listed as skipped, not checked: a
verdict needs the host contract.

Kernels are checked in worker processes (``jobs``); each worker keeps a cache of decided
queries (:func:`addrsim.prove.check`), so sibling kernels that compute the same addresses
(rounding variants, fp16/bf16) are decided once per worker.  Where a folder holds aiter's
``fmha_bwd_dqdkdv.csv`` (columns dtype, hdim_q, hdim_v, mask, atomic32, pssk, pddv, mode,
bf16_cvt, ts_qo, ts, knl_name, co_name), each kernel's report lists the runtime
configurations the table routes to it.
"""
from __future__ import annotations

import re
import tempfile
import zipfile
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from addrsim import __version__
from addrsim.errors import InputError
from addrsim.loader.listing import is_code_object, load_source
from addrsim.loader.routing import read_rows
from addrsim.loader import codeobj
from addrsim.loader.codeobj import SUPPORTED_ARCHS
from addrsim.model.models import ModelSet, choose_family, load_models
import json
import sys

from addrsim.api import DEFAULT_LAYOUTS, EXIT_LATENT, exit_status
from addrsim.commands.common import (report_keys, store_report, stored_report, EXIT_BAD_INPUT, MAX_JOBS, add_budgets, add_common, bound_arg, bounds_of, budgets_of,
                                     cache_dir_of, check_outputs, smt_dir)
from addrsim.errors import EXIT_INTERNAL, EXIT_UNKNOWN, AddrsimError, unknown_name
from addrsim.files import atomic_open
from addrsim.prove.options import MIN_MRU
from addrsim.prove.verdict import Verdict
from addrsim.report.causes import check_name, root_causes, smallest_check, summary_line, undecided_groups
from addrsim.report.gate import kernel_label, shown, gate, gate_status, gate_text, load_accepted, load_baseline

SCAN_QUERY_MRU = 3.0    # a CI gate over hundreds of kernels: smaller budgets than verify's.  Tried
SCAN_CHECK_MRU = 20.0   # 2026-12-03: verify's 10/60 decide K, V and dO SBHD of the README kernel
                        # (unknown here) at the same time for that kernel, but the 24 pinned wheel
                        # kernels took more than 46 min with --jobs 2 (9 min at 3/10 on 2026-11-30):
                        # the checks that stay unknown spend six times more.  20, not 10: a
                        # group-mode LSE check has 17 accesses of about 1 Mru each to prove
                        # (gfx950 hd64 a32_rtna_pssk_group: 9 proved when 10 Mru ran out)
SCAN_MIN_MRU = MIN_MRU  # as verify's: with the wrap cover every counterexample of aiter-e4048607's
                        # gfx942 a16_rtne kernel is proven minimal at 6 Mru (5 of 17 at 1 Mru)

ROUTING_CSV = "fmha_bwd_dqdkdv.csv"


@dataclass
class Corpus:
    """Code objects to scan: ``files`` (paths), ``skipped`` (path, reason), ``routes``
    (code-object basename -> list of configuration dicts from a routing table)."""

    files: List[str] = field(default_factory=list)
    skipped: List[Tuple[str, str]] = field(default_factory=list)
    routes: Dict[str, List[dict]] = field(default_factory=dict)
    tables: List[str] = field(default_factory=list)
    family: Dict[str, str] = field(default_factory=dict)      # file -> kernel family name
    like: Dict[str, str] = field(default_factory=dict)        # listing file -> code object (--like)
    origin: Dict[str, str] = field(default_factory=dict)      # extracted wheel member -> WHEEL!member
    tmpdir: Optional[tempfile.TemporaryDirectory] = None


def installed_aiter_dirs() -> List[Path]:
    """Directories of the aiter installed in this Python that may hold code objects
    (``aiter`` and ``aiter_meta`` packages).  Raises InputError when aiter is not installed."""
    import importlib.util
    out = []
    for name in ("aiter_meta", "aiter"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            out += [Path(p) for p in spec.submodule_search_locations]
    if not out:
        raise InputError("--aiter", "no aiter package is installed in this Python")
    return out


def collect(inputs: Sequence[str], ms: ModelSet, aiter: bool = False, like=None) -> Corpus:
    """Expand ``inputs`` into the code objects and listings to scan: directories (every
    ``*.co`` below), wheels, and files (code objects or assembly listings; ``like`` is the
    code object the listings take their metadata from, :mod:`addrsim.loader.listing`).  Raises
    InputError for a missing path or an unreadable wheel."""
    c = Corpus()
    paths: List[Path] = []
    roots = [Path(p) for p in inputs] + (installed_aiter_dirs() if aiter else [])
    for p in roots:
        if not p.exists():
            raise InputError(p, "no such file or directory")
        if p.is_dir():
            paths += sorted(p.rglob("*.co"))
            c.tables += [str(t) for t in sorted(p.rglob(ROUTING_CSV))]
        elif p.suffix == ".whl":
            if not p.is_file():
                raise InputError(p, "not a regular file")
            if c.tmpdir is None:
                c.tmpdir = tempfile.TemporaryDirectory(prefix="addrsim-whl-")
            dest = Path(c.tmpdir.name) / p.stem
            extract_wheel(p, dest)
            for m in dest.rglob("*.co"):
                c.origin[str(m)] = f"{p.resolve()}!{m.relative_to(dest).as_posix()}"
            paths += sorted(dest.rglob("*.co"))
            c.tables += [str(t) for t in sorted(dest.rglob(ROUTING_CSV))]
        else:
            paths.append(p)
    for p in paths:
        if not Path(p).is_file():        # a FIFO, device or folder named as an input: never opened
            if len(roots) == 1 and roots[0] == p:
                raise InputError(p, "not a regular file")
            c.skipped.append((str(p), "not a regular file"))
            continue
        listing = not is_code_object(p)
        try:
            # a code object's metadata is enough to choose (3 ms; its disassembly, done by the
            # worker that scans it, is 0.2 s: the wheel has 2501 code objects, 215 of them
            # fmha_v3_bwd); a listing needs llvm-mc to know its kernels
            co = load_source(p, like).co if listing else codeobj.load(p)
        except InputError as e:
            if len(roots) == 1 and roots[0] == p:
                raise
            c.skipped.append((str(p), e.problem))
            continue
        if co.arch not in SUPPORTED_ARCHS:
            c.skipped.append((str(p), f"architecture {co.arch} is not supported ({', '.join(SUPPORTED_ARCHS)})"))
            continue
        if not co.kernels or not all(choose_family(ms, k, co.arch) for k in co.kernels):
            c.skipped.append((str(p), "no kernel family in the models describes its kernels"))
            continue
        c.files.append(str(p))
        if listing and like is not None:
            c.like[str(p)] = str(like)
        c.family[str(p)] = f"{co.arch}:{choose_family(ms, co.kernels[0], co.arch)['name']}"
    for t in c.tables:
        c.routes.update(read_routes(t))
    return c


#: Largest wheel member extracted (bytes): aiter's largest code object is under 2 MiB.
MAX_MEMBER = 64 << 20
#: Largest total extracted from one wheel (bytes): the kernels of a wheel are about 400 MiB.
MAX_WHEEL = 2 << 30


def _wanted(n: str) -> bool:
    # the host's own files travel with the kernels: they are the evidence of which host
    # launches them (models: hosts.evidence)
    return n.endswith(".co") or n.endswith("/" + ROUTING_CSV) or n.endswith("/fmha_v3_bwd/codegen.py")


def extract_wheel(p: Path, dest: Path) -> None:
    """Extract the code objects and host files of wheel ``p`` into ``dest``.  Raises InputError
    for an unreadable wheel, a member whose declared size passes :data:`MAX_MEMBER` or that
    expands past what it declares, or members passing :data:`MAX_WHEEL` in all: a zip bomb is
    refused before anything is written, and the copy is bounded while it runs."""
    try:
        with zipfile.ZipFile(p) as z:
            members = [i for i in z.infolist() if _wanted(i.filename) and not i.is_dir()]
            for i in members:
                if i.file_size > MAX_MEMBER:
                    raise InputError(p, f"member {i.filename} expands to {i.file_size} bytes (more than "
                                        f"{MAX_MEMBER >> 20} MiB): refused")
            if sum(i.file_size for i in members) > MAX_WHEEL:
                raise InputError(p, f"its kernels expand to more than {MAX_WHEEL >> 30} GiB: refused")
            for i in members:
                target = dest / i.filename
                if dest.resolve() not in target.resolve().parents:
                    raise InputError(p, f"member {i.filename} lies outside the wheel's folder: refused")
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(i) as src, open(target, "wb") as out:
                    left = i.file_size + 1
                    while True:
                        chunk = src.read(min(1 << 20, left))
                        if not chunk:
                            break
                        left -= len(chunk)
                        if left <= 0:
                            raise InputError(p, f"member {i.filename} expands past its declared size: refused")
                        out.write(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, NotImplementedError,
            zlib.error) as e:
        raise InputError(p, f"cannot read the wheel ({e})") from None


def read_routes(path: str) -> Dict[str, List[dict]]:
    """aiter's routing table: code-object basename -> configurations (column -> value,
    without the name columns).  Raises InputError for a table without ``co_name``."""
    out: Dict[str, List[dict]] = {}
    rows = read_rows(path)
    if rows and "co_name" not in rows[0]:
        raise InputError(path, "routing table has no co_name column")
    arch = Path(path).parent.parent.name
    for r in rows:
        cfg = {k: v for k, v in r.items() if k not in ("knl_name", "co_name") and k is not None}
        out.setdefault(f"{arch}/{r['co_name']}", []).append(cfg)
        out.setdefault(r["co_name"], []).append(cfg)
    return out


# ----------------------------------------------------------------------------- workers

_WORKER: dict = {}


def _init_worker(model_files, bounds, budgets, options=None):
    from addrsim.model.models import load_models as _lm
    from addrsim.prove.store import open_store
    options = dict(options or {})
    _WORKER.update(ms=_lm(model_files), bounds=bounds, budgets=dict(budgets),
                   cache=open_store(options.pop("cache_dir", None)), options=options)


def _scan_group(paths, buffers, layouts):
    return [(p, _scan_one(p, buffers, layouts)) for p in paths]


def _scan_one(path, buffers, layouts):
    from addrsim.api import verify
    w = _WORKER
    opts = dict(w["options"])
    like = opts.pop("likes", {}).get(path)
    label = opts.pop("origins", {}).get(path, path)
    key = report_keys(path, like, buffers, layouts, w["ms"], w["bounds"], w["budgets"], opts, label)
    hit = stored_report(w["cache"], key, path)
    rejected = getattr(w["cache"], "rejected", 0)
    if hit is not None:
        # an earlier run's report of the same bytes, models and settings (its times are that
        # run's); a wheel member was extracted to another temporary folder then
        return dict(hit, cache_rejected=rejected, cache_note=getattr(w["cache"], "note", ""))
    try:
        rep = verify(path, buffers, layouts, models=w["ms"], bounds=w["bounds"], cache=w["cache"],
                     like=like, require_buffers=False, **w["budgets"], **opts)
    except AddrsimError as e:
        return _failed(e.exit_code, str(e))
    except Exception as e:          # a bug of addrsim on this kernel: the scan goes on, and exits 4
        return _failed(EXIT_INTERNAL, f"{path}: internal error: {type(e).__name__}: {e}")
    store_report(w["cache"], key, rep)
    return dict(rep, cache_rejected=rejected, cache_note=getattr(w["cache"], "note", ""))


def _failed(code: int, error: str) -> dict:
    """The report of a kernel that could not be checked: no kernels, ``error``, exit ``code``."""
    return {"tool": "addrsim", "version": __version__, "error": error, "kernels": [], "exit": code}


def _pooled(groups, jobs, init, buffers, layouts, reports, bar) -> List[str]:
    """Scan ``groups`` (lists of files, one task each) in ``jobs`` worker processes, filling
    ``reports``; returns the files of the groups whose results never came because a worker
    died (killed for memory: a 2026-12-06 cold wheel scan lost 77 minutes and every result
    that way)."""
    lost: List[str] = []
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=init) as ex:
        futs = {ex.submit(_scan_group, g, buffers, layouts): g for g in groups}
        for fut in as_completed(futs):
            try:
                done = fut.result()
            except BrokenProcessPool:
                lost += futs[fut]
                continue
            for f, r in done:
                reports[f] = r
                if bar:
                    bar.update(1)
    return lost


def _alone(path, init, buffers, layouts) -> dict:
    """The report of ``path`` scanned in a worker of its own, after a worker died: a kernel
    done before reads its report from the query cache; the one that kills this worker too gets
    an internal error naming it (the scan goes on, and exits 4)."""
    try:
        with ProcessPoolExecutor(max_workers=1, initializer=_init_worker, initargs=init) as ex:
            return ex.submit(_scan_group, [path], buffers, layouts).result()[0][1]
    except BrokenProcessPool:
        return _failed(EXIT_INTERNAL, f"{path}: internal error: the worker process checking it died (killed for memory?)")


def scan(corpus: Corpus, buffers: Optional[Sequence[str]], layouts: Sequence[str], model_files: Sequence[str] = (),
         bounds=None, budgets: Optional[dict] = None, jobs: int = 1,
         progress: bool = False, arith: str = "bv",
         memory_gib: Optional[float] = None, smt_dir: Optional[str] = None,
         properties: Sequence[str] = ("address",), host: Optional[str] = None, routed: bool = False,
         cache_dir=None) -> List[dict]:
    """Verify every file of ``corpus`` (see :func:`addrsim.api.verify`, which documents
    ``arith``, ``memory_gib`` and ``smt_dir``); reports in the order of ``corpus.files``, each
    kernel annotated with its routed configurations.  ``budgets``: Options keywords of the
    solver budgets (default: SCAN_QUERY_MRU, SCAN_CHECK_MRU, SCAN_MIN_MRU)."""
    budgets = dict(budgets or {"query_mru": SCAN_QUERY_MRU, "check_mru": SCAN_CHECK_MRU, "min_mru": SCAN_MIN_MRU})
    options = {"arith": arith, "memory_gib": memory_gib, "smt_dir": smt_dir, "properties": tuple(properties),
               "likes": dict(corpus.like), "origins": dict(corpus.origin), "host": host, "routed": routed, "cache_dir": cache_dir}
    reports: Dict[str, dict] = {}
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(corpus.files), unit="co", desc="addrsim scan", leave=False)
    if jobs <= 1:
        _init_worker(list(model_files), bounds, budgets, options)
        for f in corpus.files:
            reports[f] = _scan_one(f, buffers, layouts)
            if bar:
                bar.update(1)
    else:
        # one task per kernel family: siblings share a worker and its cache of decided queries
        groups: Dict[str, List[str]] = {}
        for f in corpus.files:
            groups.setdefault(corpus.family.get(f, f), []).append(f)
        init = (list(model_files), bounds, budgets, options)
        lost = _pooled(sorted(groups.values(), key=len, reverse=True), jobs, init, buffers, layouts, reports, bar)
        for f in lost:
            reports[f] = _alone(f, init, buffers, layouts)
            if bar:
                bar.update(1)
    if bar:
        bar.close()
    out = []
    shared = len(corpus.like) > 1       # listings of one code object: each is named by its own file
    for f in corpus.files:
        r = reports[f]
        arch = None
        for k in r.get("kernels", []):
            arch = k.get("arch")
            if shared and f in corpus.like:
                k["named_as"] = "listing"
            key = f"{arch}/{Path(f).name}"
            if corpus.tables:
                k["routes"] = corpus.routes.get(key, corpus.routes.get(Path(f).name, []))
        out.append(r)
    return out


# ----------------------------------------------------------------------------- summary

MARK = {Verdict.PROVED: "ok", Verdict.COUNTEREXAMPLE: "CEX", Verdict.UNKNOWN: "?", Verdict.UNSUPPORTED: "unsup",
        Verdict.UNREACHABLE: "unr"}


def summary(reports: List[dict], corpus: Corpus, layouts: Sequence[str]) -> str:
    """The text summary: one line per kernel with its verdicts per buffer and layout,
    then each counterexample with its minimal shape, then totals."""
    lines = []
    counts: Dict[str, int] = {}
    for r in reports:
        if r.get("error"):
            lines.append(f"ERROR {r['error']}")
            continue
        for k in r["kernels"]:
            by_buf: Dict[str, Dict[str, str]] = {}
            for c in k["checks"]:
                tag = c["buffer"] + ("[bounds]" if c.get("property") == "bounds" else "")
                by_buf.setdefault(tag, {})[c["layout"]] = c["verdict"]
                counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
                if c["verdict"] == Verdict.COUNTEREXAMPLE:
                    kind = {True: "reachable", False: "latent"}.get((c.get("routing") or {}).get("reachable"),
                                                                     "routing unknown")
                    counts[f"counterexample ({kind})"] = counts.get(f"counterexample ({kind})", 0) + 1
            cells = []
            for b, v in by_buf.items():
                cells.append(f"{b}:" + "/".join(MARK.get(v.get(l, ""), "-") for l in layouts))
            name = kernel_label(k)
            lines.append(f"{name:60s} {' '.join(cells)}")
    out = [f"verdicts per buffer, layouts {'/'.join(layouts)}  (ok proved, CEX counterexample, ? unknown, "
           f"unsup unsupported, unr unreachable)"]
    out += lines
    out.append("(findings by root cause follow, each once across kernels; --json has every check in full)")
    out += findings_text([k for r in reports for k in r.get("kernels", [])], corpus)
    limits = [(k, lim) for r in reports for k in r.get("kernels", []) for lim in k.get("host_limits") or []]
    if limits:
        out.append("")
        distinct = len({(k.get("host"), lim["argument"], lim["layout"], lim["boundary"]) for k, lim in limits})
        out.append(f"host limits (the host's u32 casts; not kernel counterexamples): {distinct} distinct, "
                   f"{len(limits)} over the kernels")
        seen = set()
        for k, lim in limits:
            key = (k.get("host"), lim["argument"], lim["layout"], lim["boundary"])
            if key in seen:
                continue
            seen.add(key)
            n = sum(1 for _, l2 in limits if (l2["argument"], l2["layout"], l2["boundary"]) == key[1:])
            out.append(f"  {lim['argument']} ({lim['layout']}): {lim['boundary']} [{n} kernel(s), host {k.get('host')}]")
    if corpus.skipped:
        out.append("")
        out.append(f"skipped {len(corpus.skipped)} code object(s):")
        for p, why in corpus.skipped[:20]:
            out.append(f"  {p}: {why}")
    out.append("")
    out.append(_totals(counts, reports))
    return "\n".join(out)


def _kernel_findings(k: dict, corpus: Corpus) -> Tuple[List[str], List[List[str]], List[str]]:
    """A kernel's findings: (its summary line, or nothing when it has no finding; one block of
    lines per root cause: title, checks, smallest shape, reach, the boundary per layout, gate
    marks, routing; the reason of every check left undecided)."""
    causes = [rc for rc in (k.get("root_causes") or root_causes(k)) if rc["checks"]]
    undecided = {key: [check_name(c) for c in cs] for key, cs in undecided_groups(k).items()}
    if not causes and not undecided:
        return [], [], []
    head = ["", f"{kernel_label(k)}: {k.get('summary') or summary_line(k)}"]
    blocks = []
    for rc in causes:
        sm = rc["smallest"]
        shape = " ".join(f"{a}={b}" for a, b in sm["shape"].items() if not a.startswith("total_"))
        mark = "" if sm.get("minimal", True) else " (not proven minimal)"
        out = [f"{rc['title']}",
               f"      breaks {', '.join(rc['checks'])}; smallest {shape} ({sm['check']}){mark}; {rc['reach']}"]
        out += [f"      boundary ({lay}): {b}" for lay, b in (rc.get("boundary") or {}).items()]
        out += _marks(k, rc)
        rt = (smallest_check(k, rc) or {}).get("routing") or {}
        if rt.get("reachable") is False:
            out.append(f"      LATENT under {rt.get('host')}: masked by {'; '.join(rt.get('masked_by') or [])}")
        if corpus.tables:
            routes = k.get("routes") or []
            cfgs = "; ".join(",".join(f"{a}={b}" for a, b in cfg.items()) for cfg in routes[:4])
            out.append(f"      routed from: {cfgs}" if routes else f"      no configuration in {ROUTING_CSV} routes to this kernel")
        blocks.append(out)
    rest = [f"  {MARK[verdict]} {verdict} ({', '.join(tags)}): {why}" for (verdict, why), tags in undecided.items()]
    return head, blocks, rest


def findings_text(kernels: List[dict], corpus: Corpus) -> List[str]:
    """Every kernel's summary line and undecided reasons, then each root cause once, with the
    kernels it is found in (identical blocks of sibling kernels fold into one: issue 40)."""
    out: List[str] = []
    folded: Dict[Tuple[str, ...], List[Tuple[str, str]]] = {}
    first: Dict[Tuple[str, ...], List[str]] = {}
    for k in kernels:
        head, blocks, rest = _kernel_findings(k, corpus)
        out += head + rest
        for b in blocks:
            key = tuple(_PC.sub("0x?", line) for line in b)      # a sibling's code may sit some bytes later
            first.setdefault(key, b)
            folded.setdefault(key, []).append((kernel_label(k), b[0]))
    if folded:
        out += ["", f"root causes ({len(folded)}, each once; the kernels it is found in):"]
    for n, (key, found) in enumerate(folded.items(), 1):
        names = [name for name, _ in found]
        shown_names = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        block = first[key]
        moved = [f"{', '.join(_PC.findall(title))} in {name}" for name, title in found if title != block[0]]
        out.append(f"  [{n}] {block[0]}" + (f" ({'; '.join(moved[:4])}" + (" ..." if len(moved) > 4 else "") + ")"
                                            if moved else ""))
        out.append(f"      in {len(names)} kernel(s): {shown_names}")
        out += list(block[1:])
    return out


_PC = re.compile(r"\b0x[0-9a-f]+\b")
"""An instruction address in a root cause's text: sibling kernels fold whatever their code's offset."""


def _written(args) -> str:
    """The output files of a scan, for an error whose file the OS did not name (/dev/full)."""
    return ", ".join(p for p in (args.json, args.sarif, args.junit, args.html) if p and p != "-") or "stdout"


def _marks(k: dict, rc: dict) -> List[str]:
    """The gate's marks of a root cause's checks: new against the baseline, accepted."""
    checks = [c for c in k["checks"] if c["verdict"] == Verdict.COUNTEREXAMPLE and check_name(c) in rc["checks"]]
    new = [check_name(c) for c in checks if c.get("baseline") == "new"]
    out = [f"      NEW since the baseline: {', '.join(new)}"] if new else []
    acc: Dict[str, List[str]] = {}
    for c in checks:
        if c.get("accepted"):
            acc.setdefault(f"entry {c['accepted']['entry']}: {shown(c['accepted']['reason'], 200)}", []).append(
                check_name(c))
    out += [f"      accepted ({why}): {', '.join(tags)}" for why, tags in acc.items()]
    return out


def _totals(counts: Dict[str, int], reports: List[dict]) -> str:
    """The totals line: checks per verdict over the kernels, the counterexamples split by
    routing (``4 counterexample (3 reachable, 1 latent)``), then the caches' notes."""
    cached = sum(1 for r in reports for k in r.get("kernels", []) if k.get("cached"))
    rejected = max((r.get("cache_rejected", 0) for r in reports), default=0)
    reach = ", ".join(f"{counts[f'counterexample ({k})']} {k}" for k in ("reachable", "latent", "routing unknown")
                      if counts.get(f"counterexample ({k})"))
    words = [f"{v} {k}" + (f" ({reach})" if k == Verdict.COUNTEREXAMPLE and reach else "")
             for k, v in sorted(counts.items()) if not k.startswith("counterexample (")]
    return (f"totals over {sum(len(r['kernels']) for r in reports)} kernel(s): " + ", ".join(words) + " (checks)" +
            (f" ({cached} read from the query cache: same code object, models and settings)" if cached else "") +
            (f"; {rejected} query cache line(s) ignored ({REJECTED_WHY})" if rejected else "") +
            "".join(sorted({f"; query cache: {r['cache_note']}" for r in reports if r.get("cache_note")})))


# ----------------------------------------------------------------------------- the command

REJECTED_WHY = "not authenticated by this cache's key, torn, too long or too deep: decided again"


def register(sub) -> None:
    """Add the ``scan`` subcommand to ``sub`` (argparse subparsers)."""
    sc = sub.add_parser("scan", help="check every buffer of every kernel of a corpus, for every layout (CI gate)")
    sc.add_argument("inputs", nargs="*", metavar="DIR_OR_WHEEL_OR_FILE")
    sc.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata the listings among the inputs take")
    sc.add_argument("--aiter", action="store_true", help="also scan the kernels of the aiter installed in this Python")
    sc.add_argument("--buffer", action="append", help="buffer to check (repeatable; default: every modelled buffer)")
    sc.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    sc.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml", help="user layouts file (repeatable)")
    sc.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    sc.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX")
    add_budgets(sc, SCAN_QUERY_MRU, SCAN_CHECK_MRU, SCAN_MIN_MRU)
    add_common(sc, "address")
    sc.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="worker processes")
    sc.add_argument("--json", metavar="FILE", help="write the JSON reports ('-' for stdout)")
    sc.add_argument("--sarif", metavar="FILE", help="write SARIF 2.1.0")
    sc.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    sc.add_argument("--html", metavar="FILE", help="write one self-contained HTML page of the run (no network)")
    sc.add_argument("--baseline", metavar="OLD.json",
                    help="an earlier --json report: fail only on findings it does not have (new, unchanged and "
                         "gone are listed; SARIF baselineState)")
    sc.add_argument("--accepted", metavar="FILE.yaml",
                    help="accepted findings (kernel glob, buffer, layout, property, cause, a required reason, "
                         "optional expires): marked accepted in every output and never failing")
    sc.add_argument("--contracts", action="store_true",
                    help="also check the tensors two kernels of one pass share (D: odo -> main, dq_acc: main -> "
                         "dq_convert/dq_shuffle), for each main kernel a routing csv beside it names "
                         "(addrsim contract); a disagreement is a finding (exit 1)")
    sc.add_argument("--no-progress", "--quiet", "-q", dest="no_progress", action="store_true", help="no progress bar")
    sc.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")


def run(args) -> int:
    from addrsim.report.formats import write_junit, write_sarif
    if not args.inputs and not args.aiter:
        sys.stderr.write("addrsim: scan needs a directory, wheel or file (or --aiter)\n")
        return EXIT_BAD_INPUT
    if not 1 <= args.jobs <= MAX_JOBS:
        sys.stderr.write(f"addrsim: --jobs must be between 1 and {MAX_JOBS}, got {args.jobs}\n")
        return EXIT_BAD_INPUT
    layouts = args.layout or list(DEFAULT_LAYOUTS)
    try:
        check_outputs(args, [(f, f"--{f}") for f in ("json", "sarif", "junit", "html")])   # before the work
        if args.html in ("", "-"):
            raise InputError("--html", "the page is written to a file: give its name")
        baseline = load_baseline(args.baseline) if args.baseline is not None else None
        accepted = load_accepted(args.accepted) if args.accepted is not None else []
        files = list(args.model) + list(args.layouts)
        ms = load_models(files)
        for lay in layouts:
            if lay not in ms.layouts:
                raise InputError(files[-1] if files else "--layout",
                                 unknown_name("layout", lay, ms.layouts))
        for b in args.buffer or []:
            if b not in ms.buffers:
                raise InputError("--buffer", unknown_name("buffer", b, ms.buffers))
        corpus = collect(args.inputs, ms, aiter=args.aiter, like=args.like)
        if not corpus.files:
            raise InputError(" ".join(args.inputs) or "--aiter", "no code object with a modelled kernel family found")
        if len(corpus.like) > 1:
            sys.stderr.write(f"addrsim: {len(corpus.like)} listings take their metadata from {args.like}: each is named "
                             f"by its own file (a baseline of that code object gates one listing at a time)\n")
        reports = scan(corpus, args.buffer or None, layouts, files, bounds_of(args), budgets_of(args), args.jobs,
                       progress=args.progress or (not args.no_progress and sys.stderr.isatty()),
                       arith=args.arith, memory_gib=args.memory_gib,
                       smt_dir=smt_dir(args), properties=args.check, host=args.host, routed=args.routed,
                       cache_dir=cache_dir_of(args))
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return e.exit_code
    errors = [r["error"] for r in reports if r.get("error")]
    merged = {"tool": "addrsim", "version": __version__, "kernels": [k for r in reports for k in r["kernels"]],
              "skipped": [{"file": f, "reason": w} for f, w in corpus.skipped], "errors": errors,
              "cache_rejected": max((r.get("cache_rejected", 0) for r in reports), default=0)}
    gated = args.baseline is not None or args.accepted is not None
    if gated:
        merged["gate"] = gate(merged["kernels"], baseline, accepted)
    if args.contracts:
        merged["contracts"] = pass_contracts_of(corpus, layouts, ms, bounds_of(args), budgets_of(args))
    try:
        if args.json == "-":
            json.dump(merged, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(summary(reports, corpus, layouts))
            if merged.get("contracts") is not None:
                from addrsim.commands.contract import format_contracts
                print("contracts between kernels of one pass:\n" + format_contracts(merged["contracts"]))
            if gated:
                print("\n".join(gate_text(merged["gate"])))
            if args.json:
                with atomic_open(args.json, "w") as fh:
                    json.dump(merged, fh, indent=2)
        if args.sarif:
            write_sarif(args.sarif, reports, __version__, gate=merged.get("gate"))
        if args.junit:
            write_junit(args.junit, reports)
        if args.html:
            from addrsim.report.html import to_html
            with atomic_open(args.html, "w", encoding="utf-8") as fh:
                fh.write(to_html(merged, "addrsim scan"))
    except OSError as e:
        sys.stderr.write(f"addrsim: {e.filename or _written(args)}: cannot write ({e.strerror})\n")
        return EXIT_BAD_INPUT
    for e in errors:
        sys.stderr.write(f"addrsim: {e}\n")
    if errors:
        return max(r.get("exit", EXIT_BAD_INPUT) for r in reports if r.get("error"))
    return _status(merged, reports, gated)


def _status(merged: dict, reports: List[dict], gated: bool) -> int:
    """The gate's status (with a baseline or accepted findings) or the verdicts'; a contract
    disagreement between two kernels of one pass counts as a reachable finding."""
    status = gate_status(merged["gate"], merged["kernels"]) if gated else exit_status(reports)
    if any(c["verdict"] == "error" for c in merged.get("contracts") or []):
        return EXIT_BAD_INPUT        # as a file the scan could not read: the report is written
    if any(c["verdict"] == "counterexample" for c in merged.get("contracts") or []):
        return 1 if status in (0, EXIT_UNKNOWN, EXIT_LATENT) else status
    return status


def pass_contracts_of(corpus: Corpus, layouts, ms: ModelSet, bounds, budgets) -> List[dict]:
    """The contracts (:func:`addrsim.api.contract`) of every pass a routing csv beside a
    scanned main kernel names, each pair once.  A pass that cannot be checked (a routing table
    the host would refuse, a kernel without the tensor) is an entry of verdict "error" naming
    the file and the problem, and one line on stderr; the others still run."""
    from addrsim.api import contract, pass_contracts
    from addrsim.loader.codeobj import load as load_code_object
    seen, out = set(), []
    for f in corpus.files:
        if not str(f).endswith(".co"):
            continue
        try:
            pairs = pass_contracts(Path(f), load_code_object(f).arch)
        except AddrsimError as e:
            out.append(_contract_error(f, "", "", "", e))
            continue
        for pr, pb, co, cb in pairs:
            if (pr, pb, co, cb) in seen:
                continue
            seen.add((pr, pb, co, cb))
            try:
                out += contract(pr, co, pb, cb, layouts, models=ms, bounds=bounds, **budgets)
            except AddrsimError as e:
                out.append(_contract_error(pr, pb, co, cb, e))
    return out


def _contract_error(pr, pb, co, cb, e) -> dict:
    sys.stderr.write(f"addrsim: contract: {e}\n")
    return {"producer": [str(pr), pb], "consumer": [str(co), cb], "layout": "-", "verdict": "error",
            "reason": str(e), "counterexample": None, "culprit": [], "term": "", "witness": None, "assumptions": []}
