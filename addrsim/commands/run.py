"""`addrsim run`: execute the real code object on the virtual MI300 and compare its gradients
with a float64 reference (issue 37).

    addrsim run KERNEL.co|LISTING [--like K.co] --layout L --shape batch=2,nhead_q=2,seqlen_q=128
                [--seed N] [--stage odo|main|post] [--window L,R] [--json FILE] [--trace BUFFER] [--model F]
                [--layouts F]

Prints, per output (D, dQ, dK, dV), the largest absolute and relative error and the (batch,
head) slices that are wrong with their first wrong row, and the kernels of the pipeline that
ran.  Exit 0 when every output is within the tolerance (:data:`addrsim.emu.launch.TOLERANCE`),
1 when one is not, 2 when the kernel cannot be run yet (group mode, sliding window, a stage
its folder lacks, an instruction without emulated semantics), 3 bad input.  ``--trace BUFFER`` adds every access of that buffer to the JSON (pc, workgroup,
wave, lane, byte offset from the buffer's base, size, load/store).
"""
from __future__ import annotations

import argparse
import sys

from addrsim.api import run as run_api
from addrsim.commands.common import EXIT_BAD_INPUT, Once, check_outputs, emit
from addrsim.errors import AddrsimError
from addrsim.model.models import SHAPE_VARS, load_models


def shape_arg(text: str):
    """NAME=V,NAME=V,... (shape variables) -> dict."""
    out = {}
    for part in text.split(","):
        name, _, val = part.partition("=")
        name = name.strip()
        if name in out:
            raise argparse.ArgumentTypeError(f"{name} given twice in {text!r}")
        if name not in SHAPE_VARS or not val.strip().isdigit():
            raise argparse.ArgumentTypeError(f"expected NAME=V,... with NAME one of {', '.join(SHAPE_VARS)}, got "
                                             f"{part!r}")
        out[name] = int(val)
    return out


def window_arg(text: str):
    """LEFT,RIGHT (keys before and after the diagonal; -1 unlimited) -> (int, int)."""
    parts = text.split(",")
    try:
        left, right = (int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LEFT,RIGHT (integers, -1 unlimited), got {text!r}") from None
    if min(left, right) < -1:
        raise argparse.ArgumentTypeError(f"window sizes are -1 (unlimited) or at least 0, got {text!r}")
    return left, right


def register(sub) -> None:
    p = sub.add_parser("run", help="run the kernel on the virtual MI300 and compare dQ, dK, dV with a reference")
    p.add_argument("kernel", metavar="KERNEL.co|LISTING")
    p.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    p.add_argument("--layout", default="bhsd", action=Once, help="layout (built-in bhsd, bshd, sbhd, or a --layouts view)")
    p.add_argument("--shape", type=shape_arg, required=True, metavar="NAME=V,...",
                   help="shape, e.g. batch=2,nhead_q=2,seqlen_q=128 (seqlen_k and nhead_k default to "
                        "seqlen_q and nhead_q)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--json", metavar="FILE", help="write the JSON result to FILE ('-' for stdout)")
    p.add_argument("--stage", choices=("odo", "main", "post"),
                   help="run one kernel of the pipeline on reference inputs: odo (D), main (dQ/dK/dV with the "
                        "reference D), post (dQ from the reference accumulator)")
    p.add_argument("--window", type=window_arg, metavar="LEFT,RIGHT",
                   help="a sliding-window kernel's window: keys before and after the diagonal (-1 unlimited)")
    p.add_argument("--trace", metavar="BUFFER", help="keep every access of BUFFER (q, k, v, do, dq, dk, dv, lse, d)")
    p.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    p.add_argument("--layouts", action="append", default=[], metavar="FILE.yaml", help="user layouts file")


def run(args) -> int:
    shape = dict(args.shape)
    shape.setdefault("seqlen_k", shape.get("seqlen_q", 0))
    shape.setdefault("nhead_k", shape.get("nhead_q", 0))
    try:
        check_outputs(args, (("json", "--json"),))
        rep = run_api(args.kernel, args.layout, shape, models=load_models(list(args.model) + list(args.layouts)),
                      seed=args.seed, like=args.like, trace=args.trace, stage=args.stage,
                      window=args.window)
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return e.exit_code
    bad = emit(rep, args.json, lambda: format_run(rep))
    if bad is not None:
        return EXIT_BAD_INPUT
    return 0 if rep["ok"] else 1


def format_run(rep: dict) -> str:
    shape = " ".join(f"{k}={v}" for k, v in rep["shape"].items())
    lines = [f"{rep['kernel']} in {rep['layout']} at {shape}: {'RIGHT' if rep['ok'] else 'WRONG'} "
             f"({rep['instructions']} instructions, {rep['seconds']} s, tolerance "
             f"{rep['tolerance']:.4g} of the largest reference value)"]
    if len(rep.get("stages", [])) > 1 or any(s["stage"] != "main" for s in rep.get("stages", [])):
        lines.append("  stages: " + ", ".join(f"{s['stage']} {s['kernel']} ({s['instructions']} instructions, "
                                              f"{s['seconds']} s)" for s in rep["stages"]))
    if rep.get("fault"):
        lines.append(f"  the kernel stopped: {rep['fault']}")
    for name, o in rep["outputs"].items():
        where = ""
        if o["wrong_slices"]:
            where = "; wrong (batch, head) slices: " + ", ".join(
                f"({b}, {h}) from row {o['first_rows'][f'{b},{h}']}" for b, h in o["wrong_slices"])
        lines.append(f"  {name}: {'ok   ' if o['ok'] else 'WRONG'} max abs err {o['max_abs_err']:.3g}, "
                     f"max rel err {o['max_rel_err']:.3g}{where}")
    for name, why in rep.get("not_compared", {}).items():
        lines.append(f"  {name}: not compared: {why}")
    return "\n".join(lines)
