"""`addrsim repro`: a reproduction an engineer runs on AMD hardware (MI300 / MI355).

The script is self-contained PyTorch that calls aiter's public Python API
(``aiter.ops.mha.FlashAttnFunc.apply``, the autograd function behind
``aiter.flash_attn_func``) with Q, K, V, dO in the failing layout and shape, computes the
fp32 reference on the counterexample's (batch, head) slice and a control slice only, blocked
over query and key rows (so it fits the device's memory at any shape the prover reports),
prints the memory it needs, and prints PASS or FAIL with the slices that are wrong.  Facts it relies on, from aiter's
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

import re
import sys
from typing import Dict, Optional

from addrsim.api import verify
from addrsim.files import atomic_open
from addrsim.commands.common import EXIT_BAD_INPUT, Once, bound_arg, bounds_of, check_outputs, query_store
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


#: the fp32 reference of the scripts (plain text, inserted into theirs)
REF = '''def ref_stats(qs, ks, vs, dos, scale, causal, block=BLOCK):
    """fp32 LSE (natural log) and D = rowsum(dO * O) of one (batch, head) slice ([rows, hdim]
    tensors), blocked over key rows: never more than block x block scores at a time."""
    sq, sk = qs.shape[0], ks.shape[0]
    kw = {"device": qs.device, "dtype": qs.dtype}
    lse = torch.empty(sq, **kw)
    o = torch.zeros(sq, vs.shape[1], **kw)
    for i in range(0, sq, block):
        n = min(block, sq - i)
        m = torch.full((n,), float("-inf"), **kw)
        l = torch.zeros(n, **kw)
        acc = torch.zeros(n, vs.shape[1], **kw)
        for j in range(0, sk, block):
            s = scores(qs, ks, scale, causal, i, j, block)
            mn = torch.maximum(m, s.max(dim=1).values)
            safe = torch.where(torch.isinf(mn), torch.zeros_like(mn), mn)
            p = torch.exp(s - safe[:, None])
            f = torch.exp(m - safe)
            l = l * f + p.sum(dim=1)
            acc = acc * f[:, None] + p @ vs[j:j + block]
            m = mn
        lse[i:i + n] = torch.where(l > 0, m + torch.log(l), torch.full_like(l, float("inf")))
        o[i:i + n] = acc / torch.clamp(l, min=1e-30)[:, None]
    return lse, (dos * o).sum(dim=1)


def scores(qs, ks, scale, causal, i, j, block=BLOCK):
    """Scaled scores of query rows i.. and key rows j.. (a block of each); under the causal
    mask key c is hidden from query r when c > r + (sk - sq)."""
    s = scale * (qs[i:i + block] @ ks[j:j + block].T)
    if causal:
        sq, sk = qs.shape[0], ks.shape[0]
        r = torch.arange(i, i + s.shape[0], device=s.device)[:, None]
        c = torch.arange(j, j + s.shape[1], device=s.device)[None, :]
        s = s.masked_fill(c > r + (sk - sq), float("-inf"))
    return s


def ref_slice(qs, ks, vs, dos, scale, causal, block=BLOCK):
    """fp32 dQ, dK, dV of one (batch, head) slice ([rows, hdim] each), blocked over query and
    key rows: never more than block x block scores at a time (two passes: the row statistics
    of the softmax, then the gradients)."""
    sq, sk = qs.shape[0], ks.shape[0]
    lse, dd = ref_stats(qs, ks, vs, dos, scale, causal, block)
    dq, dk, dv = torch.zeros_like(qs), torch.zeros_like(ks), torch.zeros_like(vs)
    for i in range(0, sq, block):
        for j in range(0, sk, block):
            p = torch.exp(scores(qs, ks, scale, causal, i, j, block) - lse[i:i + block, None])
            ds = p * (dos[i:i + block] @ vs[j:j + block].T - dd[i:i + block, None])
            dq[i:i + block] += scale * (ds @ ks[j:j + block])
            dk[j:j + block] += scale * (ds.T @ qs[i:i + block])
            dv[j:j + block] += p.T @ dos[i:i + block]
    return dq, dk, dv


'''

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
SLICES = {slices!r}    # (batch_id, head_id) slices the reference checks: the counterexample's, a control
BLOCK = 1024                   # query and key rows per block of the reference
MEMORY_GIB = {memory_gib:.4g}             # every tensor of the family at this shape (addrsim's model)
REF_MIB = {ref_mib:.0f}                  # the reference: one slice's fp32 tensors and its blocks


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
print(f"tensors at this shape: {{MEMORY_GIB:.3g}} GiB (addrsim's model of the family); the reference adds "
      f"about {{REF_MIB:.0f}} MiB (one slice at a time, {{BLOCK}} x {{BLOCK}} fp32 scores)")


{ref}# the fp32 reference on the slices that matter only: the counterexample's and a control
worst = {{"dq": 0.0, "dk": 0.0, "dv": 0.0}}
peak = {{"dq": 0.0, "dk": 0.0, "dv": 0.0}}
wrong = []
ratio = HQ // HK
for bi, hi in SLICES:
    qs, ks, vs = (t[bi, :, h].detach().float() for t, h in ((q, hi), (k, hi // ratio), (v, hi // ratio)))
    r = dict(zip(("dq", "dk", "dv"), ref_slice(qs, ks, vs, do[bi, :, hi].float(), scale, CAUSAL)))
    got = {{"dq": grads["dq"][bi, :, hi].float(), "dk": grads["dk"][bi, :, hi // ratio].float(),
           "dv": grads["dv"][bi, :, hi // ratio].float()}}
    bad = False
    for name in r:
        if name != "dq" and ratio > 1:
            continue          # dK/dV sum over the query heads of a group: compare dQ only
        err = (got[name] - r[name]).abs().max().item()
        worst[name] = max(worst[name], err)
        peak[name] = max(peak[name], r[name].abs().max().item())
        bad |= err > TOL * max(r[name].abs().max().item(), 1e-6)
    print(f"slice batch_id={{bi}} head_id={{hi}}: {{'WRONG' if bad else 'right'}}")
    if bad:
        wrong.append((bi, hi))
rel = {{n: worst[n] / peak[n] if peak[n] else 0.0 for n in worst}}
print("max rel err", {{n: f"{{e:.2e}}" for n, e in rel.items()}})
if wrong:
    print(f"FAIL: {{len(wrong)}} of {{len(SLICES)}} checked (batch, head) slices wrong: {{wrong}}")
else:
    print("PASS")
'''


#: the --direct script after its header and the launch's constants: pack, place, launch, judge
_DIRECT_BODY = '''

def pack_kernargs(addresses):
    """The kernarg segment: each KERNARGS entry's value, or the address of the tensor it
    names, little-endian at its offset."""
    buf = bytearray(KERNARG_SIZE)
    for _, off, size, val in KERNARGS:
        v = addresses[val] if isinstance(val, str) else val
        buf[off:off + size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(buf)


# ---- the device part: PyTorch for the tensors and the reference, HIP's module API for the launch
import ctypes
import torch

DT = {{"bf16": torch.bfloat16, "fp16": torch.float16, "f32": torch.float32}}
gen = torch.Generator().manual_seed(0)


def alloc(name, random=False):
    """TENSORS[name] on the device with the layout's strides, zeroed or standard normal."""
    dims, strides, dt = TENSORS[name]
    size = 1 + sum((n - 1) * st for n, st in zip(dims, strides))
    t = torch.zeros(size, dtype=DT[dt], device="cuda").as_strided(dims, strides)
    if random:
        t.copy_(torch.randn(*dims, generator=gen).to(DT[dt]))
    return t


{ref}
q, k, v, do = (alloc(n, random=True) for n in ("q", "k", "v", "do"))
lse, dd = alloc("lse"), alloc("d")
ratio = HQ // HK
for bi in range(B):            # LSE and D of every slice: what the host's forward pass and odo kernel give
    for hi in range(HQ):
        lse[bi, hi], dd[bi, hi] = ref_stats(q[bi, hi].float(), k[bi, hi // ratio].float(),
                                            v[bi, hi // ratio].float(), do[bi, hi].float(), SCALE, CAUSAL)
dk, dv, dq = alloc("dk"), alloc("dv"), alloc("dq" if DQ == "direct" else "dq_acc")
tensors = {{"q": q, "k": k, "v": v, "do": do, "lse": lse, "d": dd, "dk": dk, "dv": dv, "dq": dq, "dq_acc": dq}}
args = ctypes.create_string_buffer(pack_kernargs({{n: t.data_ptr() for n, t in tensors.items()}}), KERNARG_SIZE)
size = ctypes.c_size_t(KERNARG_SIZE)


def hip_runtime():
    """The HIP runtime PyTorch already loaded (its path from /proc/self/maps), so the module,
    the stream and the tensors live in one runtime; libamdhip64.so from the loader's path
    only when PyTorch mapped none."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({{ln.split()[-1] for ln in maps if "libamdhip64.so" in ln and "/" in ln}})
    except OSError:
        paths = []
    return ctypes.CDLL(paths[0] if paths else "libamdhip64.so")


hip = hip_runtime()
hip.hipModuleLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3


def ok(err, what):
    if err != 0:
        raise SystemExit(f"{{what}} failed: hipError_t {{err}}")


module, fn = ctypes.c_void_p(), ctypes.c_void_p()
ok(hip.hipModuleLoad(ctypes.byref(module), CODE_OBJECT.encode()), "hipModuleLoad")
ok(hip.hipModuleGetFunction(ctypes.byref(fn), module, SYMBOL.encode()), "hipModuleGetFunction")
# HIP_LAUNCH_PARAM_BUFFER_POINTER (1), the segment, HIP_LAUNCH_PARAM_BUFFER_SIZE (2), its size, HIP_LAUNCH_PARAM_END (3)
extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(args), 2, ctypes.addressof(size), 3)
torch.cuda.synchronize()
ok(hip.hipModuleLaunchKernel(fn, *GRID, THREADS, 1, 1, 0, torch.cuda.current_stream().cuda_stream, None, extra),
   "hipModuleLaunchKernel")
torch.cuda.synchronize()
print(f"launched {{SYMBOL}} directly: grid {{GRID}} workgroups of {{THREADS}} threads; tensors {{MEMORY_GIB:.3g}} GiB")

wrong = []
for bi, hi in SLICES:          # dK and dV per query head (the kernel's expanded outputs)
    r = dict(zip(("dq", "dk", "dv"), ref_slice(q[bi, hi].float(), k[bi, hi // ratio].float(),
                                               v[bi, hi // ratio].float(), do[bi, hi].float(), SCALE, CAUSAL)))
    got = {{"dk": dk[bi, hi].float(), "dv": dv[bi, hi].float()}}
    if DQ != "acc16":          # a 16-bit accumulator is in the kernel's own order: only a post-kernel reads it
        got["dq"] = dq[bi, hi].float()
    bad = [n for n in got if (got[n] - r[n]).abs().max().item() > TOL * max(r[n].abs().max().item(), 1e-6)]
    print(f"slice batch_id={{bi}} head_id={{hi}}: {{'WRONG ' + ', '.join(bad) if bad else 'right'}}")
    if bad:
        wrong.append((bi, hi))
print(f"FAIL: {{len(wrong)}} of {{len(SLICES)}} checked (batch, head) slices wrong: {{wrong}}" if wrong else "PASS")
'''


def _said(buffer: str, prediction: Optional[str]) -> str:
    """What addrsim says of the case, for a script's header."""
    return {"fail": f"predicts that {buffer.upper()} is read at the wrong place (expect FAIL)",
            "pass": f"proves that {buffer.upper()} is read at the right place (expect PASS)",
            None: f"could not decide whether {buffer.upper()} is read at the right place"}[prediction]


def direct_script(plan, path: str, buffer: str, layout: str, shape: Dict[str, int], coords=None, why: str = "",
                  causal: bool = False, memory_bytes: int = 0, latent: Optional[tuple] = None,
                  prediction: Optional[str] = "fail") -> str:
    """The ``repro --direct`` script (Python source text): the code object ``path`` launched
    through HIP's module API (``hipModuleLoad``, ``hipModuleLaunchKernel`` with the kernarg
    segment as one buffer, from ``libamdhip64.so`` by ctypes) with ``plan`` (an
    :class:`addrsim.emu.launch.DirectLaunch`: the host contract's arguments at ``shape``),
    bypassing the host's routing, so a latent finding shows too; LSE and D from an fp32
    forward pass of every slice, then dQ, dK and dV of :func:`slices_checked` judged against
    the blocked reference as the API script does.  Everything above the line ``# ---- the
    device part`` is plain Python (the launch's constants and :func:`pack_kernargs`)."""
    b, hq, hk = shape["batch"], shape["nhead_q"], shape["nhead_k"]
    sq, sk, d, dv = shape["seqlen_q"], shape["seqlen_k"], shape["hdim_q"], shape["hdim_v"]
    coords_line = f"# addrsim's counterexample slice: batch_id={coords[0]} head_id={coords[1]}\n" if coords else ""
    said = _said(buffer, prediction)
    note = ""
    if latent:
        note = (f"\n# The host ({_comment(latent[0])}) does not route this shape to this kernel: this script "
                f"launches it anyway.")
    head = f'''#!/usr/bin/env python3
# Direct reproduction generated by addrsim repro --direct: run it on an AMD MI300 (gfx942) or MI355
# (gfx950) with PyTorch for ROCm.  It launches kernel {_comment(plan.symbol)}
# from {_comment(path)} itself, with the kernel arguments aiter's host would pass at this shape in layout
# {layout.upper()}, and no host routing.  addrsim {said}.
# {_comment(why)}{note}
{coords_line}# Nothing in this script has been run by addrsim on hardware; its launch (the constants and
# pack_kernargs below) is what addrsim's tests run on the virtual MI300 (addrsim run).
CODE_OBJECT = {str(path)!r}
SYMBOL = {plan.symbol!r}
LAYOUT = {layout!r}
B, HQ, HK, SQ, SK, D, DV = {b}, {hq}, {hk}, {sq}, {sk}, {d}, {dv}
CAUSAL = {causal}
TOL = 1e-2                     # max |x - ref| / max |ref|, aiter's 0.01 (op_tests/test_mha.py)
SLICES = {slices_checked(shape, coords)!r}
BLOCK = 1024                   # query and key rows per block of the reference
SCALE = {plan.scale!r}
MEMORY_GIB = {memory_bytes / 2**30:.4g}
GRID = {tuple(plan.grid)!r}    # workgroups (the family's grid at this shape)
THREADS = {plan.threads}                # per workgroup (the code object's metadata)
KERNARG_SIZE = {plan.kernarg_size}
# (argument, byte offset, bytes, value or the tensor whose address goes there): aiter's host contract
KERNARGS = {plan.kernargs!r}
# tensor -> (dims [batch, heads, rows(, cols)], element strides in the layout, element type)
TENSORS = {plan.tensors!r}
DQ = {plan.dq!r}               # direct: dQ in the layout; acc32: fp32 accumulator; acc16: not compared
'''
    return head + _DIRECT_BODY.format(ref=REF)


BLOCK = 1024
"""Query and key rows per block of the script's fp32 reference (:func:`ref_mib`)."""


def slices_checked(shape: Dict[str, int], coords=None) -> list:
    """The (batch_id, head_id) slices the script's reference checks: the counterexample's,
    and a control ((0, 0), or the last slice when the counterexample is (0, 0))."""
    last = (shape["batch"] - 1, shape["nhead_q"] - 1)
    out = [tuple(coords)] if coords else [last]
    control = (0, 0) if out[0] != (0, 0) else last
    return out + ([control] if control not in out else [])


def ref_mib(shape: Dict[str, int], block: int = BLOCK) -> float:
    """MiB the script's reference holds at once: one slice's fp32 Q, K, V, dO, O and their
    gradients (rows x head dim, 4 bytes each), and a few block x block fp32 score blocks."""
    sq, sk, d, dv = shape["seqlen_q"], shape["seqlen_k"], shape["hdim_q"], shape["hdim_v"]
    rows = sq * (3 * d + 3 * dv + 2) + sk * (3 * d + 3 * dv)
    return (4 * rows + 4 * 4 * min(block, sq) * min(block, sk)) / 2**20


def _comment(text: str) -> str:
    """``text`` safe inside a ``#`` comment of the script: line breaks and other control
    characters escaped (a file name with a newline must not become a statement)."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
                   for ch in str(text))


def script(kernel: str, path: str, buffer: str, layout: str, shape: Dict[str, int], dtype: str = "bf16",
           atomic32: bool = True, coords=None, why: str = "", causal: bool = False,
           prediction: Optional[str] = "fail", memory_bytes: int = 0, latent: Optional[tuple] = None) -> str:
    """The reproduction script (Python source text) for one case.  ``layout`` must be one of
    bhsd, bshd, sbhd; ``shape`` has batch, nhead_q, nhead_k, seqlen_q, seqlen_k, hdim_q,
    hdim_v; ``prediction`` what addrsim's prover says at this shape ("fail", "pass" or None:
    undecided); ``memory_bytes`` what every tensor of the family takes at it (the model's
    memory layer; 0: unknown).  The reference is computed in fp32 on the slices of
    :func:`slices_checked` only, blocked over query and key rows (:func:`ref_mib` MiB at
    once, where a whole score matrix at seqlen 2**20 would take 4 TiB).  ``latent``: (host,
    masking conditions) when the host's routing does not send this shape to the kernel: the
    header then says that through aiter's API the script is expected to PASS.  Raises
    ValueError for another layout."""
    if layout not in LAYOUT_VIEWS:
        raise ValueError(f"repro knows the layouts {', '.join(LAYOUT_VIEWS)}, not {layout!r}")
    storage, perm = LAYOUT_VIEWS[layout]
    b, hq, hk = shape["batch"], shape["nhead_q"], shape["nhead_k"]
    sq, sk, d, dv = shape["seqlen_q"], shape["seqlen_k"], shape["hdim_q"], shape["hdim_v"]
    cvt = bf16_cvt(kernel)
    cmd = bench_command(shape, layout, dtype, atomic32, cvt)
    bench = (f"#   {cmd}\n" if cmd else
             "#   (aiter's benchmark_mha_bwd has no SBHD layout: -iperm/-operm are 1 = BHSD, 0 = BSHD)\n")
    kernel, path, why = _comment(kernel), _comment(path), _comment(why)
    if not kernel.startswith("_ZN5aiter"):
        why += ("\n# NOTE: this kernel is not one of aiter's (its symbol is not in aiter's namespace): aiter's API "
                "will not run it;\n# the script only shows the shape and layout to try.")
    coords_line = f"# addrsim's counterexample slice: batch_id={coords[0]} head_id={coords[1]}\n" if coords else ""
    if latent:
        masked = "".join(f"\n#     {_comment(m)}" for m in latent[1])
        why += (f"\n# LATENT under {_comment(latent[0])}: its routing does not send this shape to this kernel "
                f"(masked by:{masked or ' its conditions'}).\n# Through aiter's API this script is then expected "
                f"to PASS (another kernel runs). It shows the bug only with\n# those conditions lifted (a patched "
                f"host) or the kernel launched directly.")
    said = _said(buffer, prediction)
    if latent:
        said += " where this kernel runs"
    return f'''#!/usr/bin/env python3
# Reproduction generated by addrsim repro: run it on an AMD MI300 (gfx942) or MI355 (gfx950)
# with aiter installed.  At this shape addrsim {said} for
# kernel {kernel}
# ({path}) in layout {layout.upper()}.  {why}
{coords_line}# aiter's C++ benchmark for the same case (op_tests/cpp/mha/benchmark_mha_bwd.cpp):
{bench}# Nothing in this script has been run by addrsim.
''' + _BODY.format(layout=layout, b=b, hq=hq, hk=hk, sq=sq, sk=sk, d=d, dv=dv, atomic32=atomic32,
                          causal=causal, cvt=cvt, perm=perm, storage=storage,
                          torch_dtype="float16" if dtype == "fp16" else "bfloat16",
                          slices=slices_checked(shape, coords), memory_gib=memory_bytes / 2**30,
                          ref_mib=ref_mib(shape), ref=REF)


# ----------------------------------------------------------------------------- the command

def register(sub) -> None:
    """Add the ``repro`` subcommand to ``sub`` (argparse subparsers)."""
    rp = sub.add_parser("repro", help="print a PyTorch script (aiter's API) that reproduces a counterexample on AMD hardware")
    rp.add_argument("file", metavar="FILE.co|LISTING.s")
    rp.add_argument("--like", metavar="KERNEL.co", help="code object whose metadata a listing takes")
    rp.add_argument("--buffer", required=True, action=Once, help="buffer (e.g. lse)")
    rp.add_argument("--layout", required=True, action=Once, help="bhsd, bshd or sbhd")
    rp.add_argument("--shape", metavar="NAME=V,...", help="write the script for this shape instead of the counterexample")
    rp.add_argument("--model", action="append", default=[], metavar="FILE.yaml", help="extra model file (repeatable)")
    rp.add_argument("--bound", action="append", type=bound_arg, default=[], metavar="NAME=MIN:MAX")
    rp.add_argument("--timeout", type=int, default=None, metavar="MS",
                    help="the query budget as nominal ms (converted to resource units; default 10 Mru)")
    rp.add_argument("--direct", action="store_true",
                    help="launch the code object itself (HIP module API) with the host's arguments, bypassing the "
                         "host's routing: shows a latent finding too")
    rp.add_argument("-o", "--output", metavar="FILE.py", help="write the script to FILE.py (default stdout)")
    rp.add_argument("--cache-dir", metavar="DIR", default=None,
                    help="the query cache verify's (default $ADDRSIM_CACHE/queries, i.e. ~/.cache/addrsim/queries)")
    rp.add_argument("--no-cache", action="store_true", help="decide every query again (no query cache)")


def _within_bounds(shape: Dict[str, int], bounds) -> None:
    """Refuse a --bound that the --shape lies outside (:func:`bounds_of` refuses an empty
    one): a bound given with a shape is a claim about it, never silently dropped.  Raises
    InputError."""
    for name, (lo, hi) in bounds:
        if name in shape and not lo <= shape[name] <= hi:
            raise InputError("--bound", f"--shape has {name}={shape[name]}, outside --bound {name}={lo}:{hi}")


def run(args) -> int:
    from addrsim.loader.listing import load_source
    try:
        check_outputs(args, (("output", "-o"),))
        models = load_models(list(args.model))
        co = load_source(args.file, args.like).co
        kern = co.kernels[0].symbol
        coords, why, prediction, latent = None, "", None, None
        if args.shape is not None:
            prob = _problem(args, models, co)
            shape = _parse_shape(args.shape, dict(prob.fixed))
            _in_declared(shape, prob.declared)
            _within_bounds(shape, bounds_of(args).items())
            memory = _fits_or_offer(args, models, prob, co.arch, shape)
            from addrsim.commands.crosscheck import _predict
            pred, chk = _predict(args.file, args.layout, shape, [args.buffer], models, args.like, args.timeout)
            prediction = pred
            why = {"fail": f"The prover refutes {args.buffer}/{args.layout} at exactly this shape.",
                   "pass": f"The prover proves {args.buffer}/{args.layout} at exactly this shape: the script "
                           "is a control, expected to PASS.",
                   None: "The prover could not decide this shape (unknown)."}[pred]
            if chk:
                coords = (chk["counterexample"]["coords"]["batch_id"], chk["counterexample"]["coords"]["head_id"])
                latent = _latent(chk)
        else:
            rep = verify(args.file, [args.buffer], [args.layout], models=models, bounds=bounds_of(args),
                         timeout_ms=args.timeout, properties=("address",), like=args.like, cache=query_store(args))
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
            latent = _latent(c)
            memory = int(x.get("memory_bytes") or 0)
        # the family's dQ accumulator (models/fmha_bwd_v3.yaml params.acc): 4 = the fp32
        # accumulator (aiter's is_v3_atomic_fp32=True), 0 = dQ written with 16-bit atomics and
        # 2 = the 16-bit accumulator (both is_v3_atomic_fp32=False)
        from addrsim.model.models import choose_family
        fam = choose_family(models, co.kernels[0], co.arch)
        fam_acc = int((fam.get("params") or {}).get("acc", 0)) if fam else 0     # models.py: acc defaults to 0
        try:
            if getattr(args, "direct", False):
                text = _direct_text(args, models, co, shape, coords, why, latent, memory, prediction)
            else:
                text = script(kern, str(args.file), args.buffer, args.layout, shape,
                              "fp16" if "_fp16" in kern else "bf16", atomic32=fam_acc == 4, coords=coords, why=why,
                              causal="_causal" in kern, prediction=prediction, memory_bytes=memory, latent=latent)
        except ValueError as e:
            raise InputError("--layout", str(e)) from None
    except AddrsimError as e:
        sys.stderr.write(f"addrsim: {e}\n")
        return e.exit_code
    sys.stderr.write(f"addrsim: the script needs {_amount(memory)} of device memory for the tensors at "
                     f"this shape and about {_amount(ref_mib(shape) * 2**20)} for its reference\n" if memory else
                     f"addrsim: the script's reference needs about {_amount(ref_mib(shape) * 2**20)} (the models give "
                     f"no tensor sizes for this family)\n")
    if latent and getattr(args, "direct", False):
        sys.stderr.write(f"addrsim: LATENT under {latent[0]}: its routing does not send this shape to this kernel; "
                         f"the script launches the kernel directly, so it shows the bug on the device\n")
    elif latent:
        sys.stderr.write(f"addrsim: LATENT under {latent[0]}: its routing does not send this shape to this kernel, "
                         f"so through aiter's API the script is expected to PASS (another kernel runs); it shows "
                         f"the bug only where this kernel runs at this shape (the script's header says how)\n")
    try:
        if args.output:
            with atomic_open(args.output, "w") as fh:
                fh.write(text)
        else:
            sys.stdout.write(text)
    except OSError as e:
        sys.stderr.write(f"addrsim: {args.output or 'stdout'}: cannot write ({e.strerror})\n")
        return EXIT_BAD_INPUT
    return 0


def _direct_text(args, models, co, shape, coords, why, latent, memory, prediction) -> str:
    """The ``--direct`` script of the case (:func:`direct_script`).  Raises InputError for a
    listing (HIP loads a code object: assemble the listing first), NotEmulatedError for a
    launch addrsim cannot pack (group mode)."""
    from addrsim.emu.launch import direct_launch
    from addrsim.loader.listing import is_code_object
    if args.like is not None or not is_code_object(args.file):
        raise InputError(args.file, "--direct launches a code object; assemble the listing into one and give that")
    plan = direct_launch(args.file, args.layout, shape, models)
    return direct_script(plan, str(args.file), args.buffer, args.layout, shape, coords, why,
                         "_causal" in plan.symbol, memory, latent, prediction)


def _amount(n: float) -> str:
    """Bytes as GiB from 1 GiB up, MiB from 1 MiB (2 decimals under 10 MiB), else KiB."""
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    if n < 2**20:
        return f"{n / 2**10:.1f} KiB"
    return f"{n / 2**20:.2f} MiB" if n < 10 * 2**20 else f"{n / 2**20:.0f} MiB"


def _latent(check: dict) -> Optional[tuple]:
    """(host, its routing conditions that mask the counterexample) when the check's
    counterexample is latent under its host, else None."""
    r = check.get("routing") or {}
    if r.get("reachable") is False:
        return r.get("host") or "the host", list(r.get("masked_by") or [])
    return None


def _problem(args, models, co):
    """The problem of the code object's kernel in the chosen layout: the sizes its family
    fixes (``fixed`` in models/fmha_bwd_v3.yaml: hdim_q, hdim_v), the declared range of every
    shape variable, the memory layer.  Raises InputError for a layout the models do not define."""
    from addrsim.ir.expr import Sym
    from addrsim.model.problem import build_problem
    if args.layout not in models.layouts:
        raise InputError("--layout", f"unknown layout {args.layout!r} (the models define "
                                     f"{', '.join(sorted(models.layouts))})")
    return build_problem(models, co.kernels[0], args.layout, Sym("tid_x", 32, "lane"), {}, co.arch, None)


def _in_declared(shape: Dict[str, int], declared) -> None:
    """Refuse a --shape outside the shape bounds the models declare (the domain the verdicts
    are about).  Raises InputError."""
    for k, v in shape.items():
        lo, hi = declared.get(k, (v, v))
        if not lo <= v <= hi:
            raise InputError("--shape", f"{k}={v} is outside the models' shape bounds {k}={lo}:{hi}")


def _fits_or_offer(args, models, prob, arch: str, shape: Dict[str, int]) -> int:
    """Bytes every tensor of the family takes at the user's ``--shape`` (the models' memory
    layer; 0 when they give no sizes).  Raises InputError when that is more than the
    architecture's device memory, offering the smallest failing shape the prover finds for
    the buffer and layout (the same finding at a shape that fits), or saying there is none."""
    from addrsim.ir import expr as X
    if prob.memory is None:
        return 0
    need = X.evaluate(prob.memory, dict({v: lo for v, (lo, _) in prob.declared.items()}, **shape))
    if not prob.memory_limit or need <= prob.memory_limit:
        return need
    rep = verify(args.file, [args.buffer], [args.layout], models=models, timeout_ms=args.timeout,
                 properties=("address",), like=args.like)
    c = rep["kernels"][0]["checks"][0]
    offer = ("; the smallest shape that reproduces the finding: "
             + ",".join(f"{k}={v}" for k, v in c["counterexample"]["shape"].items())
             if c["verdict"] == Verdict.COUNTEREXAMPLE else
             f"; the prover finds no failing shape that fits ({args.buffer}/{args.layout} is {c['verdict']})")
    raise InputError("--shape", f"the tensors at this shape take {need / 2**30:.1f} GiB, more than the "
                                f"{prob.memory_limit / 2**30:.0f} GiB of a {arch} device{offer}")


def _parse_shape(text: str, fixed: Optional[Dict[str, int]] = None) -> Dict[str, int]:
    """The ``--shape NAME=V,...`` of ``repro``: batch, nhead_q, seqlen_q and hdim_q required
    (hdim_q and hdim_v default to the kernel family's ``fixed`` sizes; a value that differs
    from them is refused), nhead_k, seqlen_k and hdim_v defaulting to nhead_q, seqlen_q and
    hdim_q.  Raises InputError for anything else."""
    from addrsim.model.models import SHAPE_VARS
    try:
        pairs = [kv.split("=", 1) for kv in text.split(",")]
        if not all(len(p) == 2 and re.fullmatch(r"[0-9]+", p[1].strip()) for p in pairs):
            raise ValueError(text)
        shape = {k.strip(): int(v) for k, v in pairs}
    except ValueError:
        raise InputError("--shape", f"expected NAME=V,NAME=V,..., got {text!r}") from None
    if len(shape) != len(pairs):
        raise InputError("--shape", f"a name is given twice in {text!r}")
    for k, v in shape.items():
        if k not in SHAPE_VARS[:7]:
            raise InputError("--shape", f"unknown name {k!r} (batch, nhead_q, nhead_k, seqlen_q, seqlen_k, "
                                        "hdim_q, hdim_v)")
        if not 1 <= v < 1 << 31:
            raise InputError("--shape", f"{k}={v} is not a size (1 .. 2**31-1)")
    for k, v in (fixed or {}).items():
        if k in shape and shape[k] != v:
            raise InputError("--shape", f"{k}={shape[k]}, but this kernel's family is built for {k}={v}")
    defaults = {"nhead_k": shape.get("nhead_q", 1), "seqlen_k": shape.get("seqlen_q", 1),
                **{k: v for k, v in (fixed or {}).items() if k in ("hdim_q", "hdim_v")}}
    defaults.setdefault("hdim_v", shape.get("hdim_q", defaults.get("hdim_q", 128)))
    shape = {**defaults, **shape}
    missing = [n for n in ("batch", "nhead_q", "seqlen_q", "hdim_q") if n not in shape]
    if missing:
        raise InputError("--shape", f"missing {', '.join(missing)}")
    if shape["nhead_q"] % shape["nhead_k"]:
        raise InputError("--shape", "nhead_q must be a multiple of nhead_k")
    return shape
