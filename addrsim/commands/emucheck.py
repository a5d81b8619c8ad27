"""`addrsim crosscheck --emulate`: the cross-check's cases run on the virtual MI300 instead of
a PyTorch model of the kernel (issue 37, item 6).

Owns :func:`emulate_cases` and :func:`format_emulated`.  The cases are the cross-check's
(:func:`addrsim.commands.crosscheck.build_cases`: each counterexample shape, predicted "fail",
and control shapes on both sides of its boundary, predicted "pass").  Each case whose grid
and sequence are small enough (:data:`MAX_WORKGROUPS`, :data:`MAX_SEQLEN`) runs the real code
object (:func:`addrsim.api.run`); observed "fail" when dQ, dK or dV is wrong, and a predicted
failure must show in the counterexample's own (batch_id, head_id) slice.  A counterexample's
tensors are placed at its own pointers (memory is sparse: an overflow through a pointer just
below a 4 GiB boundary runs at a small shape).  Larger cases (the overflow counterexamples
whose tensors pass 4 GiB) are "skipped": the emulator allocates every tensor.
"""
from __future__ import annotations

from typing import List

from addrsim.api import run as run_kernel
from addrsim.api import verify
from addrsim.errors import AddrsimError

MAX_WORKGROUPS = 16
MAX_SEQLEN = 1024


def _feasible(shape) -> bool:
    tiles = -(-shape.get("seqlen_k", 1) // 64)
    return (shape.get("batch", 1) * shape.get("nhead_q", 1) * tiles <= MAX_WORKGROUPS * 3
            and max(shape.get("seqlen_q", 1), shape.get("seqlen_k", 1)) <= MAX_SEQLEN)


SMALL = ({"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128, "seqlen_k": 128},
         {"batch": 2, "nhead_q": 3, "nhead_k": 3, "seqlen_q": 64, "seqlen_k": 64},
         {"batch": 2, "nhead_q": 4, "nhead_k": 2, "seqlen_q": 256, "seqlen_k": 256})
"""The small shapes a proved check's kernel must be right at (batch 2, nhead 2-4, GQA 2:1,
seqlen 64-256); a shape outside the family's domain is skipped, not run."""


def verify_cases(path, buffers, layouts, models, like=None, progress=None) -> list:
    """Cases for buffers other than LSE/D: ``verify`` (address and bounds) of each buffer in
    each layout; every counterexample is a case predicted "fail" at its own shape and
    (batch_id, head_id); a layout where every check of the buffer is proved gets the
    :data:`SMALL` shapes, predicted "pass"."""
    from addrsim.commands.crosscheck import Case
    from addrsim.loader.listing import load_source
    from addrsim.model.models import buffer_pointer
    kernel = load_source(path, like).co.kernels[0]
    out = []
    for lay in layouts:
        if progress:
            progress(f"verifying {', '.join(buffers)} in {lay}")
        rep = verify(path, list(buffers), [lay], models=models, like=like)
        k = rep["kernels"][0]
        fixed = _head_dims(path, buffers, models, like, lay)
        for b in buffers:
            checks = [c for c in k["checks"] if c["buffer"] == b]
            for c in checks:
                x = c.get("counterexample")
                if c["verdict"] == "counterexample" and x:
                    co = x.get("coords") or {}
                    why = f"counterexample of {b}/{lay} {c.get('property')} (cause {c.get('cause')})"
                    if c.get("cause") in ("overflow", "allocation") and \
                            buffer_pointer(models, kernel, b) not in (x.get("kernargs") or {}):
                        why += "; no pointer in it"      # where the wrap lands depends on the allocation's base
                    out.append(Case(k["kernel"], lay, x["shape"], "fail", why,
                                    (co.get("batch_id"), co.get("head_id")), (b,), x.get("kernargs")))
            if checks and all(c["verdict"] == "proved" for c in checks):
                for sh in SMALL:
                    out.append(Case(k["kernel"], lay, dict(sh, **fixed), "pass", f"{b}/{lay} proved: a small shape",
                                    None, (b,)))
    return out


def _head_dims(path, buffers, models, like, layout) -> dict:
    """hdim_q/hdim_v for the small shapes: the family's fixed sizes, else its largest."""
    from addrsim.prove.differential import load_subject
    prob = load_subject(path, tuple(buffers), models, like=like).problem(layout)
    return {n: prob.fixed.get(n, prob.bounds[n][1]) for n in ("hdim_q", "hdim_v")}


def emulate_cases(cases, path, models, like=None, progress=None) -> dict:
    """Run each case on the emulator; the report ``{"device", "cases": [...], "agree"}``."""
    out: List[dict] = []
    for c in cases:
        row = {"layout": c.layout, "shape": c.shape, "predicted": c.predicted, "why": c.why,
               "coords": list(c.coords) if c.coords else None}
        if c.why.endswith("; no pointer in it"):
            row.update(observed="skipped", reason="the counterexample gives no pointer for the buffer, and whether "
                                                  "its 32-bit wrap lands outside the allocation depends on it")
            out.append(row)
            continue
        if not _feasible(c.shape):
            row.update(observed="skipped", reason=f"more than {MAX_WORKGROUPS} workgroups or seqlen past "
                                                  f"{MAX_SEQLEN}: too large to emulate")
            out.append(row)
            continue
        if progress:
            progress(f"emulating {c.layout} {c.shape}")
        try:
            rep = run_kernel(path, c.layout, c.shape, models=models, like=like,
                             pointers=getattr(c, "pointers", None))
        except AddrsimError as e:               # outside the kernel's domain, or a shape the emulator refuses
            row.update(observed="skipped", reason=str(e).splitlines()[0].split(": ", 1)[-1])
            out.append(row)
            continue
        wrong = sorted({tuple(s) for o in rep["outputs"].values() for s in o["wrong_slices"]})
        row.update(observed="pass" if rep["ok"] else "fail", wrong_slices=[list(s) for s in wrong],
                   seconds=rep["seconds"], instructions=rep["instructions"],
                   max_rel_err=max(o["max_rel_err"] for o in rep["outputs"].values()))
        row["agree"] = row["observed"] == c.predicted and (
            c.predicted != "fail" or not c.coords or tuple(c.coords) in wrong)
        out.append(row)
    ran = [r for r in out if r["observed"] != "skipped"]
    return {"tool": "addrsim", "device": "the virtual MI300 (addrsim/emu, CPU)", "kernel": str(path), "cases": out,
            "agree": bool(ran) and all(r["agree"] for r in ran)}


def format_emulated(rep: dict) -> str:
    lines = [f"crosscheck --emulate {rep['kernel']} on {rep['device']}"]
    for r in rep["cases"]:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items() if k in ("batch", "nhead_q", "nhead_k", "seqlen_q",
                                                                             "seqlen_k"))
        tail = (f"observed {r['observed']}" + (f" in slices {r['wrong_slices']}" if r.get("wrong_slices") else "")
                + (f" ({r['seconds']} s)" if "seconds" in r else f" ({r.get('reason', '')})"))
        mark = "" if r["observed"] == "skipped" else ("  agree" if r["agree"] else "  DISAGREE")
        lines.append(f"  {r['layout']} {shape}: predicted {r['predicted']}"
                     f"{' at ' + str(tuple(r['coords'])) if r['coords'] else ''}, {tail}{mark}")
    ran = [r for r in rep["cases"] if r["observed"] != "skipped"]
    lines.append(f"  {sum(r['agree'] for r in ran)} of {len(ran)} run cases agree; "
                 f"{len(rep['cases']) - len(ran)} skipped")
    return "\n".join(lines)
