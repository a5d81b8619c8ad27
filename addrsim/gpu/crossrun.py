"""Running cross-check plans: the GPU (or CPU) half of `addrsim crosscheck`.

A plan (:func:`addrsim.commands.crosscheck.plan_case` per case, JSON) holds, per case, the shape, the
prover's prediction, and the kernel's LSE/D slice offsets (bytes from the buffer pointer,
and whether the V# range check passes) for every (batch_id, head_id) pair the run uses.  This
module needs only PyTorch (and Triton for the ``triton`` backend): no solver, no LLVM, so the
plan is made where addrsim is installed and run on the accelerator machine:

    python3 -m addrsim.gpu.crossrun PLAN.json --backend triton --json RESULT.json

See :mod:`addrsim.commands.crosscheck` for what a case checks and the tolerance.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from addrsim.model.layout import VIEWS    # pure Python: the runner needs only PyTorch besides

KEYS = 64
TOL = 1e-2
MAX_LSE_ELEMS = 1 << 30          # 4 GiB of fp32 per buffer


@dataclass
class Result:
    """A case run: ``observed`` "pass"/"fail" ("skipped" with ``note`` when it could not run),
    ``max_rel_err`` per tensor (dq, dk, dv, d), the pairs whose gradients are wrong, seconds."""

    case: dict
    observed: str
    max_rel_err: Dict[str, float] = field(default_factory=dict)
    wrong_pairs: List[Tuple[int, int]] = field(default_factory=list)
    note: str = ""
    time_s: float = 0.0


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


def token_major(layout: str) -> bool:
    """Whether Q/dO rows of ``layout`` are stored sequence before head (bshd, sbhd: token-major)
    or head before sequence (bhsd): from the Layout value's storage order."""
    dims = VIEWS[layout][0]
    return dims.index("s") < dims.index("h")


def _offsets(case: dict, buf: str, pair: Tuple[int, int], H: int, S: int) -> Tuple[Optional[int], bool]:
    """The planned offset of ``buf`` for ``pair``; a buffer the case does not check is read at
    its right place."""
    o = case.get("offsets", {}).get(buf)
    if o is None:
        return (pair[0] * H + pair[1]) * S * 4, True
    off, ok = o[f"{pair[0]},{pair[1]}"]
    return off, bool(ok)


class PlanError(ValueError):
    """A plan that is not what :func:`addrsim.commands.crosscheck.plan_case` writes (message: what)."""


def _int(v, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def validate_plan(plan) -> None:
    """Check the structure of a plan before running anything.  Raises PlanError naming the
    first case and field that is wrong."""
    if not isinstance(plan, dict) or not isinstance(plan.get("cases"), list):
        raise PlanError('expected a JSON object with a "cases" list')
    for i, c in enumerate(plan["cases"]):
        where = f"case {i}"
        if not isinstance(c, dict):
            raise PlanError(f"{where}: not an object")
        for k, t in (("kernel", str), ("layout", str), ("shape", dict), ("predicted", str), ("buffers", list),
                     ("pairs", list), ("offsets", dict)):
            if not isinstance(c.get(k), t):
                raise PlanError(f"{where}: {k!r} missing or not a {t.__name__}")
        if c["layout"] not in VIEWS:
            raise PlanError(f"{where}: layout {c['layout']!r} (the runner stores Q/dO as bhsd, bshd or sbhd)")
        if c["predicted"] not in ("pass", "fail"):
            raise PlanError(f"{where}: predicted must be pass or fail")
        sh = c["shape"]
        for k in ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v"):
            if not _int(sh.get(k), 1, (1 << 31) - 1):
                raise PlanError(f"{where}: shape.{k} missing or not a size")
        if c.get("dtype", "bf16") not in ("bf16", "fp16"):
            raise PlanError(f"{where}: dtype must be bf16 or fp16")
        if not _int(c.get("keys", KEYS), 1, 4096):
            raise PlanError(f"{where}: keys must be 1..4096")
        if not c["buffers"] or any(b not in ("lse", "d") for b in c["buffers"]):
            raise PlanError(f"{where}: buffers must be lse and/or d")
        if not c["pairs"]:
            raise PlanError(f"{where}: no (batch_id, head_id) pairs")
        for p in c["pairs"]:
            if not (isinstance(p, list) and len(p) == 2 and _int(p[0], 0, sh["batch"] - 1)
                    and _int(p[1], 0, sh["nhead_q"] - 1)):
                raise PlanError(f"{where}: pair {p!r} outside batch {sh['batch']} x nhead_q {sh['nhead_q']}")
        for b in c["buffers"]:
            offs = c["offsets"].get(b)
            if not isinstance(offs, dict):
                raise PlanError(f"{where}: no offsets for {b}")
            for p in c["pairs"]:
                o = offs.get(f"{p[0]},{p[1]}")
                if not (isinstance(o, list) and len(o) == 2 and (o[0] is None or _int(o[0], -(1 << 63), (1 << 63) - 1))
                        and isinstance(o[1], bool)):
                    raise PlanError(f"{where}: offset of {b} for pair {p} must be [bytes or null, true/false]")


def run_case(case: dict, backend: str = "torch", device: Optional[str] = None, seed: int = 0) -> Result:
    """Run one planned case on ``backend`` ("torch" or "triton") and compare dQ, dK, dV with
    the fp32 autograd reference (:mod:`addrsim.gpu.attention`).  Raises ValueError for an unknown
    backend."""
    import torch
    from addrsim.gpu import attention as A
    t0 = time.time()
    sh = case["shape"]
    B, H, S, hd, hv = sh["batch"], sh["nhead_q"], sh["seqlen_q"], sh["hdim_q"], sh["hdim_v"]
    keys = min(case.get("keys", KEYS), sh["seqlen_k"])
    numel = B * H * S
    if numel > MAX_LSE_ELEMS:
        return Result(case, "skipped", note=f"LSE has {numel} rows, more than {MAX_LSE_ELEMS} (4 GiB of fp32)")
    if hd != hv:
        return Result(case, "skipped", note="hdim_q != hdim_v is not run by the cross-check")
    if case.get("skip"):
        return Result(case, "skipped", note=case["skip"])
    if backend not in ("torch", "triton"):
        raise ValueError(f"unknown backend {backend!r} (torch, triton)")
    device = device or ("cuda" if backend == "triton" else "cpu")
    dtype = torch.float16 if case.get("dtype") == "fp16" else torch.bfloat16
    scale = A.softmax_scale(hd)
    pairs = [tuple(p) for p in case["pairs"]]
    # owners: the pairs whose rows the run reads (their forward statistics are needed)
    owners = set(pairs)
    for buf in ("lse", "d"):
        for p in pairs:
            off, ok = _offsets(case, buf, p, H, S)
            if off is None or not ok:
                continue
            first, last = off // 4, off // 4 + S - 1
            for q in range(max(0, first) // S, min(numel - 1, last) // S + 1):
                if 0 <= q < B * H:
                    owners.add(divmod(q, H))
    data = {p: A.pair_data(p[0], p[1], H, S, keys, hd, dtype, seed, device) for p in sorted(owners)}
    bufs = {"lse": torch.zeros(numel, dtype=torch.float32), "d": torch.zeros(numel, dtype=torch.float32)}
    for (b, h), pd in data.items():
        lse, d = A.forward_stats(pd, scale)
        bufs["lse"][(b * H + h) * S:(b * H + h + 1) * S] = lse.cpu()
        bufs["d"][(b * H + h) * S:(b * H + h + 1) * S] = d.cpu()
    refs = {p: A.reference(data[p], scale) for p in pairs}
    offs = {buf: [_offsets(case, buf, p, H, S) for p in pairs] for buf in ("lse", "d")}
    if backend == "torch":
        outs = {}
        for i, p in enumerate(pairs):
            lse = gather(bufs["lse"], *offs["lse"][i], S).to(device)
            d = gather(bufs["d"], *offs["d"][i], S).to(device)
            outs[p] = A.backward(data[p], lse, d, scale)
    else:
        from addrsim.gpu.attention_triton import backward_pairs
        res = backward_pairs([data[p] for p in pairs], bufs["lse"], bufs["d"], offs["lse"], offs["d"], scale,
                             token_major=token_major(case["layout"]), device=device)
        outs = dict(zip(pairs, res))
    err = {}
    for t in ("dq", "dk", "dv"):
        num = max((outs[p][t] - refs[p][t]).abs().max().item() if torch.isfinite(outs[p][t]).all() else math.inf
                  for p in pairs)
        den = max(refs[p][t].abs().max().item() for p in pairs)
        err[t] = A.relative(num, den)
    # D on its own: the buffer as the pre-processing stage wrote it, at the right rows
    err["d"] = max(A.max_rel_err(bufs["d"][(b * H + h) * S:(b * H + h + 1) * S].to(device), refs[(b, h)]["d"])
                   for b, h in pairs)
    wrong = [p for p in pairs if any(A.max_rel_err(outs[p][t], refs[p][t]) > TOL for t in ("dq", "dk", "dv"))]
    observed = "fail" if max(err["dq"], err["dk"], err["dv"]) > TOL else "pass"
    return Result(case, observed, {k: float(v) for k, v in err.items()}, wrong, time_s=time.time() - t0)


def device_name(backend: str, device: Optional[str] = None) -> str:
    """The GPU's own name as PyTorch reports it (``torch.cuda.get_device_name``), or "cpu"."""
    import torch
    if backend == "triton" or (device or "cpu").startswith("cuda"):
        return torch.cuda.get_device_name(0)
    return "cpu"


def report(results: List[Result], backend: str, device: str) -> dict:
    """The issue's JSON: ``{"device", "backend", "cases": [{"kernel", "buffer", "layout",
    "shape", "predicted", "observed", "max_rel_err": {"dq", "dk", "dv", "d"}}]}`` plus
    ``confusion`` (predicted/observed counts), ``agree`` and per-case details."""
    cases = []
    conf = {f"{p}/{o}": 0 for p in ("pass", "fail") for o in ("pass", "fail", "skipped")}
    for r in results:
        c = r.case
        conf[f"{c['predicted']}/{r.observed}"] += 1
        cases.append({"kernel": c["kernel"], "file": c.get("file", ""), "buffer": "+".join(c["buffers"]),
                      "layout": c["layout"], "shape": c["shape"], "predicted": c["predicted"],
                      "observed": r.observed, "max_rel_err": r.max_rel_err, "why": c.get("why", ""),
                      "coords": c.get("coords"), "pairs_run": c["pairs"],
                      "wrong_pairs": [list(p) for p in r.wrong_pairs], "note": r.note, "time_s": round(r.time_s, 2)})
    ran = [r for r in results if r.observed != "skipped"]
    agree = bool(ran) and all(r.case["predicted"] == r.observed for r in ran)
    return {"device": device, "backend": backend, "tolerance": TOL, "keys": KEYS, "cases": cases,
            "confusion": conf, "agree": agree}


def format_report(rep: dict) -> str:
    """The text table of a report, with the confusion table and the overall result."""
    out = [f"device: {rep['device']}   backend: {rep['backend']}   tolerance {rep['tolerance']} "
           f"(max |x - ref| / max |ref| of dQ, dK, dV)"]
    out.append(f"  {'layout':<7}{'shape':<52}{'pred':<6}{'obs':<8}{'dq':>9}{'dk':>9}{'dv':>9}{'d':>9}  why")
    kern = None
    for c in rep["cases"]:
        if c["kernel"] != kern:
            kern = c["kernel"]
            out.append(f"  kernel {kern} ({c['file']})")
        s = " ".join(f"{k}={v}" for k, v in c["shape"].items() if k in ("batch", "nhead_q", "nhead_k", "seqlen_q", "hdim_q"))
        e = c["max_rel_err"]
        errs = "".join(f"{e.get(t, float('nan')):>9.1e}" for t in ("dq", "dk", "dv", "d"))
        mark = "" if c["observed"] in (c["predicted"], "skipped") else "  <-- DISAGREE"
        out.append(f"  {c['layout']:<7}{s:<52}{c['predicted']:<6}{c['observed']:<8}{errs}  {c['why']}{mark}"
                   + (f" [{c['note']}]" if c["note"] else ""))
    cf = rep["confusion"]
    out.append("\n  confusion (rows: predicted, columns: observed)")
    out.append(f"  {'':<16}{'pass':>6}{'fail':>6}{'skipped':>9}")
    for p in ("pass", "fail"):
        out.append(f"  predicted {p:<6}{cf[p + '/pass']:>6}{cf[p + '/fail']:>6}{cf[p + '/skipped']:>9}")
    out.append(f"\ncross-check {'PASSES: predicted and observed agree in every case run' if rep['agree'] else 'FAILS'}")
    return "\n".join(out)


def run_plan(plan: dict, backend: str, device: Optional[str] = None, progress=None,
             checkpoint: Optional[str] = None) -> dict:
    """Run every case of a plan; the report (:func:`report`) with ``device_s`` (seconds of
    the runs), ``cases_per_s`` and ``complete``.  ``checkpoint``: a JSON file rewritten with
    the report so far after each case (a run cut short keeps what it did)."""
    t0 = time.time()
    results = []
    name = device_name(backend, device)

    def rep_now(complete):
        rep = report(results, backend, name)
        rep["device_s"] = round(time.time() - t0, 2)
        rep["cases_per_s"] = round(len(results) / max(rep["device_s"], 1e-9), 3)
        rep["complete"] = complete
        return rep

    for c in plan["cases"]:
        results.append(run_case(c, backend, device))
        if progress:
            progress(f"{c['kernel']} {c['layout']} {c['predicted']} -> {results[-1].observed} "
                     f"({results[-1].time_s:.1f}s)")
        if checkpoint:
            with open(checkpoint, "w") as fh:
                json.dump(rep_now(False), fh)
    return rep_now(True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m addrsim.gpu.crossrun", description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", help="plan JSON written by addrsim crosscheck --plan-out")
    ap.add_argument("--backend", choices=("torch", "triton"), default="triton")
    ap.add_argument("--device", default=None)
    ap.add_argument("--json", help="write the report here")
    a = ap.parse_args(argv)
    try:
        with open(a.plan) as fh:
            plan = json.load(fh)
        validate_plan(plan)
    except OSError as e:
        print(f"addrsim: {a.plan}: cannot read the plan ({e.strerror})", file=sys.stderr)
        return 3
    except (ValueError, RecursionError) as e:      # json.JSONDecodeError and PlanError
        print(f"addrsim: {a.plan}: not a cross-check plan: {' '.join(str(e).split())[:300]}", file=sys.stderr)
        return 3
    if not plan["cases"]:
        print(f"addrsim: {a.plan}: the plan has no cases", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("addrsim: the cross-check needs PyTorch: pip install -e '.[gpu]'", file=sys.stderr)
        return 3
    if a.device is not None:
        try:
            dev = torch.device(a.device)
        except (RuntimeError, ValueError) as e:
            print(f"addrsim: --device {a.device}: not a PyTorch device ({' '.join(str(e).split())[:200]})",
                  file=sys.stderr)
            return 3
        if dev.type not in ("cpu", "cuda"):
            print(f"addrsim: --device {a.device}: the cross-check runs on cpu or cuda devices only", file=sys.stderr)
            return 3
    if a.backend == "triton" or (a.device or "cpu").startswith("cuda"):
        if not torch.cuda.is_available():
            print("addrsim: --backend triton (or a cuda device) needs a CUDA GPU: torch.cuda.is_available() is False",
                  file=sys.stderr)
            return 3
    if a.json and (os.path.isdir(a.json) or not os.access(os.path.dirname(os.path.abspath(a.json)), os.W_OK)):
        print(f"addrsim: {a.json}: cannot write the report here", file=sys.stderr)
        return 3
    rep = run_plan(plan, a.backend, a.device, progress=lambda m: print(m, file=sys.stderr, flush=True),
                   checkpoint=a.json)
    print(format_report(rep))
    print(f"device time of the runs: {rep['device_s']} s, {rep['cases_per_s']} cases/s")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rep, fh, indent=2)
    return 0 if rep["agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
