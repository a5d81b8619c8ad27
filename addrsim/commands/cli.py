"""Command line: ``addrsim verify FILE.co ...``, ``addrsim scan DIR_OR_WHEEL_OR_FILES ...``,
``addrsim explain FILE.co --buffer B`` and ``addrsim diff OLD NEW``.

Exit status: 0 all proved, 1 any counterexample (diff: NEW breaks what OLD proved), 2
unknown/unsupported and no counterexample (diff: a proof lost, undecided), 3 bad input or
usage, 4 internal error.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from addrsim import __version__
from addrsim.api import DEFAULT_LAYOUTS, exit_status, verify
from addrsim.errors import InputError
from addrsim.model.models import load_models
from addrsim.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, AddrsimError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, exit 3
        sys.stderr.write(f"addrsim: {message}\n")
        sys.exit(EXIT_BAD_INPUT)


def _bound(text: str):
    try:
        name, rng = text.split("=", 1)
        lo, hi = rng.split(":", 1)
        return name.strip(), (int(lo), int(hi))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=MIN:MAX, got {text!r}") from None



def _props(text: str):
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in ("address", "bounds")]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"expected address, bounds or address,bounds, got {text!r}")
    return out


def _common(sp, checks_default: str):
    """Options of verify and scan for the properties, the arithmetic, device memory and
    solver hygiene."""
    sp.add_argument("--check", type=_props, default=_props(checks_default), metavar="PROPS",
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
                    help="where undecided obligations are written as SMT-LIB2 (default: next to --json/--sarif, "
                         "else ./addrsim-smt2)")


def _check_output(path: Optional[str], what: str) -> None:
    """An output file must be creatable: its folder exists and is writable, and it is not a
    folder itself.  Raises InputError (checked before any work is done)."""
    import os
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise InputError(path, f"{what}: is a directory, not a file")
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        raise InputError(path, f"{what}: cannot write here (folder {d} missing or not writable)")


def _emit(report: dict, json_path: Optional[str], text) -> Optional[int]:
    """Write ``report`` as JSON to stdout (``json_path`` "-") or print ``text()`` and also
    write the JSON to ``json_path``; EXIT_BAD_INPUT when that file cannot be written."""
    if json_path == "-":
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return None
    print(text())
    if json_path:
        try:
            with open(json_path, "w") as fh:
                json.dump(report, fh, indent=2)
        except OSError as e:
            sys.stderr.write(f"addrsim: {json_path}: cannot write ({e.strerror})\n")
            return EXIT_BAD_INPUT
    return None


def _smt_dir(args) -> str:
    import os
    if args.smt_dir:
        return args.smt_dir
    for f in (getattr(args, "json", None), getattr(args, "sarif", None), getattr(args, "junit", None)):
        if f and f != "-":
            return os.path.join(os.path.dirname(os.path.abspath(f)), "addrsim-smt2")
    return "addrsim-smt2"


def main(argv: Optional[List[str]] = None) -> int:
    p = _Parser(prog="addrsim", description="Prove GPU kernels compute their buffer addresses correctly.")
    p.add_argument("--version", action="version", version=f"addrsim {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="prove or refute the buffer base addresses of a code object")
    v.add_argument("files", nargs="+", metavar="FILE.co|LISTING.s")
    v.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata and kernel descriptors an "
                   "assembly listing takes (the one it was disassembled from)")
    v.add_argument("--buffer", action="append", help="buffer to check (repeatable; default: every buffer the kernel has a pointer for)")
    v.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    v.add_argument("--json", metavar="FILE", help="write the JSON report to FILE ('-' for stdout)")
    v.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    v.add_argument("--bound", action="append", type=_bound, default=[], metavar="NAME=MIN:MAX",
                   help="override a shape bound, e.g. batch=1:64")
    v.add_argument("--timeout", type=int, default=10000, metavar="MS", help="solver timeout per query (ms)")
    v._parser_class = _Parser
    _common(v, "address,bounds")
    v.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml",
                   help="user layouts file (a model file with a layouts section; repeatable)")
    df = sub.add_parser("diff", help="compare the verdicts and offsets of two kernels (a patch, or a port)")
    df.add_argument("old", metavar="OLD.co|OLD.s")
    df.add_argument("new", metavar="NEW.co|NEW.s")
    df.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing among OLD/NEW takes")
    df.add_argument("--like-old", metavar="KERNEL.co", help="the same for OLD only")
    df.add_argument("--like-new", metavar="KERNEL.co", help="the same for NEW only")
    df.add_argument("--buffer", action="append", help="buffer (repeatable; default: every buffer both kernels have)")
    df.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    df.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml", help="user layouts file (repeatable)")
    df.add_argument("--json", metavar="FILE", help="write the JSON diff to FILE ('-' for stdout)")
    df.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    df.add_argument("--bound", action="append", type=_bound, default=[], metavar="NAME=MIN:MAX")
    df.add_argument("--timeout", type=int, default=10000, metavar="MS", help="solver timeout per query (ms)")
    _common(df, "address")
    cx = sub.add_parser("crosscheck", help="run the LSE/D verdicts on real attention gradients (GPU or CPU)")
    cx.add_argument("file", metavar="FILE.co|LISTING.s")
    cx.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    cx.add_argument("--buffer", action="append", help="lse and/or d (default both)")
    cx.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    cx.add_argument("--backend", choices=("torch", "triton"), default="torch",
                    help="torch (CPU, or the GPU with --device cuda) or triton (GPU)")
    cx.add_argument("--device", default=None, help="torch device for the torch backend (default cpu)")
    cx.add_argument("--cases", type=int, default=6, metavar="N", help="cases per layout (default 6)")
    cx.add_argument("--plot", metavar="FILE.png", help="draw the LSE rows each (batch_id, head_id) reads")
    cx.add_argument("--plan-out", metavar="PLAN.json", help="only write the cases and their offsets (no run); run "
                    "them elsewhere with python3 -m addrsim.gpu.crossrun PLAN.json")
    cx.add_argument("--json", metavar="FILE", help="write the cross-check report ('-' for stdout)")
    cx.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    cx.add_argument("--bound", action="append", type=_bound, default=[], metavar="NAME=MIN:MAX")
    cx.add_argument("--timeout", type=int, default=10000, metavar="MS", help="solver timeout per query (ms)")
    rp = sub.add_parser("repro", help="print a PyTorch script (aiter's API) that reproduces a counterexample on AMD hardware")
    rp.add_argument("file", metavar="FILE.co|LISTING.s")
    rp.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    rp.add_argument("--buffer", required=True, help="buffer (e.g. lse)")
    rp.add_argument("--layout", required=True, help="bhsd, bshd or sbhd")
    rp.add_argument("--shape", metavar="NAME=V,...", help="write the script for this shape instead of the counterexample")
    rp.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    rp.add_argument("--bound", action="append", type=_bound, default=[], metavar="NAME=MIN:MAX")
    rp.add_argument("--timeout", type=int, default=10000, metavar="MS", help="solver timeout per query (ms)")
    rp.add_argument("-o", "--output", metavar="FILE.py", help="write the script to FILE.py (default stdout)")
    sc = sub.add_parser("scan", help="check every buffer of every kernel of a corpus, for every layout (CI gate)")
    sc.add_argument("inputs", nargs="*", metavar="DIR_OR_WHEEL_OR_FILE")
    sc.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata the listings among the inputs take")
    sc.add_argument("--aiter", action="store_true", help="also scan the kernels of the aiter installed in this Python")
    sc.add_argument("--buffer", action="append", help="buffer to check (repeatable; default: every modelled buffer)")
    sc.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    sc.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml", help="user layouts file (repeatable)")
    sc.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    sc.add_argument("--bound", action="append", type=_bound, default=[], metavar="NAME=MIN:MAX")
    sc.add_argument("--timeout", type=int, default=3000, metavar="MS", help="solver timeout per query (ms)")
    sc.add_argument("--check-budget", type=float, default=10.0, metavar="S",
                    help="seconds for one kernel x buffer x layout check; past it the verdict is unknown")
    sc.add_argument("--min-budget", type=float, default=1.0, metavar="S",
                    help="seconds spent minimising each counterexample (0: report the first found)")
    _common(sc, "address")
    sc.add_argument("--jobs", "-j", type=int, default=1, metavar="N", help="worker processes")
    sc.add_argument("--json", metavar="FILE", help="write the JSON reports ('-' for stdout)")
    sc.add_argument("--sarif", metavar="FILE", help="write SARIF 2.1.0")
    sc.add_argument("--junit", metavar="FILE", help="write JUnit XML")
    sc.add_argument("--no-progress", action="store_true", help="no progress bar")
    sc.add_argument("--progress", action="store_true", help="progress bar even when stderr is not a terminal")
    ex = sub.add_parser("explain", help="the instructions that feed a buffer's address (backward slice)")
    ex.add_argument("file", metavar="FILE.co|LISTING.s")
    ex.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    ex.add_argument("--buffer", required=True, help="buffer whose address to explain (e.g. lse)")
    ex.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    args = p.parse_args(argv)
    if args.cmd == "scan":
        return _scan(args)
    if args.cmd == "diff":
        return _diff(args)
    if args.cmd == "crosscheck":
        return _crosscheck(args)
    if args.cmd == "repro":
        return _repro(args)
    if args.cmd == "explain":
        from addrsim.report.explain import explain, format_explanations
        try:
            exps = explain(args.file, args.buffer, model_files=args.model, like=args.like)
        except AddrsimError as e:
            sys.stderr.write(f"addrsim: {e}\n")
            return EXIT_BAD_INPUT
        sys.stdout.write(format_explanations(exps) + "\n")
        return 0
    try:
        models = load_models(list(args.model) + list(args.layouts))
        reports = [verify(f, args.buffer or None, args.layout or DEFAULT_LAYOUTS, models=models,
                          bounds=dict(args.bound), timeout_ms=args.timeout, arith=args.arith,
                          memory_gib=args.memory_gib, smt_dir=_smt_dir(args), properties=args.check,
                          like=args.like, host=args.host, routed=args.routed)
                   for f in args.files]
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return EXIT_BAD_INPUT
    merged = {"tool": "addrsim", "version": __version__, "kernels": [k for r in reports for k in r["kernels"]]}
    import io
    buf = io.StringIO()
    print_table(merged, buf)
    bad = _emit(merged, args.json, lambda: buf.getvalue().rstrip("\n"))
    return bad if bad is not None else exit_status(reports)


def _crosscheck(args) -> int:
    from addrsim.commands.crosscheck import AddressFunction, build_cases, plan_case
    from addrsim.gpu.crossrun import format_report, run_plan
    try:
        models = load_models(list(args.model))
        buffers = args.buffer or ["lse", "d"]
        for b in buffers:
            if b not in ("lse", "d"):
                raise InputError("--buffer", f"crosscheck reads LSE and D: {b!r} is not one of lse, d")
        if args.cases < 1:
            raise InputError("--cases", "needs at least 1 case per layout")
        for path, what in ((args.plot, "--plot"), (args.plan_out, "--plan-out"), (args.json, "--json")):
            _check_output(path, what)
        af = AddressFunction(args.file, buffers, models, like=args.like)
        layouts = args.layout or list(DEFAULT_LAYOUTS)
        for lay in layouts:
            if lay not in models.layouts:
                raise InputError("--layout", f"unknown layout {lay!r}")
        run = not args.plan_out
        try:
            if run:
                import torch  # noqa: F401
        except ImportError:
            raise InputError("--backend", "the cross-check needs PyTorch (pip install torch)") from None
        if run and args.device:
            try:
                dev = torch.device(args.device)
            except (RuntimeError, ValueError) as e:
                raise InputError("--device", f"not a torch device: {args.device!r} ({e})") from None
            if dev.type == "cuda" and not torch.cuda.is_available():
                raise InputError("--device", f"{args.device}: no GPU here (torch.cuda.is_available() is False)")
            if dev.type not in ("cpu", "cuda"):
                raise InputError("--device", f"{args.device}: the torch backend runs on cpu or cuda")
        if run and args.backend == "triton":
            try:
                import triton  # noqa: F401
            except ImportError:
                raise InputError("--backend", "the triton backend needs Triton and a GPU") from None
            if not torch.cuda.is_available():
                raise InputError("--backend", "the triton backend needs a GPU (torch.cuda.is_available() is False)")
        cases = build_cases(af, args.file, layouts, args.cases, like=args.like, timeout_ms=args.timeout,
                            bounds=dict(args.bound) or None,
                            progress=lambda m: sys.stderr.write(f"addrsim: {m}\n"))
        plan = {"tool": "addrsim", "kernel": af.sub.kernel.symbol, "file": str(args.file),
                "cases": [plan_case(af, c, args.file) for c in cases]}
        if args.plan_out:
            with open(args.plan_out, "w") as fh:
                json.dump(plan, fh, indent=1)
            sys.stderr.write(f"addrsim: wrote {len(cases)} cases to {args.plan_out}; run them with "
                             f"python3 -m addrsim.gpu.crossrun {args.plan_out} --backend {args.backend}\n")
            rep = {"cases": []}
        else:
            rep = run_plan(plan, args.backend, args.device)
        if args.plot:
            from addrsim.report.plots import pick_shapes, plot_rows
            plot_rows(af, pick_shapes(cases), args.plot, buffers[0],
                      title=f"{af.sub.kernel.symbol}\n{buffers[0].upper()} rows read (blue; red: out of range, "
                            f"read as 0) vs rows it should read (grey)")
            rep["plot"] = args.plot
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return EXIT_BAD_INPUT
    if args.plan_out:
        return 0
    bad = _emit(rep, args.json, lambda: format_report(rep))
    if bad is not None:
        return bad
    ran = [c for c in rep["cases"] if c["observed"] != "skipped"]
    if not ran:
        return 2
    return 0 if rep["agree"] else 1


def _repro(args) -> int:
    from addrsim.commands.repro import script
    from addrsim.loader.listing import load_source
    from addrsim.model.models import SHAPE_VARS
    try:
        _check_output(args.output, "-o")
        models = load_models(list(args.model))
        kern = load_source(args.file, args.like).co.kernels[0].symbol
        coords, why, prediction = None, "", None
        if args.shape is not None:
            try:
                pairs = [kv.split("=", 1) for kv in args.shape.split(",")]
                shape = {k.strip(): int(v) for k, v in pairs}
            except ValueError:
                raise InputError("--shape", f"expected NAME=V,NAME=V,..., got {args.shape!r}") from None
            if len(shape) != len(pairs):
                raise InputError("--shape", f"a name is given twice in {args.shape!r}")
            for k, v in shape.items():
                if k not in SHAPE_VARS[:7]:
                    raise InputError("--shape", f"unknown name {k!r} (batch, nhead_q, nhead_k, seqlen_q, seqlen_k, "
                                                "hdim_q, hdim_v)")
                if not 1 <= v < 1 << 31:
                    raise InputError("--shape", f"{k}={v} is not a size (1 .. 2**31-1)")
            defaults = {"nhead_k": shape.get("nhead_q", 1), "seqlen_k": shape.get("seqlen_q", 1),
                        "hdim_v": shape.get("hdim_q", 128)}
            shape = {**defaults, **shape}
            missing = [n for n in ("batch", "nhead_q", "seqlen_q", "hdim_q") if n not in shape]
            if missing:
                raise InputError("--shape", f"missing {', '.join(missing)}")
            if shape["nhead_q"] % shape["nhead_k"]:
                raise InputError("--shape", "nhead_q must be a multiple of nhead_k")
            from addrsim.commands.crosscheck import _predict
            pred, chk = _predict(args.file, args.layout, shape, [args.buffer], models, args.like, args.timeout)
            prediction = pred
            why = {"fail": f"The prover refutes {args.buffer}/{args.layout} at exactly this shape.",
                   "pass": f"The prover proves {args.buffer}/{args.layout} at exactly this shape: the script "
                           "is a control, expected to PASS.",
                   None: "The prover could not decide this shape (unknown)."}[pred]
            if chk:
                coords = (chk["counterexample"]["coords"]["batch_id"], chk["counterexample"]["coords"]["head_id"])
        else:
            rep = verify(args.file, [args.buffer], [args.layout], models=models, bounds=dict(args.bound),
                         timeout_ms=args.timeout, properties=("address",), like=args.like)
            c = rep["kernels"][0]["checks"][0]
            if c["verdict"] != "counterexample":
                sys.stderr.write(f"addrsim: {args.buffer}/{args.layout} is {c['verdict']}: no failing shape to "
                                 f"reproduce, no script written (give --shape to write one for a shape of your "
                                 f"choice)\n")
                return 2
            x = c["counterexample"]
            shape = {k: int(v) for k, v in x["shape"].items()}
            coords = (x["coords"]["batch_id"], x["coords"]["head_id"])
            why = f"Cause: {c.get('cause')}."
            prediction = "fail"
        # the family's dQ accumulator (models/fmha_bwd_v3.yaml params.acc): 4 = the fp32
        # accumulator (aiter's is_v3_atomic_fp32=True), 0 = dQ written with 16-bit atomics and
        # 2 = the 16-bit accumulator (both is_v3_atomic_fp32=False)
        from addrsim.model.models import choose_family
        co = load_source(args.file, args.like).co
        fam = choose_family(models, co.kernels[0], co.arch)
        fam_acc = int((fam.get("params") or {}).get("acc", 0)) if fam else 0     # models.py: acc defaults to 0
        try:
            text = script(kern, str(args.file), args.buffer, args.layout, shape,
                          "fp16" if "_fp16" in kern else "bf16", atomic32=fam_acc == 4, coords=coords, why=why,
                          causal="_causal" in kern, prediction=prediction)
        except ValueError as e:
            raise InputError("--layout", str(e)) from None
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return EXIT_BAD_INPUT
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _diff(args) -> int:
    from addrsim.commands.diff import diff, diff_status, format_diff
    try:
        models = load_models(list(args.model) + list(args.layouts))
        rep = diff(args.old, args.new, args.buffer or None, args.layout or DEFAULT_LAYOUTS, like=args.like,
                   like_old=args.like_old, like_new=args.like_new, properties=args.check, models=models,
                   bounds=dict(args.bound), timeout_ms=args.timeout, arith=args.arith,
                   memory_gib=args.memory_gib, smt_dir=_smt_dir(args))
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return EXIT_BAD_INPUT
    bad = _emit(rep, args.json, lambda: format_diff(rep))
    return bad if bad is not None else diff_status(rep)


def _scan(args) -> int:
    from addrsim.report.formats import write_junit, write_sarif
    from addrsim.commands.scan import collect, scan, summary
    if not args.inputs and not args.aiter:
        sys.stderr.write("addrsim: scan needs a directory, wheel or file (or --aiter)\n")
        return EXIT_BAD_INPUT
    if args.jobs < 1:
        sys.stderr.write("addrsim: --jobs must be at least 1\n")
        return EXIT_BAD_INPUT
    layouts = args.layout or list(DEFAULT_LAYOUTS)
    try:
        files = list(args.model) + list(args.layouts)
        ms = load_models(files)
        for lay in layouts:
            if lay not in ms.layouts:
                raise InputError(files[-1] if files else "--layout",
                                 f"unknown layout {lay!r} (models define: {', '.join(sorted(ms.layouts))})")
        for b in args.buffer or []:
            if b not in ms.buffers:
                raise InputError("--buffer", f"unknown buffer {b!r} (models define: {', '.join(sorted(ms.buffers))})")
        corpus = collect(args.inputs, ms, aiter=args.aiter, like=args.like)
        if not corpus.files:
            raise InputError(" ".join(args.inputs) or "--aiter", "no code object with a modelled kernel family found")
        reports = scan(corpus, args.buffer or None, layouts, files, dict(args.bound), args.timeout, args.jobs,
                       args.min_budget, progress=args.progress or (not args.no_progress and sys.stderr.isatty()),
                       check_budget_s=args.check_budget, arith=args.arith, memory_gib=args.memory_gib,
                       smt_dir=_smt_dir(args), properties=args.check, host=args.host, routed=args.routed)
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return EXIT_BAD_INPUT
    errors = [r["error"] for r in reports if r.get("error")]
    merged = {"tool": "addrsim", "version": __version__, "kernels": [k for r in reports for k in r["kernels"]],
              "skipped": [{"file": f, "reason": w} for f, w in corpus.skipped], "errors": errors}
    try:
        if args.json == "-":
            json.dump(merged, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(summary(reports, corpus, layouts))
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(merged, fh, indent=2)
        if args.sarif:
            write_sarif(args.sarif, reports, __version__)
        if args.junit:
            write_junit(args.junit, reports)
    except OSError as e:
        sys.stderr.write(f"addrsim: {e.filename}: cannot write ({e.strerror})\n")
        return EXIT_BAD_INPUT
    for e in errors:
        sys.stderr.write(f"addrsim: {e}\n")
    if errors:
        return EXIT_BAD_INPUT
    return exit_status(reports)


def _signed(v: int) -> str:
    """A 64-bit byte offset, with its signed reading when it is negative."""
    return f"{v} (= {v - (1 << 64)})" if v >= 1 << 63 else str(v)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters; full text in --json)"


def _print_routing(c: dict, out) -> None:
    r = c.get("routing") or {}
    for e in r.get("entry_points") or []:
        if e["reachable"] is True:
            shape = " ".join(f"{n}={v}" for n, v in (e.get("shape") or {}).items())
            out.write(f"    REACHABLE through {r['host']} {e['entry']}" + (f" (at {shape})" if shape else "") + "\n")
        elif e["reachable"] is False:
            out.write(f"    LATENT under {r['host']} {e['entry']}: masked by\n")
            for m in e["masked_by"]:
                out.write(f"      {m}\n")
        else:
            out.write(f"    routing through {r['host']} {e['entry']}: {e['verdict']} {e.get('reason') or ''}\n")


def _routing_word(c: dict) -> str:
    r = c.get("routing") or {}
    if c["verdict"] == "counterexample":
        return {True: "reachable", False: "latent", None: "routing ?"}[r.get("reachable")]
    return r.get("verdict", "") if r.get("verdict") not in (None, c["verdict"]) else ""


def print_table(report: dict, out=sys.stdout):
    for k in report["kernels"]:
        out.write(f"{k['file']}\n  kernel {k['kernel']} ({k['arch']}), host {k.get('host') or 'none'}\n")
        lw = max([8] + [len(c["layout"]) + 2 for c in k["checks"]])
        out.write(f"  {'check':<9}{'buffer':<7}{'layout':<{lw}}{'verdict':<16}{'routing':<13}{'time':>7}\n")
        for c in k["checks"]:
            out.write(f"  {c.get('property', 'address'):<9}{c['buffer']:<7}{c['layout']:<{lw}}{c['verdict']:<16}"
                      f"{_routing_word(c):<13}{c['time_s']:>6.2f}s\n")
        for c in k["checks"]:
            tag = f"{c['buffer']}/{c['layout']}" + (" bounds" if c.get("property") == "bounds" else "")
            if c["verdict"] == "counterexample":
                x = c["counterexample"]
                shape = " ".join(f"{n}={v}" for n, v in x["shape"].items())
                mark = "" if x.get("minimal", True) else " (not proven minimal: the minimisation budget ran out)"
                out.write(f"\n  {tag}: counterexample at {shape}{mark}\n")
                if c.get("cause") == "loop":
                    out.write(f"    LOOP: {c['reason']}\n")
                out.write(f"    batch_id={x['coords']['batch_id']} head_id={x['coords']['head_id']} "
                          f"lane={x['lane']} (access at {x['access_pc']:#x})\n")
                if c.get("property") == "bounds":
                    out.write(f"    {c['reason']}\n")
                else:
                    out.write(f"    byte offset from (0,0): extracted {_signed(x['address']['extracted'])}, "
                              f"expected {_signed(x['address']['expected'])}\n")
                args = ", ".join(f"{n}={v}" for n, v in x["kernargs"].items())
                out.write(f"    kernel arguments: {args}\n")
                if c.get("property", "address") == "address":
                    out.write(f"    extracted: {_short(c['extracted'])}\n    expected:  {c['expected']}\n")
                    out.write(f"    extracted - expected (integer reading, this layout): {_short(c['difference'])}\n")
                if x.get("memory_bytes"):
                    out.write(f"    device memory for every tensor at this shape: {x['memory_bytes'] / 2**30:.2f} GiB\n")
                if c.get("cause") == "overflow":
                    out.write("    OVERFLOW: proved over the integers (--arith int), refuted in hardware arithmetic\n")
                    for w in c.get("overflow", [])[:3]:
                        out.write(f"      wraps: {w['text']}\n")
                elif c.get("cause") == "formula":
                    out.write("    the formula is wrong over the integers too (not an overflow)\n")
                _print_routing(c, out)
            elif c["verdict"] == "unreachable":
                out.write(f"\n  {tag}: unreachable: no shape of the domain reaches the access; excluded by:\n")
                for a in c.get("excluded_by") or []:
                    out.write(f"      {a}\n")
            elif c["verdict"] != "proved":
                out.write(f"\n  {tag}: {c['verdict']}: {c['reason']}\n")
        for lim in k.get("host_limits") or []:
            shape = " ".join(f"{n}={v}" for n, v in lim["shape"].items())
            out.write(f"\n  HOST LIMIT ({lim['layout']}): {lim['argument']} = {lim['exact']} does not fit its "
                      f"argument when {lim['boundary']}\n    smallest shape {shape} "
                      f"({lim['memory_bytes'] / 2**30:.2f} GiB); {lim['source']}\n")
        for c in k["checks"]:
            if c["verdict"] == "proved" and c.get("property", "address") == "address":
                out.write(f"\n  {c['buffer']}/{c['layout']} proved: extracted offset {_short(c['extracted'])}\n"
                          f"  {' ' * len(c['buffer'] + c['layout'])}         expected offset  {c['expected']}\n")
                w = c.get("witness")
                if w:
                    out.write(f"  {' ' * len(c['buffer'] + c['layout'])}         witness: "
                              + " ".join(f"{n}={v}" for n, v in w["shape"].items())
                              + f" batch_id={w['coords']['batch_id']} head_id={w['coords']['head_id']} "
                                f"(offset {w['offset']}, {w['replayed_on']})\n")
                break
        layers = next((c["domain"]["layers"] for c in k["checks"] if c.get("domain")), None)
        if layers:
            out.write(f"\n  domain: {', '.join(layers)} (--json lists every assumption and its source)\n")


def entry():
    try:
        code = main()
    except KeyboardInterrupt:
        sys.stderr.write("addrsim: interrupted\n")
        code = EXIT_BAD_INPUT
    except BrokenPipeError:     # the reader went away (addrsim ... | head): not an error of addrsim
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except Exception as e:  # a bug in addrsim: one line, a distinct exit status, never a traceback
        sys.stderr.write(f"addrsim: internal error: {type(e).__name__}: {e}\n")
        code = EXIT_INTERNAL
    sys.exit(code)


if __name__ == "__main__":
    entry()
