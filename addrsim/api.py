"""Library API: verify the buffer addresses of the kernels in one code object.

Owns :func:`verify`, :func:`finding_kind` and :func:`exit_status`.  May import every layer
below commands.

>>> report = verify("bwd_hd128_bf16_a16_rtne.co", buffers=["lse"], layouts=["sbhd"])
>>> report["kernels"][0]["checks"][0]["verdict"]
'proved'
"""
from __future__ import annotations

import time
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace as _replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from addrsim import __version__
from addrsim.engine.explore import explore
from addrsim.errors import InputError, UnmodelledError, unknown_name
from addrsim.ir import expr as X
from addrsim.ir.expr import Sym
from addrsim.loader.codeobj import SUPPORTED_ARCHS
from addrsim.loader.listing import load_source
from addrsim.model.models import ModelSet, buffer_pointer, choose_family, build_problem, check_bounds, load_models
from addrsim.prove.check import check
from addrsim.prove.differential import rows_read
from addrsim.prove.domain import host_limits, route, settle
from addrsim.prove.machines import initial_machine
from addrsim.prove.options import Options, validate
from addrsim.prove.replay import Subject, limit_tools, witness_tools
from addrsim.prove.targets import pointers_in
from addrsim.prove.verdict import Check, Records, Verdict
from addrsim.report.causes import root_causes, summary_line
from addrsim.report.json import check_json

DEFAULT_BUFFERS = ("lse", "d")
DEFAULT_LAYOUTS = ("bhsd", "bshd", "sbhd")
DEFAULT_PROPERTIES = ("address", "bounds")


def verify(path, buffers: Optional[Sequence[str]] = None, layouts: Sequence[str] = DEFAULT_LAYOUTS,
           model_files: Sequence[str] = (), models: Optional[ModelSet] = None, cache: Optional[dict] = None,
           properties: Sequence[str] = DEFAULT_PROPERTIES, like=None, checks_out: Optional[list] = None,
           host: Optional[str] = None, routed: bool = False, require_buffers: bool = True,
           options: Optional[Options] = None, progress: Optional[Callable[[int, int, str], None]] = None,
           jobs: int = 1, **option_kw) -> dict:
    """Check every kernel of the code object or assembly listing at ``path``.

    A listing (llvm-objdump ``-d`` text, edited or not, or llvm-mc assembly) takes its
    metadata and kernel descriptors from the code object ``like``, or from its own
    ``.amdhsa_kernel``/``.amdgpu_metadata`` directives (:mod:`addrsim.loader.listing`).

    ``options`` (:class:`addrsim.prove.options.Options`), or its fields as keywords
    (``bounds``, ``query_mru``, ``min_mru``, ``check_mru`` or their nominal-seconds spellings, ``arith``, ``smt_dir``,
    ``memory_gib``): ``arith`` "bv" (hardware arithmetic, the default; counterexamples that
    int mode proves are reported as overflows with the instruction that wraps) or "int"
    (unbounded integers, :mod:`addrsim.backends.ideal`); ``memory_gib`` overrides the device
    memory (GiB) that limits the shapes (default: the model's capacity of the code object's
    architecture); ``smt_dir``: where each undecided obligation is written as SMT-LIB2.
    ``properties``: "address" (each buffer's (batch, head) slice base against the model's
    formula) and/or "bounds" (every checked access inside the tensor's allocation and the V#'s
    num_records).

    ``buffers`` None means every buffer of the models whose pointer argument the kernel has;
    named buffers must all exist in every kernel (``require_buffers`` False: a kernel without
    one is not checked for it, as a corpus scan wants).
    ``checks_out``: when given, each (kernel symbol, :class:`addrsim.prove.verdict.Check`) is
    appended to it (the Check keeps the sympy offsets that :mod:`addrsim.commands.diff` compares).
    ``host``: the host model by name (default: chosen by the argument ABI, see
    :func:`addrsim.model.models.choose_host`).  ``verdict`` is the kernel's, decided without
    routing over shapes whose arguments are exact; ``routing`` says whether the host's entry
    points send a failing shape to the kernel.  ``routed``: make ``verdict`` the routed one
    (every layer, routing included).  ``progress(done, total, label)`` is called after each
    check (``label``: kernel, buffer/layout, property and verdict), e.g. to draw a progress bar.
    ``jobs``: worker processes that share a kernel's checks (each explores the kernel itself
    and opens the same query cache: ``cache`` when it is an on-disk
    :class:`addrsim.prove.store.Store`, else an in-memory one of its own); the report is
    that of one process (times aside), as every answer is a function of its query and
    budgets and a replay is reused only for the same access of the same code.  Ignored with
    ``checks_out``, which needs the Check objects.
    Returns the report as a JSON-ready dict ``{"tool", "version", "kernels": [...]}`` (see
    README.md for the schema).  Raises InputError (bad file, unknown buffer or layout, a
    kernel without the buffer's pointer argument, malformed model file), ToolError (no
    usable llvm-objdump) and TypeError (an unknown option keyword)."""
    opts = options if options is not None else Options.of(**option_kw)
    # a name given twice (--layout sbhd --layout sbhd, --check address,address) is checked once
    layouts, properties = list(dict.fromkeys(layouts)), tuple(dict.fromkeys(properties))
    ms = _validated(path, opts, properties, layouts, models or load_models(model_files), host)
    buffers, explicit = (list(dict.fromkeys(buffers)), require_buffers) if buffers is not None \
        else (list(ms.buffers), False)
    for b in buffers:
        if b not in ms.buffers:
            raise InputError(path, unknown_name("buffer", b, ms.buffers))
    src = load_source(path, like)
    if src.co.arch not in SUPPORTED_ARCHS:
        raise InputError(path, f"architecture {src.co.arch} is not supported (gfx90a, gfx942, gfx950)")
    for k in src.co.kernels:
        if choose_family(ms, k, src.co.arch) is None:
            raise UnmodelledError(path, k.symbol)
    ptrs = _buffer_pointers(path, ms, src.co.kernels, buffers, explicit)
    out = {"tool": "addrsim", "version": __version__, "kernels": []}
    tick = _Ticker(progress, len(ptrs) * len(layouts) * len(properties))
    for k in src.co.kernels:
        kb = [(b, p) for (sym, b), p in ptrs.items() if sym == k.symbol]
        out["kernels"].append(_kernel_report(path, src, k, ms, kb, layouts, properties, opts, cache, routed,
                                             checks_out, like, tick, jobs if checks_out is None else 1))
    return out


class _Ticker:
    """Counts finished checks for the ``progress`` callback of :func:`verify`."""

    def __init__(self, progress, total: int):
        self.progress, self.total, self.done = progress, total, 0

    def __call__(self, kernel: str, c: Check) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total, f"{kernel} {c.buffer}/{c.layout} {c.prop}: {c.verdict}")


def _validated(path, opts: Options, properties, layouts, ms: ModelSet, host) -> ModelSet:
    """The model set (with ``host`` as override) after checking the options.  Raises InputError."""
    if opts.arith not in ("bv", "int"):
        raise InputError("--arith", f"unknown arithmetic mode {opts.arith!r} (bv or int)")
    bad = validate(opts)
    if bad is not None:
        raise InputError(*bad)
    for p_ in properties:
        if p_ not in ("address", "bounds"):
            raise InputError("--check", f"unknown property {p_!r} (address, bounds)")
    if opts.memory_gib is not None and not 0 < opts.memory_gib < 2 ** 20:
        raise InputError("--memory-gib", f"device memory must be a positive number of GiB below 2**20, "
                                         f"got {opts.memory_gib}")
    check_bounds(opts.bounds)
    if host is not None:
        ms = _replace(ms, host_override=host)
    for lay in layouts:
        if lay not in ms.layouts:
            raise InputError(path, unknown_name("layout", lay, ms.layouts))
    return ms


def _buffer_pointers(path, ms, kernels, buffers, explicit) -> Dict[tuple, str]:
    """(kernel symbol, buffer) -> its pointer argument, for the buffers each kernel has.
    Raises InputError when an explicitly named buffer is missing from a kernel."""
    ptrs = {}
    for k in kernels:
        for b in buffers:
            p = buffer_pointer(ms, k, b)
            if p is None:
                if explicit:
                    raise InputError(path, f"kernel {k.symbol}: metadata has no argument for buffer {b!r} "
                                           f"(looked for {', '.join(ms.buffers[b]['ptr'])})")
                continue
            ptrs[(k.symbol, b)] = p
    return ptrs


def _kernel_report(path, src, k, ms, kbufs, layouts, properties, opts, cache, routed, checks_out, like,
                   tick, jobs: int = 1) -> dict:
    """One kernel's entry of the report: its checks (property x layout x buffer) and host limits."""
    code = src.code.get(k.symbol)
    if not code:
        raise InputError(path, f"kernel {k.symbol}: no code found in the disassembly")
    t0 = time.time()
    sub, ex = _explored(k, src, ms)
    explore_s = time.time() - t0
    items = [(prop, lay, b) for prop in properties for lay in layouts for b, _ in kbufs]
    tasks = chains(items, ms, k)
    if jobs > 1 and len(tasks) > 1:
        checks = _checks_in_workers(path, like, k.symbol, ms, items, tasks, opts, cache, routed, jobs, tick)
    else:
        done = {}
        for task in tasks:
            for n, c in _chain(sub, ex, task, items, opts, cache, routed):
                tick(k.symbol, c)
                done[n] = c
        checks = [_check_out(done[n], src, ex) for n in range(len(items))]
        if checks_out is not None:
            checks_out.extend((k.symbol, done[n]) for n in range(len(items)))
    limits, prob = [], None
    for lay in layouts:
        prob = build_problem(ms, k, lay, Sym("tid_x", 32, "lane"), opts.bounds, src.co.arch, opts.memory_gib)
        limits += host_limits(prob, *limit_tools(prob, opts, cache))
    entry = {"file": str(path), "kernel": k.symbol, "arch": src.co.arch, "host": prob.host if prob else None,
             "args": [a.name for a in k.args if a.name != "pad"],
             "explore_s": round(explore_s, 3), "paths": ex.paths, "checks": checks, "host_limits": limits}
    if prob is not None and prob.memory is not None:        # the HTML page draws boundaries against it
        from addrsim.backends.sympy_text import to_sympy
        entry["memory"] = {"bytes": str(to_sympy(prob.memory)), "limit": prob.memory_limit}
    if src.kind != "code object":       # before the root causes: their findings are named as K's
        entry["source"] = src.kind
        if like is not None:
            entry["like"] = str(like)
    entry["root_causes"] = root_causes(entry)
    entry["summary"] = summary_line(entry, entry["root_causes"])
    return entry


# ----------------------------------------------------------------------------- worker processes

_WORKER: dict = {}


def _checks_in_workers(path, like, symbol, ms, items, tasks, opts, cache, routed, jobs, tick) -> List[dict]:
    """The JSON of each check of ``items`` ((property, layout, buffer)), in that order,
    decided by ``jobs`` worker processes (:func:`verify`'s ``jobs``), one chain of ``tasks``
    (:func:`chains`) a worker task."""
    store = getattr(cache, "path", None)
    out: List[Optional[dict]] = [None] * len(items)
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), initializer=_init_worker,
                             initargs=(str(path), like and str(like), ms, opts, store, routed)) as pool:
        futs = [pool.submit(_worker_chain, symbol, task, items) for task in tasks]
        for fut in as_completed(futs):
            for n, js, c in fut.result():
                out[n] = js
                tick(symbol, c)
    return out


def _init_worker(path, like, ms, opts, store, routed):
    from addrsim.prove.store import open_store
    _WORKER.clear()
    _WORKER.update(src=load_source(path, like), ms=ms, opts=opts, routed=routed, subjects={},
                   cache=open_store(Path(store).parent if store is not None else None))


def _worker_chain(symbol, task, items):
    """One chain in a worker: (item index, its JSON, a Check with its buffer, layout,
    property and verdict for the progress callback) per check of ``items`` it holds."""
    w = _WORKER
    src = w["src"]
    if symbol not in w["subjects"]:
        w["subjects"][symbol] = _explored(next(k for k in src.co.kernels if k.symbol == symbol), src, w["ms"])
    sub, ex = w["subjects"][symbol]
    return [(n, _check_out(c, src, ex), Check(c.buffer, c.layout, c.verdict, prop=c.prop))
            for n, c in _chain(sub, ex, task, items, w["opts"], w["cache"], w["routed"])]


def _check_out(c: Check, src, ex) -> dict:
    """The check's JSON (:func:`addrsim.report.json.check_json`), with ``edited_lines`` for a
    counterexample of an edited objdump listing: the edited lines (``src.edited``) among the
    instructions that feed the failing access's address (its slice, as ``explain`` shows it)."""
    out = check_json(c, src.lines)
    if src.edited and c.verdict == Verdict.COUNTEREXAMPLE and c.failing is not None:
        t = c.failing[0]
        pcs = {o[1] for n in X.walk(t.access.address) if (o := ex.origin.get(id(n))) is not None and o[0] is n}
        pcs |= {o[1] for name, s in X.symbols(t.access.address).items() if s.kind in ("arg", "ptr")
                if (o := ex.origin.get(("arg", name))) is not None}
        out["edited_lines"] = sorted({src.lines[p] for p in pcs if src.lines.get(p) in src.edited})
    return out


def chains(items, ms: ModelSet, kernel) -> List[List[tuple]]:
    """``items`` ((property, layout, buffer)) as chains of checks run in order in one process:
    a buffer whose model names another as ``like`` (V like K, dV like dK, D like LSE) follows
    that buffer's check of the same property and layout, and reuses its decisions
    (:func:`addrsim.prove.check.check`'s ``proved`` and ``refuted``).  The other buffer is
    checked even when it was not asked for (its report is not shown, ``None`` as index), so a
    buffer's verdict does not depend on which buffers were selected.  Each chain is a list of
    (item index or None, property, layout, buffer), its first entry the one the others reuse."""
    groups: Dict[tuple, list] = {}
    for n, (prop, lay, b) in enumerate(items):
        root = donor(ms, kernel, b) or b
        g = groups.setdefault((prop, lay, root), [None])
        if b == root:
            g[0] = n
        else:
            g.append((n, prop, lay, b))
    return [[(g[0], prop, lay, root)] + g[1:] for (prop, lay, root), g in groups.items()]


def donor(ms: ModelSet, kernel, buffer: str) -> Optional[str]:
    """The buffer whose decisions ``buffer``'s checks reuse: its model's ``like`` when that is
    another buffer of ``kernel`` (a pointer argument of its own) with no ``like`` of its own."""
    d = (ms.buffers.get(buffer) or {}).get("like")
    if not d or d == buffer or (ms.buffers.get(d) or {}).get("like") or buffer_pointer(ms, kernel, d) is None:
        return None
    return d


def _chain(sub, ex, task, items, opts, cache, routed):
    """(item index, settled Check) of each shown check of ``task``, in order."""
    first = None
    out = []
    for n, prop, lay, b in task:
        c = _one_check(sub, ex, b, lay, prop, opts, cache, routed, first)
        first = first or c
        if n is not None:
            out.append((n, c))
    return out


def _explored(k, src, ms):
    """(Subject, Exploration) of kernel ``k``: every path to its end, whatever buffers were
    selected (the accesses and loops a check sees, and so its verdict, must not depend on
    which other buffers were asked for)."""
    sub = Subject(k, src.co.arch, src.code[k.symbol], ms)
    m, _ = initial_machine(k, src.co.arch, ms)
    return sub, explore(sub.code, m, lambda a: pointers_in(a.base), set())


def _one_check(sub: Subject, ex, b, lay, prop, opts, cache, routed, donor: Optional[Check] = None) -> Check:
    """The settled check of one (buffer, layout, property): the kernel's verdict with a
    witness, its routing per host entry point, and with ``routed`` the routed verdict.
    ``donor``: another buffer's settled check of the same property and layout whose records
    this one reuses (:func:`chains`), its routed reruns' for the same entry point's.  An engine
    failure is an internal error (raised: exit 4 with its message), never a verdict and never
    an "unknown"."""
    known = donor.records() if donor is not None else Records()
    own = Records()

    def run(entry):
        rec = known
        if entry is not None:
            rec = rec.plus(own).plus(donor.routed_records.get(entry, Records()) if donor else Records())
        c = check(sub, ex, b, lay, opts, cache, prop, routed=entry, known=rec)
        if entry is not None:
            runs[entry] = c.records()
        return settle(c, *witness_tools(sub, c, opts, cache), cache=cache)
    runs: Dict[str, Records] = {}
    c = run(None)
    own = Records(frozenset(c.proved_cases))        # a routed domain is a subset of the kernel's
    if b == "lse" and prop == "address" and c.problem is not None:
        c.rows = rows_read(sub, ex, buffer_pointer(sub.ms, sub.kernel, b), c.problem)
    c.routing = route(c, run, witness_tools(sub, c, opts, cache)[0] if c.problem is not None else None, cache)
    c.routed_records = runs
    return _as_routed(c, run) if routed else c


_ROUTED_ORDER = (Verdict.COUNTEREXAMPLE, Verdict.UNKNOWN, Verdict.UNSUPPORTED, Verdict.PROVED, Verdict.UNREACHABLE)


def _as_routed(c: Check, run) -> Check:
    """The routed verdict as the check's verdict: the first entry point's counterexample
    that reaches a failing shape, else its proof (unreachable when no entry point's domain
    holds a shape)."""
    r = c.routing
    if r is None or not c.problem or not c.problem.entry_points or not r.entries:
        return c
    order = sorted(r.entries, key=lambda e: _ROUTED_ORDER.index(e.verdict) if e.verdict in _ROUTED_ORDER else 9)
    pick = run(order[0].entry)
    pick.routing = r
    return pick


def finding_kind(check: dict) -> str:
    """"reachable" (a counterexample some host entry point launches, or whose routing is
    undecided), "latent" (no entry point launches a failing shape), "" otherwise."""
    if check.get("verdict") != Verdict.COUNTEREXAMPLE:
        return ""
    reach = (check.get("routing") or {}).get("reachable")
    return "latent" if reach is False else "reachable"


EXIT_LATENT = 5


def exit_status(reports: List[dict]) -> int:
    """0 all proved; 1 a reachable counterexample (a host entry point launches a failing
    shape, or routing is undecided); 5 counterexamples that are all latent (the host's routing
    masks every one); 2 unknown, unsupported or unreachable and no counterexample."""
    checks = [c for r in reports for k in r["kernels"] for c in k["checks"]]
    kinds = [finding_kind(c) for c in checks]
    if "reachable" in kinds:
        return 1
    if "latent" in kinds:
        return EXIT_LATENT
    if any(c["verdict"] != Verdict.PROVED for c in checks):
        return 2
    return 0


def run(path, layout: str, shape: Dict[str, int], model_files: Sequence[str] = (), models: Optional[ModelSet] = None,
        seed: int = 0, like=None, trace: Optional[str] = None, stage: Optional[str] = None,
        window=None, pointers: Optional[Dict[str, int]] = None) -> dict:
    """Run the kernel of ``path`` on the virtual MI300 (:mod:`addrsim.emu`) in ``layout`` at
    ``shape`` on random inputs (``seed``) and compare its dQ, dK and dV with the float64
    reference.  Returns ``{"ok": bool, "kernel", "layout", "shape", "outputs": {NAME: {"ok",
    "max_abs_err", "max_rel_err", "wrong_slices": [[batch, head], ...], "first_rows":
    {"b,h": row}}}, "instructions": int, "seconds": float, "tolerance": float}`` (and
    ``"trace"``: the accesses of buffer ``trace``), ``"stages"``: each kernel run (stage, kernel,
    instructions, seconds): the odo pre-kernel, the main kernel and the post-kernel where the
    routing csvs beside the kernel name them, or only ``stage`` ("odo", "main", "post") on
    reference inputs; ``window``: (left, right) of a sliding-window kernel; ``pointers``:
    pointer argument -> the address its tensor is placed at (a counterexample's).  Raises
    InputError, NotEmulatedError."""
    from dataclasses import asdict
    from addrsim.emu.launch import TOLERANCE, run_kernel
    ms = models or load_models(model_files)
    r = run_kernel(path, layout, shape, ms, seed, like, trace, stage, window, pointers)
    out = {"tool": "addrsim", "version": __version__, "ok": r.ok, "kernel": r.kernel, "layout": r.layout,
           "shape": r.shape, "outputs": {k: asdict(o) for k, o in r.outputs.items()},
           "instructions": r.instructions, "seconds": r.seconds, "tolerance": TOLERANCE, "fault": r.fault,
           "stages": r.stages, "not_compared": r.not_compared}
    for o in out["outputs"].values():
        o["wrong_slices"] = [list(s) for s in o["wrong_slices"]]
    if trace:
        out["trace"] = [{"pc": pc, "workgroup": list(ids), "wave": w, "lane": lane, "offset": off, "size": size,
                         "kind": kind} for pc, ids, w, lane, off, size, kind in r.trace]
    return out


def contract(producer, consumer, producer_buffer: str, consumer_buffer: str,
             layouts: Sequence[str] = DEFAULT_LAYOUTS, model_files: Sequence[str] = (),
             models: Optional[ModelSet] = None, like_producer=None, like_consumer=None,
             options: Optional[Options] = None, **option_kw) -> List[dict]:
    """The contract between two kernels (:mod:`addrsim.prove.contract`): the first kernel of
    ``producer`` writes ``producer_buffer``, the first kernel of ``consumer`` reads
    ``consumer_buffer``, the same tensor; one entry per layout: ``{"producer": [symbol,
    buffer], "consumer": [...], "layout", "verdict", "reason", "counterexample", "culprit",
    "term", "witness", "assumptions"}``.  Raises InputError (a file, buffer or layout the
    models do not know) and ToolError (no llvm-objdump)."""
    from dataclasses import asdict
    from addrsim.prove.contract import LINKS, decide, side
    opts = options if options is not None else Options.of(**option_kw)
    if (producer_buffer, consumer_buffer) not in {(pb, cb) for _, pb, _, cb in LINKS}:
        raise InputError(str(consumer), f"{producer_buffer} -> {consumer_buffer} is not a tensor two kernels of the "
                                        f"pass share (" + ", ".join(f"{pb} -> {cb}" for _, pb, _, cb in LINKS) + ")")
    ms = models or load_models(model_files)
    subs = []
    for path, like, buf in ((producer, like_producer, producer_buffer), (consumer, like_consumer, consumer_buffer)):
        _validated(path, opts, ["address"], layouts, ms, None)
        src = load_source(path, like)
        if len(src.co.kernels) != 1:
            raise InputError(str(path), f"holds {len(src.co.kernels)} kernels: a contract compares one kernel with one")
        k = src.co.kernels[0]
        if choose_family(ms, k, src.co.arch) is None:
            raise UnmodelledError(path, k.symbol)
        if buffer_pointer(ms, k, buf) is None:
            raise InputError(path, f"kernel {k.symbol} has no pointer argument of buffer {buf!r} (its arguments: "
                                   f"{', '.join(a.name for a in k.args if a.name != 'pad')})")
        subs.append(_explored(k, src, ms))
    out = []
    for lay in layouts:
        sides = [side(sub, ex, buf, lay, opts, tag, role) for (sub, ex), buf, tag, role in
                 zip(subs, (producer_buffer, consumer_buffer), ("@producer", "@consumer"), ("writes", "reads"))]
        refused = [s_ for s_ in sides if isinstance(s_, tuple)]
        if refused:
            out.append({"producer": [subs[0][0].kernel.symbol, producer_buffer],
                        "consumer": [subs[1][0].kernel.symbol, consumer_buffer], "layout": lay,
                        "verdict": "unknown" if any(v == Verdict.UNKNOWN for v, _ in refused) else "unsupported",
                        "reason": "; ".join(w for _, w in refused),
                        "counterexample": None, "culprit": [], "term": "", "witness": None, "assumptions": []})
            continue
        d = asdict(decide(sides[0], sides[1], lay, opts))
        d["verdict"] = str(d["verdict"])
        d["producer"], d["consumer"] = list(d["producer"]), list(d["consumer"])
        out.append(d)
    return out


def pass_contracts(main: Path, arch: str) -> List[Tuple[Path, str, Path, str]]:
    """(producer file, buffer, consumer file, buffer) of each tensor the host's pass around the
    main kernel ``main`` shares (:data:`addrsim.prove.contract.LINKS`), from the routing csvs
    beside it (:func:`addrsim.loader.routing.find_pipeline`); empty where none names it."""
    from addrsim.loader.routing import find_pipeline
    from addrsim.prove.contract import LINKS
    pipe = find_pipeline(Path(main), arch)
    if pipe is None:
        return []
    files = {"main": Path(main), "odo": pipe.pre and pipe.pre.path, "post": pipe.post and pipe.post.path}
    return [(files[pr], pb, files[co], cb) for pr, pb, co, cb in LINKS if files[pr] and files[co]]
