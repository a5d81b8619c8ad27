"""`addrsim repro`: a reproduction an engineer runs on AMD hardware (MI300 / MI355).

The script is self-contained PyTorch that calls aiter's public Python API
(``aiter.ops.mha.FlashAttnFunc.apply``, the autograd function behind
``aiter.flash_attn_func``) with Q, K, V, dO in the failing layout and shape, computes the
fp32 reference with PyTorch autograd one (batch, head) slice at a time, and prints PASS or
FAIL with the (batch_id, head_id) slices that are wrong.  Facts it relies on, from aiter's
public sources (ROCm/aiter):

* aiter/ops/mha.py: q, k, v are logical [batch, seqlen, nhead, hdim]; a permuted view whose
  last stride is 1 is passed to the kernel with its strides (``maybe_contiguous``), and
  dq/dk/dv are ``empty_like`` of q/k/v (the same layout); ``flash_attn_func`` defaults to
  ``deterministic=True``, which turns the asm v3 backward off on gfx942, and hard-wires
  ``is_v3_atomic_fp32=True``; the autograd function's 14th positional argument is
  ``is_v3_atomic_fp32`` (False selects the 16-bit-atomic "a16" kernels); the backward needs
  ``return_lse=True``.
* op_tests/test_mha.py builds BHSD and SBHD as ``permute(...).contiguous().permute(...)``
  views of [b, s, h, d]; its tolerance for dq/dk/dv is ``max(10 * max|low-precision error|,
  0.01)`` (absolute).
* op_tests/cpp/mha/benchmark_mha_bwd.cpp: ``-iperm``/``-operm`` are 1 for b*h*s*d (BHSD)
  and 0 for b*s*h*d (BSHD); there is no SBHD option; ``-bwd_v3=1`` forces the asm kernels,
  ``-v3_atomic_fp32`` picks the fp32 (1) or 16-bit (0) dQ accumulator, ``-kname=1`` prints
  the kernel that ran.

Nothing here has run on AMD hardware: the script is the user's to run.
"""
from __future__ import annotations

import sys
from typing import Dict, Optional

from addrsim.api import verify
from addrsim.commands.common import EXIT_BAD_INPUT, bound_arg, check_output
from addrsim.errors import AddrsimError, InputError
from addrsim.model.layout import VIEWS
from addrsim.model.models import load_models
from addrsim.prove.verdict import Verdict

#: the permutation that makes a [b, s, h, d] view with the layout's memory order: storage
#: dims (in memory order) and the permute back to [b, s, h, d] (the Layout value's view)
LAYOUT_VIEWS = {name: ("(" + ", ".join(dims) + ")", perm) for name, (dims, perm) in VIEWS.items()}


def bf16_cvt(kernel: str) -> int:
    """aiter's how_v3_bf16_cvt (0 RTNE, 1 RTNA, 2 RTZ) of a kernel, from the rounding in its
    symbol (the code object's metadata); 0 when it names none."""
    return 1 if "_rtna" in kernel else 2 if "_rtz" in kernel else 0


def bench_command(shape: Dict[str, int], layout: str, dtype: str, atomic32: bool, cvt: int = 0) -> Optional[str]:
    """aiter's C++ benchmark command line for the case, or None for a layout it has no flag
    for (SBHD)."""
    if layout not in ("bhsd", "bshd"):
        return None
    perm = 1 if layout == "bhsd" else 0
    return (f"./benchmark_mha_bwd -prec={dtype} -b={shape['batch']} -h={shape['nhead_q']} -h_k={shape['nhead_k']} "
            f"-s={shape['seqlen_q']} -s_k={shape['seqlen_k']} -d={shape['hdim_q']} -d_v={shape['hdim_v']} "
            f"-iperm={perm} -operm={perm} -mask=0 -mode=0 -bwd_v3=1 -v3_atomic_fp32={int(atomic32)} "
            f"-v3_bf16_cvt={cvt} -kname=1 -v=1")


#: the script after its header: the case, aiter's call, the fp32 reference per (batch, head) slice
_BODY = '''import torch
import aiter
from aiter.ops.mha import FlashAttnFunc

LAYOUT = "{layout}"
B, HQ, HK, SQ, SK, D, DV = {b}, {hq}, {hk}, {sq}, {sk}, {d}, {dv}
DTYPE = torch.{torch_dtype}
ATOMIC_FP32 = {atomic32}          # False: the 16-bit-atomic (a16) kernels
CAUSAL = {causal}
BF16_CVT = {cvt}                  # how_v3_bf16_cvt: 0 RTNE, 1 RTNA, 2 RTZ (the kernel's rounding)
TOL = 1e-2                     # max |x - ref| / max |ref|, aiter's 0.01 (op_tests/test_mha.py)
PERM = {perm!r}             # storage {storage} -> logical [b, s, h, d]


def make(b, s, h, d, gen):
    """A logical [b, s, h, d] tensor stored in LAYOUT's memory order."""
    dims = {{"bshd": (b, s, h, d), "bhsd": (b, h, s, d), "sbhd": (s, b, h, d)}}[LAYOUT]
    t = torch.randn(*dims, generator=gen, device="cpu").to(DTYPE).cuda()
    return t if PERM is None else t.permute(*PERM)


gen = torch.Generator().manual_seed(0)
q = make(B, SQ, HQ, D, gen).requires_grad_(True)
k = make(B, SK, HK, D, gen).requires_grad_(True)
v = make(B, SK, HK, DV, gen).requires_grad_(True)
do = make(B, SQ, HQ, DV, gen)
print("layout", LAYOUT, "q shape", tuple(q.shape), "q strides", q.stride())
scale = D ** -0.5
# FlashAttnFunc.apply(q, k, v, dropout_p, softmax_scale, causal, window_size, bias, alibi_slopes,
#                     deterministic, return_lse, return_attn_probs, is_grad_enabled,
#                     is_v3_atomic_fp32, how_v3_bf16_cvt, cu_seqlens_q, cu_seqlens_kv)
out, lse = FlashAttnFunc.apply(q, k, v, 0.0, scale, CAUSAL, (-1, -1, 0), None, None, False, True, False,
                               torch.is_grad_enabled(), ATOMIC_FP32, BF16_CVT, None, None)
out.backward(do)
grads = {{"dq": q.grad, "dk": k.grad, "dv": v.grad}}

# fp32 reference, one (batch, head) slice at a time (autograd)
worst = {{"dq": 0.0, "dk": 0.0, "dv": 0.0}}
peak = {{"dq": 0.0, "dk": 0.0, "dv": 0.0}}
wrong = []
ratio = HQ // HK
for bi in range(B):
    for hi in range(HQ):
        qs = q[bi, :, hi].detach().float().requires_grad_(True)
        ks = k[bi, :, hi // ratio].detach().float().requires_grad_(True)
        vs = v[bi, :, hi // ratio].detach().float().requires_grad_(True)
        s = scale * (qs @ ks.T)
        if CAUSAL:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(SK - SQ + 1), float("-inf"))
        o = torch.softmax(s, dim=-1) @ vs
        o.backward(do[bi, :, hi].float())
        ref = {{"dq": qs.grad, "dk": ks.grad, "dv": vs.grad}}
        got = {{"dq": grads["dq"][bi, :, hi].float(), "dk": grads["dk"][bi, :, hi // ratio].float(),
               "dv": grads["dv"][bi, :, hi // ratio].float()}}
        bad = False
        for name in ref:
            if name != "dq" and ratio > 1:
                continue          # dK/dV sum over the query heads of a group: compare dQ only
            err = (got[name] - ref[name]).abs().max().item()
            worst[name] = max(worst[name], err)
            peak[name] = max(peak[name], ref[name].abs().max().item())
            bad |= err > TOL * max(ref[name].abs().max().item(), 1e-6)
        if bad:
            wrong.append((bi, hi))
rel = {{n: worst[n] / peak[n] if peak[n] else 0.0 for n in worst}}
print("max rel err", {{n: f"{{e:.2e}}" for n, e in rel.items()}})
if wrong:
    print(f"FAIL: {{len(wrong)}} of {{B * HQ}} (batch, head) slices wrong, first {{wrong[:8]}}")
else:
    print("PASS")
'''


def script(kernel: str, path: str, buffer: str, layout: str, shape: Dict[str, int], dtype: str = "bf16",
           atomic32: bool = True, coords=None, why: str = "", causal: bool = False,
           prediction: Optional[str] = "fail") -> str:
    """The reproduction script (Python source text) for one case.  ``layout`` must be one of
    bhsd, bshd, sbhd; ``shape`` has batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q,
    hdim_v; ``prediction`` what addrsim's prover says at this shape ("fail", "pass" or None:
    undecided).  Raises ValueError for another layout."""
    if layout not in LAYOUT_VIEWS:
        raise ValueError(f"repro knows the layouts {', '.join(LAYOUT_VIEWS)}, not {layout!r}")
    storage, perm = LAYOUT_VIEWS[layout]
    b, hq, hk = shape["batch"], shape["nhead_q"], shape["nhead_k"]
    sq, sk, d, dv = shape["seqlen_q"], shape["seqlen_k"], shape["hdim_q"], shape["hdim_v"]
    cvt = bf16_cvt(kernel)
    cmd = bench_command(shape, layout, dtype, atomic32, cvt)
    bench = (f"#   {cmd}\n" if cmd else
             "#   (aiter's benchmark_mha_bwd has no SBHD layout: -iperm/-operm are 1 = BHSD, 0 = BSHD)\n")
    if not kernel.startswith("_ZN5aiter"):
        why += ("\n# NOTE: this kernel is not one of aiter's (its symbol is not in aiter's namespace): aiter's API "
                "will not run it;\n# the script only shows the shape and layout to try.")
    coords_line = f"# addrsim's counterexample slice: batch_id={coords[0]} head_id={coords[1]}\n" if coords else ""
    said = {"fail": f"predicts that {buffer.upper()} is read at the wrong place (expect FAIL)",
            "pass": f"proves that {buffer.upper()} is read at the right place (expect PASS)",
            None: f"could not decide whether {buffer.upper()} is read at the right place"}[prediction]
    return f'''#!/usr/bin/env python3
# Reproduction generated by addrsim repro: run it on an AMD MI300 (gfx942) or MI355 (gfx950)
# with aiter installed.  At this shape addrsim {said} for
# kernel {kernel}
# ({path}) in layout {layout.upper()}.  {why}
{coords_line}# aiter's C++ benchmark for the same case (op_tests/cpp/mha/benchmark_mha_bwd.cpp):
{bench}# Nothing in this script has been run by addrsim.
''' + _BODY.format(layout=layout, b=b, hq=hq, hk=hk, sq=sq, sk=sk, d=d, dv=dv, atomic32=atomic32,
                          causal=causal, cvt=cvt, perm=perm, storage=storage,
                          torch_dtype="float16" if dtype == "fp16" else "bfloat16")


# ----------------------------------------------------------------------------- the command

def register(sub) -> None:
    """Add the ``repro`` subcommand to ``sub`` (argparse subparsers)."""
    rp = sub.add_parser("repro", help="print a PyTorch script (aiter's API) that reproduces a counterexample on AMD hardware")
    rp.add_argument("file", metavar="FILE.co|LISTING.s")
    rp.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    rp.add_argument("--buffer", required=True, help="buffer (e.g. lse)")
    rp.add_argument("--layout", required=True, help="bhsd, bshd or sbhd")
    rp.add_argument("--shape", metavar="NAME=V,...", help="write the script for this shape instead of the counterexample")
    rp.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    rp.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX")
    rp.add_argument("--timeout", type=int, default=None, metavar="MS",
                    help="the query budget as nominal ms (converted to resource units; default 10 Mru)")
    rp.add_argument("-o", "--output", metavar="FILE.py", help="write the script to FILE.py (default stdout)")


def run(args) -> int:
    from addrsim.loader.listing import load_source
    from addrsim.model.models import SHAPE_VARS
    try:
        check_output(args.output, "-o")
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
            if c["verdict"] != Verdict.COUNTEREXAMPLE:
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
