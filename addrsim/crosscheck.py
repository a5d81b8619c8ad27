"""`addrsim crosscheck`: run the verdicts on real attention gradients.

For one kernel and its LSE/D buffers, per layout:

1. **Cases.**  The verdicts of :func:`addrsim.api.verify` give the counterexample shapes
   (predicted to fail); control shapes are made on both sides of every reported boundary by
   setting batch to 1 and by halving seqlen (and nhead) of each counterexample until the
   prover calls the shape right; a proved layout gets small shapes.  Every case's prediction
   is the prover's verdict *at that exact shape* (``--bound`` fixed to it): "fail" when some
   (batch_id, head_id) of the LSE or D buffer is refuted, "pass" when both are proved.
   Shapes outside the kernel family's domain (routing preconditions, memory) are not used.
2. **Address function.**  For each (batch_id, head_id) run, the byte offset of the LSE (and
   D) slice is the kernel's explored address of the buffer's first access, evaluated in
   hardware arithmetic on the kernel arguments the host would pass at that shape and layout
   (:mod:`addrsim.differential`), lane 0 of the first key tile; row r of the slice is read at
   that offset plus 4*r bytes (the per-row step, proved for every loop iteration by the
   address check).  A read outside the V#'s num_records, or outside the LSE/D allocation
   ([batch, nhead_q, seqlen_q] fp32), returns 0, as a buffer load does.
3. **Run.**  A flash-attention backward (:mod:`addrsim.attention`; backends ``torch`` on
   the CPU or GPU, ``triton`` on a GPU, :mod:`addrsim.attention_triton`) reads LSE and D
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

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from . import expr as X
from .api import verify
from .differential import environment, in_domain, load_subject, symbolic_addresses
from .errors import InputError
from .models import SHAPE_VARS, load_models

KEYS = 128
MAX_PAIRS = 16
TOL = 1e-2
MAX_LSE_ELEMS = 1 << 28          # 1 GiB of fp32 per buffer
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


@dataclass
class Result:
    """A case run: ``observed`` "pass"/"fail" ("skipped" with ``note`` when it could not run),
    ``max_rel_err`` per tensor (dq, dk, dv, d), the pairs run, the backend's seconds."""

    case: Case
    observed: str
    max_rel_err: Dict[str, float] = field(default_factory=dict)
    pairs: List[Tuple[int, int]] = field(default_factory=list)
    wrong_pairs: List[Tuple[int, int]] = field(default_factory=list)
    note: str = ""
    time_s: float = 0.0


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
        """Is ``shape`` in the family's domain (routing preconditions, memory) for
        workgroup (0, 0), and inside the user's ``bounds`` (name -> (min, max))?"""
        prob = self.problem(layout)
        if any(not lo <= shape.get(n, lo) <= hi for n, (lo, hi) in (bounds or {}).items()):
            return False
        return in_domain(prob, shape, {s.name: 0 for s in prob.grid.values()}, 0)

    def slice_offset(self, layout: str, buffer: str, shape: Dict[str, int], batch_id: int,
                     head_id: int) -> Tuple[Optional[int], bool]:
        """(byte offset of the slice's row 0 from the buffer pointer, signed; whether the
        V# range check lets row 0 through).  (None, False) when the access does not apply or
        cannot be evaluated there (its reads are then zeros)."""
        prob = self.problem(layout)
        g = prob.grid
        env = environment(self.sub, prob, shape, {g["z"].name: batch_id, g["y"].name: head_id}, 0)
        ptr = self.sub.pointers[buffer]
        try:
            hits = symbolic_addresses(self.sub.ex, ptr, env, undecided="include")
        except Exception:
            return None, False
        if not hits:
            return None, False
        h = next((x for x in hits if x.certain), hits[0])
        off = (h.address - env[ptr]) & X.mask(64)
        off = off - (1 << 64) if off >= 1 << 63 else off
        ok = True
        try:
            ok = X.evaluate(h.target.access.in_range, env) == 1
        except Exception:
            pass
        return off, ok

    def key_side_arguments(self, buffer: str) -> List[str]:
        """Kernel arguments the buffer's address reads that the host derives from seqlen_k
        (none for LSE/D in every kernel addrsim has seen)."""
        from .prove import targets_for
        prob = self.problem(next(iter(self.ms.layouts)))
        ptr = self.sub.pointers[buffer]
        names = set()
        for t in targets_for(self.sub.ex, ptr):
            names |= {n for n, s in X.symbols(t.address).items() if s.kind == "arg"}
        return sorted(n for n in names if n in prob.kernargs and "seqlen_k" in X.symbols(prob.kernargs[n]))


# ----------------------------------------------------------------------------- cases

def _predict(path, layout: str, shape: Dict[str, int], buffers, models, like, timeout_ms) -> Tuple[Optional[str], dict]:
    """The prover's prediction at exactly ``shape``: ("fail", check) if a buffer is refuted,
    ("pass", {}) if all are proved, (None, {}) otherwise."""
    bounds = {v: (int(shape[v]), int(shape[v])) for v in shape if v in SHAPE_VARS}
    rep = verify(path, list(buffers), [layout], models=models, bounds=bounds, timeout_ms=timeout_ms,
                 properties=("address",), like=like, min_budget_s=2.0, check_budget_s=30.0)
    checks = rep["kernels"][0]["checks"]
    for c in checks:
        if c["verdict"] == "counterexample":
            return "fail", c
    if all(c["verdict"] == "proved" for c in checks):
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
    for b, h, s in ((2, 2, 128), (3, 2, 64), (2, 4, 256), (1, 2, 128)):
        for hk in (1, h):
            out.append({"batch": b, "nhead_q": h, "nhead_k": hk, "seqlen_q": s, "seqlen_k": s, "hdim_q": hd, "hdim_v": hv})
    return out


def build_cases(af: AddressFunction, path, layouts: Sequence[str], max_cases: int = 6, like=None,
                timeout_ms: int = 10000, bounds=None, progress=None) -> List[Case]:
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
            if c["verdict"] != "counterexample":
                continue
            x = c["counterexample"]
            shape = {k: int(v) for k, v in x["shape"].items() if k in SHAPE_VARS}
            add(shape, "fail", f"counterexample of {c['buffer']}/{lay} (cause {c.get('cause')})",
                (x["coords"]["batch_id"], x["coords"]["head_id"]))
        for cx in list(fails):
            last_fail = cx.shape
            for s, why in _variants(cx.shape):
                if len(fails) + len(passes) >= 3 * max_cases:
                    break
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
                if pred == "pass" and why.startswith(("seqlen", "nhead")):
                    # the other side of the boundary: the last failing shape on this line
                    if last_fail is not cx.shape:
                        add(last_fail, "fail", f"control just above the boundary ({why})")
                    if why.startswith("seqlen"):
                        continue
                if pred == "fail":
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


# ----------------------------------------------------------------------------- runs

def _pairs(case: Case) -> List[Tuple[int, int]]:
    b, h = case.shape["batch"], case.shape["nhead_q"]
    if b * h <= MAX_PAIRS:
        return [(i, j) for i in range(b) for j in range(h)]
    s = {(0, 0), (b - 1, h - 1), (b - 1, 0), (0, h - 1), (min(1, b - 1), 0)}
    if case.coords:
        s.add(tuple(case.coords))
    return sorted(s)


def run_case(af: AddressFunction, case: Case, backend: str = "torch", device: Optional[str] = None,
             dtype=None, seed: int = 0) -> Result:
    """Run one case on ``backend`` ("torch" or "triton") and compare with the reference."""
    import torch
    from . import attention as A
    t0 = time.time()
    sh = case.shape
    B, H, S, hd, hv = sh["batch"], sh["nhead_q"], sh["seqlen_q"], sh["hdim_q"], sh["hdim_v"]
    keys = min(KEYS, sh["seqlen_k"])
    numel = B * H * S
    if numel > MAX_LSE_ELEMS:
        return Result(case, "skipped", note=f"LSE has {numel} rows, more than {MAX_LSE_ELEMS} (1 GiB)")
    if hd != hv:
        return Result(case, "skipped", note="hdim_q != hdim_v is not run by the cross-check")
    for b_ in case.buffers:
        ks = af.key_side_arguments(b_)
        if ks:
            return Result(case, "skipped", note=f"{b_}'s address reads key-side arguments {ks}: keys cannot be cut")
    device = device or ("cuda" if backend == "triton" else "cpu")
    dtype = dtype or (torch.float16 if "_fp16" in case.kernel else torch.bfloat16)
    scale = A.softmax_scale(hd)
    pairs = _pairs(case)
    starts: Dict[str, Dict[Tuple[int, int], Tuple[Optional[int], bool]]] = {}
    for buf in case.buffers:
        starts[buf] = {p: af.slice_offset(case.layout, buf, sh, *p) for p in pairs}
    # owners: the pairs whose rows the run reads (their forward statistics are needed)
    owners = set(pairs)
    for buf in case.buffers:
        for off, ok in starts[buf].values():
            if off is None or not ok:
                continue
            for r in (0, S - 1):
                idx = off // 4 + r
                if 0 <= idx < numel:
                    owners.add(divmod(idx // S, H))
            first, last = off // 4, off // 4 + S - 1
            for q in range(max(0, first) // S, min(numel - 1, last) // S + 1):
                owners.add(divmod(q, H))
    data = {p: A.pair_data(p[0], p[1], H, S, keys, hd, dtype, seed) for p in sorted(owners)}
    lse_buf = torch.zeros(numel, dtype=torch.float32)
    d_buf = torch.zeros(numel, dtype=torch.float32)
    for (b, h), pd in data.items():
        lse, d = A.forward_stats(pd, scale)
        lse_buf[(b * H + h) * S:(b * H + h + 1) * S] = lse
        d_buf[(b * H + h) * S:(b * H + h + 1) * S] = d
    bufs = {"lse": lse_buf, "d": d_buf}
    refs = {p: A.reference(data[p], scale) for p in pairs}
    if backend == "torch":
        outs = {}
        for p in pairs:
            reads = {}
            for buf in ("lse", "d"):
                off, ok = starts[buf][p] if buf in starts else ((p[0] * H + p[1]) * S * 4, True)
                reads[buf] = gather(bufs[buf], off, ok, S)
            pd = A.PairData(*(t.to(device) for t in (data[p].q, data[p].k, data[p].v, data[p].do)))
            outs[p] = {k: v.cpu() for k, v in A.backward(pd, reads["lse"].to(device), reads["d"].to(device), scale).items()}
    elif backend == "triton":
        from .attention_triton import backward_pairs
        offs = {buf: [starts[buf][p] if buf in starts else ((p[0] * H + p[1]) * S * 4, True) for p in pairs]
                for buf in ("lse", "d")}
        outs = backward_pairs([data[p] for p in pairs], bufs["lse"], bufs["d"], offs["lse"], offs["d"], scale,
                              token_major=case.layout != "bhsd")
        outs = dict(zip(pairs, outs))
    else:
        raise InputError("--backend", f"unknown backend {backend!r} (torch, triton)")
    err = {}
    for t in ("dq", "dk", "dv"):
        num = max((outs[p][t] - refs[p][t]).abs().max().item() if torch.isfinite(outs[p][t]).all() else math.inf
                  for p in pairs)
        den = max(refs[p][t].abs().max().item() for p in pairs)
        err[t] = num / den if den > 0 else 0.0
    # D on its own: the buffer as the pre-processing stage wrote it, at the right rows
    err["d"] = max(A.max_rel_err(d_buf[(b * H + h) * S:(b * H + h + 1) * S], refs[(b, h)]["d"]) for b, h in pairs)
    wrong = [p for p in pairs if any(A.max_rel_err(outs[p][t], refs[p][t]) > TOL for t in ("dq", "dk", "dv"))]
    observed = "fail" if max(err["dq"], err["dk"], err["dv"]) > TOL else "pass"
    return Result(case, observed, {k: float(v) for k, v in err.items()}, pairs, wrong, time_s=time.time() - t0)


def gather(buf, off: Optional[int], ok: bool, rows: int):
    """Rows 0..rows-1 of a slice read at byte offset ``off`` from a flat fp32 buffer; reads
    outside the buffer, or when the V# check fails (``ok`` False), are 0 (a buffer load)."""
    import torch
    if off is None or not ok:
        return torch.zeros(rows, dtype=torch.float32)
    start = off // 4
    idx = torch.arange(start, start + rows, dtype=torch.int64)
    valid = (idx >= 0) & (idx < buf.numel())
    out = torch.zeros(rows, dtype=torch.float32)
    out[valid] = buf[idx[valid]]
    return out


def device_name(backend: str) -> str:
    """The GPU's own name as PyTorch reports it, or "cpu"."""
    import torch
    if backend == "triton" or torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def report(results: List[Result], backend: str, device: str, path: str) -> dict:
    """The JSON of the issue: ``{"device", "backend", "cases": [{"kernel", "buffer",
    "layout", "shape", "predicted", "observed", "max_rel_err": {"dq", "dk", "dv", "d"}}]}``,
    plus ``confusion`` (predicted x observed counts), ``agree`` and per-case details."""
    cases = []
    conf = {f"{p}/{o}": 0 for p in ("pass", "fail") for o in ("pass", "fail", "skipped")}
    for r in results:
        c = r.case
        conf[f"{c.predicted}/{r.observed}"] += 1
        cases.append({"kernel": c.kernel, "file": str(path), "buffer": "+".join(c.buffers), "layout": c.layout,
                      "shape": c.shape, "predicted": c.predicted, "observed": r.observed,
                      "max_rel_err": r.max_rel_err, "why": c.why,
                      "coords": list(c.coords) if c.coords else None, "pairs_run": [list(p) for p in r.pairs],
                      "wrong_pairs": [list(p) for p in r.wrong_pairs], "note": r.note, "time_s": round(r.time_s, 2)})
    ran = [r for r in results if r.observed != "skipped"]
    agree = bool(ran) and all(r.case.predicted == r.observed for r in ran)
    return {"device": device, "backend": backend, "tolerance": TOL, "keys": KEYS, "cases": cases,
            "confusion": conf, "agree": agree}


def format_report(rep: dict) -> str:
    out = [f"device: {rep['device']}   backend: {rep['backend']}   tolerance {rep['tolerance']} (max rel err of dQ/dK/dV)"]
    out.append(f"  {'layout':<7}{'shape':<58}{'pred':<6}{'obs':<8}{'dq':>9}{'dk':>9}{'dv':>9}{'d':>9}  why")
    for c in rep["cases"]:
        s = " ".join(f"{k}={v}" for k, v in c["shape"].items() if k in ("batch", "nhead_q", "nhead_k", "seqlen_q", "hdim_q"))
        e = c["max_rel_err"]
        errs = "".join(f"{e.get(t, float('nan')):>9.1e}" for t in ("dq", "dk", "dv", "d"))
        mark = "" if c["observed"] in (c["predicted"], "skipped") else "  <-- DISAGREE"
        out.append(f"  {c['layout']:<7}{s:<58}{c['predicted']:<6}{c['observed']:<8}{errs}  {c['why']}{mark}"
                   + (f" [{c['note']}]" if c["note"] else ""))
    cf = rep["confusion"]
    out.append("\n  confusion (rows: predicted, columns: observed)")
    out.append(f"  {'':<14}{'pass':>6}{'fail':>6}{'skipped':>9}")
    for p in ("pass", "fail"):
        out.append(f"  predicted {p:<4}{cf[p + '/pass']:>6}{cf[p + '/fail']:>6}{cf[p + '/skipped']:>9}")
    out.append(f"\ncross-check {'PASSES: predicted and observed agree in every case run' if rep['agree'] else 'FAILS'}")
    return "\n".join(out)
