"""`addrsim crosscheck`: run the verdicts on real attention gradients.

For one kernel and its LSE/D buffers, per layout:

1. **Cases.**  The verdicts of :func:`addrsim.api.verify` give the counterexample shapes
   (predicted to fail); control shapes are made on both sides of every reported boundary by
   setting batch to 1 and by halving seqlen (and nhead) of each counterexample until the
   prover calls the shape right; a proved layout gets small shapes.  Every case's prediction
   is the prover's verdict *at that exact shape* (``--bound`` fixed to it): "fail" when some
   (batch_id, head_id) of the LSE or D buffer is refuted, "pass" when both are proved.
   Shapes outside the kernel's domain (bounds, traits, exact arguments, memory) are not used.
2. **Address function.**  For each (batch_id, head_id) run, the byte offset of the LSE (and
   D) slice is the kernel's explored address of the buffer's first access, evaluated in
   hardware arithmetic on the kernel arguments the host would pass at that shape and layout
   (:mod:`addrsim.prove.differential`), lane 0 of the first key tile; row r of the slice is read at
   that offset plus 4*r bytes (the per-row step, proved for every loop iteration by the
   address check).  A read outside the V#'s num_records, or outside the LSE/D allocation
   ([batch, nhead_q, seqlen_q] fp32), returns 0, as a buffer load does.
3. **Run** (:mod:`addrsim.gpu.crossrun`, which needs only PyTorch: the plan of steps 1-2 is JSON
   and can be run on another machine).  A flash-attention backward (:mod:`addrsim.gpu.attention`;
   backends ``torch`` on the CPU or GPU, ``triton`` on a GPU, :mod:`addrsim.gpu.attention_triton`) reads LSE and D
   through those offsets from buffers holding the true forward statistics, with Q, dO stored
   in the case layout's row order, and its dQ, dK, dV are compared with PyTorch autograd in
   fp32.  Keys are cut to ``KEYS`` rows: the LSE/D offsets do not depend on the key count
   (checked: the address function's kernel arguments are evaluated at the full shape, and the
   run refuses a case whose LSE/D address reads a key-side argument).  When the shape has
   more than ``MAX_PAIRS`` (batch_id, head_id) pairs, the pairs run are the corners, the
   counterexample's pair, and every pair whose rows those read.
4. **Verdict.**  observed "fail" when max |x - ref| / max |ref| of dQ, dK or dV exceeds
   ``TOL``; D is checked on its own (the buffer the pre-processing stage writes, against
   autograd's rowsum(dO * O)): it passes even when the gradients fail, the engineers'
   stage-split signature.  The cross-check passes when predicted == observed in every case.

Tolerance: inputs are rounded to bf16/fp16 once and both sides compute in fp32 from the same
rounded values, so a correct run differs from the reference by fp32 rounding only (measured
below 1e-5).  ``TOL`` = 1e-2 is aiter's own bf16 tolerance for the backward (op_tests), which
a backend that keeps P or dS in 16 bits would still meet; reading another slice's LSE row
changes P by a factor exp(delta LSE), an error of order 1, and a zero read (out of range) by
exp(LSE), far above it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from addrsim.ir import expr as X
from addrsim.api import verify
from addrsim.prove.differential import in_domain, load_subject, slice_offset
from addrsim.errors import InputError
from addrsim.files import atomic_open
from addrsim.model.models import SHAPE_VARS, load_models

from addrsim.gpu.crossrun import KEYS
import json
import sys

from addrsim.api import DEFAULT_LAYOUTS
from addrsim.commands.common import bound_arg, bounds_of, check_outputs, emit
from addrsim.errors import AddrsimError
from addrsim.prove.verdict import Verdict

MAX_PAIRS = 16
CXBUFFERS = ("lse", "d")


@dataclass
class Case:
    """One shape to run: ``shape`` (every shape variable), ``predicted`` "pass"/"fail" (the
    prover's verdict at that shape), ``why`` (where the case comes from), ``coords`` the
    counterexample's (batch_id, head_id) when there is one."""

    kernel: str
    layout: str
    shape: Dict[str, int]
    predicted: str
    why: str
    coords: Optional[Tuple[int, int]] = None
    buffers: Tuple[str, ...] = CXBUFFERS
    pointers: Optional[Dict[str, int]] = None    # the counterexample's kernel arguments (its pointers)


class AddressFunction:
    """The kernel's LSE/D slice offsets as a function of (layout, shape, batch_id, head_id).

    Built from the explored symbolic addresses of the code object (or listing) at ``path``;
    raises InputError (bad file, group-mode family: not supported by the cross-check yet)."""

    def __init__(self, path, buffers: Sequence[str] = CXBUFFERS, models=None, like=None):
        self.ms = models or load_models()
        self.sub = load_subject(path, tuple(buffers), self.ms, like=like)
        self.buffers = [b for b in buffers if b in self.sub.pointers]
        missing = [b for b in buffers if b not in self.sub.pointers]
        if missing:
            raise InputError(path, f"kernel {self.sub.kernel.symbol} has no pointer argument for {', '.join(missing)}")

    def problem(self, layout: str):
        p = self.sub.problem(layout)
        if p.mode != "batch":
            raise InputError(self.sub.path, "crosscheck supports batch-mode kernels (LSE [batch, nhead_q, seqlen_q]); "
                                            "this kernel family is group mode")
        return p

    def in_domain(self, layout: str, shape: Dict[str, int], bounds=None) -> bool:
        """Is ``shape`` in the family's domain (bounds, traits, exact arguments, memory; not routing) for
        workgroup (0, 0), and inside the user's ``bounds`` (name -> (min, max))?"""
        prob = self.problem(layout)
        if any(not lo <= shape.get(n, lo) <= hi for n, (lo, hi) in (bounds or {}).items()):
            return False
        return in_domain(prob, shape, {s.name: 0 for s in prob.grid.values()}, 0)

    def slice_offset(self, layout: str, buffer: str, shape: Dict[str, int], batch_id: int,
                     head_id: int) -> Tuple[Optional[int], bool]:
        """:func:`addrsim.prove.differential.slice_offset` in ``layout``: (byte offset of the
        (batch_id, head_id) slice from slice (0, 0), signed; whether the V# range check lets
        the access through); slice (0, 0) itself is taken to start at row 0."""
        return slice_offset(self.sub, self.sub.ex, self.sub.pointers[buffer], self.problem(layout), shape,
                            batch_id, head_id)

    def key_side_arguments(self, buffer: str) -> List[str]:
        """Kernel arguments the buffer's address reads that the host derives from seqlen_k
        (none for LSE/D in every kernel addrsim has seen)."""
        from addrsim.prove.targets import targets_for
        prob = self.problem(next(iter(self.ms.layouts)))
        ptr = self.sub.pointers[buffer]
        names = set()
        for t in targets_for(self.sub.ex, ptr):
            names |= {n for n, s in X.symbols(t.address).items() if s.kind == "arg"}
        return sorted(n for n in names if n in prob.kernargs and "seqlen_k" in X.symbols(prob.kernargs[n]))


# ----------------------------------------------------------------------------- cases

def _predict(path, layout: str, shape: Dict[str, int], buffers, models, like, timeout_ms=None) -> Tuple[Optional[str], dict]:
    """The prover's prediction at exactly ``shape``: ("fail", check) if a buffer is refuted,
    ("pass", {}) if all are proved, (None, {}) otherwise."""
    bounds = {v: (int(shape[v]), int(shape[v])) for v in shape if v in SHAPE_VARS}
    rep = verify(path, list(buffers), [layout], models=models, bounds=bounds, timeout_ms=timeout_ms,
                 properties=("address",), like=like, min_mru=2.0, check_mru=30.0)
    checks = rep["kernels"][0]["checks"]
    for c in checks:
        if c["verdict"] == Verdict.COUNTEREXAMPLE:
            return "fail", c
    if all(c["verdict"] == Verdict.PROVED for c in checks):
        return "pass", {}
    return None, {}


def _variants(shape: Dict[str, int]) -> List[Tuple[Dict[str, int], str]]:
    """Control shapes around a counterexample: batch 1, and seqlen / nhead halved 1..12 times
    (seqlen_q and seqlen_k together)."""
    out = [(dict(shape, batch=1), "batch=1")]
    for k in range(1, 13):
        s = dict(shape, seqlen_q=max(1, shape["seqlen_q"] >> k), seqlen_k=max(1, shape["seqlen_k"] >> k))
        out.append((s, f"seqlen/{2 ** k}"))
    for k in range(1, 9):
        nh = max(1, shape["nhead_q"] >> k)
        out.append((dict(shape, nhead_q=nh, nhead_k=min(shape["nhead_k"], nh)), f"nhead_q/{2 ** k}"))
    return out


def _small_shapes(fixed: Dict[str, int]) -> List[Dict[str, int]]:
    hd = fixed.get("hdim_q", 128)
    hv = fixed.get("hdim_v", hd)
    out = []
    for b, h, s in ((2, 2, 128), (3, 2, 64), (2, 4, 256), (1, 2, 128), (1, 4, 256)):
        out.append({"batch": b, "nhead_q": h, "nhead_k": h, "seqlen_q": s, "seqlen_k": s, "hdim_q": hd, "hdim_v": hv})
    return out


def build_cases(af: AddressFunction, path, layouts: Sequence[str], max_cases: int = 6, like=None,
                timeout_ms: Optional[int] = None, bounds=None, progress=None) -> List[Case]:
    """The cases of every layout (see the module docstring), at most ``max_cases`` per
    layout: counterexamples first, then controls (alternating sides of the boundary)."""
    out: List[Case] = []
    sym = af.sub.kernel.symbol
    for lay in layouts:
        prob = af.problem(lay)
        rep = verify(path, af.buffers, [lay], models=af.ms, bounds=bounds, timeout_ms=timeout_ms,
                     properties=("address",), like=like)
        checks = rep["kernels"][0]["checks"]
        seen = set()
        fails: List[Case] = []
        passes: List[Case] = []

        def add(shape, pred, why, coords=None):
            key = tuple(sorted(shape.items()))
            if key in seen:
                return
            seen.add(key)
            (fails if pred == "fail" else passes).append(Case(sym, lay, dict(shape), pred, why, coords, tuple(af.buffers)))

        for c in checks:
            if c["verdict"] != Verdict.COUNTEREXAMPLE:
                continue
            x = c["counterexample"]
            shape = {k: int(v) for k, v in x["shape"].items() if k in SHAPE_VARS}
            add(shape, "fail", f"counterexample of {c['buffer']}/{lay} (cause {c.get('cause')})",
                (x["coords"]["batch_id"], x["coords"]["head_id"]))
        for cx in list(fails):
            last_fail = cx.shape
            done = set()                  # lines (seqlen, nhead) that crossed the boundary
            for s, why in _variants(cx.shape):
                line = why.split("/")[0].split("=")[0]
                if line in done or len(fails) + len(passes) >= 3 * max_cases:
                    continue
                if not af.in_domain(lay, s, bounds) or tuple(sorted(s.items())) in seen:
                    continue
                pred, chk = _predict(path, lay, s, af.buffers, af.ms, like, timeout_ms)
                if progress:
                    progress(f"{lay}: control {why}: predicted {pred}")
                if pred is None:
                    continue
                coords = None
                if chk:
                    coords = (chk["counterexample"]["coords"]["batch_id"], chk["counterexample"]["coords"]["head_id"])
                add(s, pred, f"control {why} of the {cx.why.split(' (')[0]}", coords)
                if pred == "pass" and line in ("seqlen", "nhead_q"):
                    done.add(line)        # the first shape below the boundary on this line, and
                    if last_fail is not cx.shape:   # the last one above it
                        add(last_fail, "fail", f"control just above the boundary ({why} passes)")
                    last_fail = cx.shape
                elif pred == "fail":
                    last_fail = s
        for s in _small_shapes(prob.fixed):
            if len(passes) >= max_cases:
                break
            if not af.in_domain(lay, s, bounds):
                continue
            pred, chk = _predict(path, lay, s, af.buffers, af.ms, like, timeout_ms)
            if pred is not None:
                coords = None
                if chk:
                    coords = (chk["counterexample"]["coords"]["batch_id"], chk["counterexample"]["coords"]["head_id"])
                add(s, pred, "small shape", coords)
        picked: List[Case] = []
        i = 0
        while len(picked) < max_cases and (i < len(fails) or i < len(passes)):
            for lst in (fails, passes):
                if i < len(lst) and len(picked) < max_cases:
                    picked.append(lst[i])
            i += 1
        out += picked
    return out




# ----------------------------------------------------------------------------- plans

def _pairs(case: Case) -> List[Tuple[int, int]]:
    """The (batch_id, head_id) pairs a case runs: all of them up to MAX_PAIRS, else the
    corners, (1, 0) and the counterexample's pair."""
    b, h = case.shape["batch"], case.shape["nhead_q"]
    if b * h <= MAX_PAIRS:
        return [(i, j) for i in range(b) for j in range(h)]
    s = {(0, 0), (b - 1, h - 1), (b - 1, 0), (0, h - 1), (min(1, b - 1), 0)}
    if case.coords:
        s.add(tuple(case.coords))
    return sorted(s)


def plan_case(af: AddressFunction, case: Case, path) -> dict:
    """The JSON plan of one case for :func:`addrsim.gpu.crossrun.run_case`: shape, prediction,
    pairs, and the slice offsets (bytes from the buffer pointer, V# check) per pair and
    buffer, evaluated on the kernel's address function at the case's shape."""
    pairs = _pairs(case)
    offsets = {}
    for buf in case.buffers:
        offsets[buf] = {f"{b},{h}": list(af.slice_offset(case.layout, buf, case.shape, b, h)) for b, h in pairs}
    skip = ""
    for buf in case.buffers:
        ks = af.key_side_arguments(buf)
        if ks:
            skip = f"{buf}'s address reads key-side arguments {ks}: keys cannot be cut"
    return {"kernel": case.kernel, "file": str(path), "layout": case.layout, "shape": case.shape,
            "predicted": case.predicted, "why": case.why, "coords": list(case.coords) if case.coords else None,
            "buffers": list(case.buffers), "pairs": [list(p) for p in pairs], "offsets": offsets,
            "dtype": "fp16" if "_fp16" in case.kernel else "bf16", "keys": KEYS, "skip": skip}


# ----------------------------------------------------------------------------- the command

def register(sub) -> None:
    """Add the ``crosscheck`` subcommand to ``sub`` (argparse subparsers)."""
    cx = sub.add_parser("crosscheck", help="run the LSE/D verdicts on real attention gradients (GPU or CPU)")
    cx.add_argument("file", metavar="FILE.co|LISTING.s")
    cx.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    cx.add_argument("--buffer", action="append", help="lse and/or d (default both)")
    cx.add_argument("--layout", action="append", help=f"layout (repeatable; default {' '.join(DEFAULT_LAYOUTS)})")
    cx.add_argument("--backend", choices=("torch", "triton"), default="torch",
                    help="torch (CPU, or the GPU with --device cuda) or triton (GPU)")
    cx.add_argument("--device", default=None, help="torch device for the torch backend (default cpu)")
    cx.add_argument("--cases", type=int, default=6, metavar="N", help="cases per layout (default 6; --emulate takes at least 10, so that its small shapes run)")
    cx.add_argument("--plot", metavar="FILE.png", help="draw the LSE rows each (batch_id, head_id) reads")
    cx.add_argument("--plan-out", metavar="PLAN.json", help="only write the cases and their offsets (no run); run "
                    "them elsewhere with python3 -m addrsim.gpu.crossrun PLAN.json")
    cx.add_argument("--json", metavar="FILE", help="write the cross-check report ('-' for stdout)")
    cx.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    cx.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX")
    cx.add_argument("--emulate", action="store_true",
                    help="run the cases on the virtual MI300 (the real code object, every instruction) instead of "
                         "a PyTorch model of the kernel")
    cx.add_argument("--timeout", type=int, default=None, metavar="MS",
                    help="the query budget as nominal ms (converted to resource units; default 10 Mru)")


def run(args) -> int:
    from addrsim.gpu.crossrun import format_report, run_plan
    try:
        models = load_models(list(args.model))
        buffers = args.buffer or ["lse", "d"]
        for b in buffers:
            if b not in ("lse", "d") and not args.emulate:
                raise InputError("--buffer", f"crosscheck reads LSE and D: {b!r} is not one of lse, d (every "
                                             f"buffer with --emulate)")
        if args.cases < 1:
            raise InputError("--cases", "needs at least 1 case per layout")
        check_outputs(args, (("plot", "--plot"), ("plan_out", "--plan-out"), ("json", "--json")))
        layouts = args.layout or list(DEFAULT_LAYOUTS)
        for lay in layouts:
            if lay not in models.layouts:
                raise InputError("--layout", f"unknown layout {lay!r}")
        if args.emulate:
            return _emulated(args, buffers, models, layouts)
        af = AddressFunction(args.file, buffers, models, like=args.like)
        run = not args.plan_out
        try:
            if run:
                import torch  # noqa: F401
        except ImportError:
            raise InputError("--backend", "the cross-check needs PyTorch: pip install -e '.[gpu]'") from None
        if run and args.device:
            try:
                dev = torch.device(args.device)
            except (RuntimeError, ValueError) as e:
                raise InputError("--device", f"not a torch device: {args.device!r} ({e})") from None
            if dev.type == "cuda" and not torch.cuda.is_available():
                raise InputError("--device", f"{args.device}: no CUDA GPU here (torch.cuda.is_available() is False)")
            if dev.type not in ("cpu", "cuda"):
                raise InputError("--device", f"{args.device}: the torch backend runs on cpu or cuda")
        if run and args.backend == "triton":
            try:
                __import__("triton")
            except ImportError:
                raise InputError("--backend", "the triton backend needs Triton and a CUDA GPU") from None
            if not torch.cuda.is_available():
                raise InputError("--backend", "the triton backend needs a CUDA GPU (torch.cuda.is_available() is False)")
        cases = build_cases(af, args.file, layouts, args.cases, like=args.like, timeout_ms=args.timeout,
                            bounds=bounds_of(args) or None,
                            progress=lambda m: sys.stderr.write(f"addrsim: {m}\n"))
        plan = {"tool": "addrsim", "kernel": af.sub.kernel.symbol, "file": str(args.file),
                "cases": [plan_case(af, c, args.file) for c in cases]}
        if args.plan_out:
            with atomic_open(args.plan_out, "w") as fh:
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
        return e.exit_code
    if args.plan_out:
        return 0
    bad = emit(rep, args.json, lambda: format_report(rep))
    if bad is not None:
        return bad
    ran = [c for c in rep["cases"] if c["observed"] != "skipped"]
    if not ran:
        return 2
    return 0 if rep["agree"] else 1


def _emulated(args, buffers, models, layouts) -> int:
    """``--emulate``: the cases run on the virtual MI300 (:mod:`addrsim.commands.emucheck`):
    LSE/D's cross-check cases, and for any other buffer its counterexamples and small shapes
    (:func:`addrsim.commands.emucheck.verify_cases`)."""
    from addrsim.commands.emucheck import emulate_cases, format_emulated, verify_cases
    say = lambda m: sys.stderr.write(f"addrsim: {m}\n")   # noqa: E731
    cx = [b for b in buffers if b in CXBUFFERS]
    others = [b for b in buffers if b not in CXBUFFERS]
    cases = []
    if cx:
        af = AddressFunction(args.file, cx, models, like=args.like)
        cases += build_cases(af, args.file, layouts, max(args.cases, 10), like=args.like, timeout_ms=args.timeout,
                             bounds=bounds_of(args) or None, progress=say)  # more cases: the small shapes run
    if others:
        cases += verify_cases(args.file, others, layouts, models, like=args.like, progress=say)
    rep = emulate_cases(cases, args.file, models, like=args.like, progress=say)
    bad = emit(rep, args.json, lambda: format_emulated(rep))
    if bad is not None:
        return bad
    if not any(r["observed"] != "skipped" for r in rep["cases"]):
        return 2
    return 0 if rep["agree"] else 1
