"""Pattern D (DOMAIN.md section 2; seed note "Pattern D: dQ Has Its Own s_BAs Batch Term"): "if
dQ has its own batch term from s_BAs, that term needs the same branching."

The dQ accumulator is allocated by the host, contiguous, whatever Q's layout (aiter
asm_mha_bwd.cu AB:308-315; models/fmha_bwd_v3.yaml `buffers.dq`/`dq_acc`):

* fp32 (a32): [batch, nhead_q, seqlen_q, hdim], acc = 4 bytes: batch term (bytes)
  ``batch_id * nhead_q*seqlen_q*hdim*4``;
* 16-bit (gfx950 a16): [batch, nhead_q, seqlen_q16, dpad], acc = 2: ``batch_id *
  nhead_q*seqlen_q16*dpad*2``.

A kernel that derives it from Q's batch stride BAs (bytes, e = 2 bytes an element) forms
``batch_id * BAs * acc / e`` (a32: ``(batch_id*BAs) << 1``): right when BAs =
nhead_q*seqlen_q*hdim*e (BHSD, BSHD), wrong for SBHD (BAs = nhead_q*hdim*e).  With pattern B's
branch: ``BAs < Seqs ? batch_id * (BAs/(hdim*e)) * seq_len * hdim * acc : batch_id*BAs*acc/e``.

Claims per layout (models/layouts.yaml), per view (examples/layouts/views.yaml) and per extra
view of proofs/_layouts.py, for the a32 head dims 64/128/192/256 and the a16 pitches 128/192:
without the branch, with it, and in 32-bit arithmetic (s_mul_i32, the host's u32 casts).
Unlike patterns B and C, LSE padding does not matter here (bshd_lse_padded is proved).

Units: BAs, Seqs, terms in bytes; hdim, dpad, seqlen in elements.
"""
from __future__ import annotations

from ._claims import (BATCH, NHEAD, SEQLEN, U32, Claim, Dom, GiB, MEMORY_GIB, all_, div, hdim_cases, 
                      implies, ite, u32)
from ._layouts import Layout, q_bytes
from .pattern_b_sbhd_test import FILE, LAYOUTS

SRC = ("DOMAIN.md section 2; seed note (Pattern D); models/fmha_bwd_v3.yaml buffers dq/dq_acc; "
       "aiter asm_mha_bwd.cu AB:308-315 (accumulators), codegen.py G2:557-721 (args.BAs = batch_stride_q*2)")


def strides(lay: Layout, v, hdim, width32=False):
    """Q's byte strides (Q's head dim ``hdim``), exact or after the host's u32 cast."""
    s = q_bytes(lay, v, hdim, v["e"])
    return {k: u32(x) for k, x in s.items()} if width32 else s


def dq_term(lay: Layout, v, *, qhdim, khdim, acc, branch=True, width32=False):
    """The kernel's dq_acc batch term (bytes) from Q's BAs: ``batch_id*BAs*acc/e``, and with
    ``branch`` the SBHD rebuild ``batch_id*(BAs/(khdim*e))*seq_len*khdim*acc``.  qhdim: Q's head
    dim (its strides); khdim: the kernel's head dim (a16: the accumulator pitch dpad).
    ``width32``: s_mul_i32 steps (low 32 bits)."""
    s = strides(lay, v, qhdim, width32)
    bid, e = v["batch_id"], v["e"]
    if width32:
        short = u32(u32(bid * s["BAs"]) * (acc // e)) if acc % e == 0 else u32(div(u32(bid * s["BAs"]) * acc, e))
    else:
        short = div(bid * s["BAs"] * acc, e)
    if not branch:
        return short
    nh = div(s["BAs"], khdim * e)
    if width32:
        sb = u32(u32(u32(bid * nh) * v["seqlen_q"]) * (khdim * acc))
    else:
        sb = bid * nh * v["seqlen_q"] * khdim * acc
    return ite(s["BAs"] < s["Seqs"], sb, short)


def true_a32(v):
    """fp32 accumulator batch term: batch_id*nhead_q*seqlen_q*hdim*4 bytes."""
    return v["batch_id"] * v["nhead_q"] * v["seqlen_q"] * v["hdim"] * 4


def true_a16(v):
    """16-bit accumulator batch term: batch_id*nhead_q*seqlen_q16*dpad*2 bytes."""
    return v["batch_id"] * v["nhead_q"] * v["seqlen_q16"] * v["dpad"] * 2


def _vars(lay: Layout, a16=False):
    d = {"batch": Dom(*BATCH), "nhead_q": Dom(*NHEAD), "seqlen_q": Dom(*SEQLEN), "batch_id": Dom(0, BATCH[1] - 1)}
    if a16:
        d["hdim_q"] = Dom(1, 256)
        d["seqlen_q16"] = Dom(16, 2 ** 20, step=16)
    if any("hdim_pad" in t for t in lay.text.values()):
        d["hdim_pad"] = Dom(1, 1024)
    return d


def _domain(v):
    cs = [v["batch_id"] >= 0, v["batch_id"] < v["batch"]]
    if "hdim_pad" in v:
        cs.append(v["hdim_pad"] >= (v["hdim_q"] if "dpad" in v else v["hdim"]))
    if "dpad" in v:          # a16 families: hdim_q in dpad-63..dpad, % 8 (192: exactly); seqlen_q16 = ceil16
        lo = v["dpad"] if v["dpad"] == 192 else v["dpad"] - 63
        cs += [v["hdim_q"] <= v["dpad"], v["hdim_q"] >= lo, v["hdim_q"] % 8 == 0,
               v["seqlen_q16"] >= v["seqlen_q"], v["seqlen_q16"] <= v["seqlen_q"] + 15]
    return all_(*cs)


def _shape(b, h, s, **kw):
    return dict(batch=b, nhead_q=h, seqlen_q=s, **kw)


def a32_claim(lay: Layout, *, branch=True, width32=False, pre=None, expect="proved", expect_shape=None,
              dropped=None, suffix="", lemmas=(), cases=None):
    kind = "branch" if branch else "nobranch"
    return Claim(
        name=f"D.a32.{'u32.' if width32 else ''}{kind}.{lay.name}{suffix}", pattern="D",
        statement=(f"{'32-bit ' if width32 else ''}dq_acc batch term from Q's BAs "
                   f"{'with' if branch else 'without'} the BAs < Seqs branch == batch_id*nhead_q*seqlen_q*hdim*4 "
                   f"bytes (fp32 accumulator), for {lay.name} ({lay.origin})"),
        variables=_vars(lay),
        lhs=lambda v: dq_term(lay, v, qhdim=v["hdim"], khdim=v["hdim"], acc=4, branch=branch, width32=width32),
        rhs=true_a32, precondition=pre or (lambda v: True), domain=_domain, cases=cases or hdim_cases(),
        expect=expect, expect_shape=expect_shape, dropped=dropped, source=SRC, lemmas=lemmas,
        minimize=("batch", "nhead_q", "seqlen_q", "hdim_pad"),
        lhs_text=f"dq term ({kind})", rhs_text="batch_id*nhead_q*seqlen_q*hdim*4")


def a16_claim(lay: Layout, *, pre, expect="proved", expect_shape=None, dropped=None, suffix="", branch=True):
    return Claim(
        name=f"D.a16.{'branch' if branch else 'nobranch'}.{lay.name}{suffix}", pattern="D",
        statement=(f"dq_acc batch term from Q's BAs with the branch (kernel head dim = pitch dpad) == "
                   f"batch_id*nhead_q*seqlen_q16*dpad*2 bytes (16-bit accumulator), for {lay.name}"),
        variables=_vars(lay, a16=True),
        lhs=lambda v: dq_term(lay, v, qhdim=v["hdim_q"], khdim=v["dpad"], acc=2, branch=branch),
        rhs=true_a16, precondition=pre, domain=_domain, cases=tuple({"dpad": d, "e": 2} for d in (128, 192)),
        expect=expect, expect_shape=expect_shape, dropped=dropped, source=SRC,
        minimize=("batch", "nhead_q", "seqlen_q", "hdim_q"),
        lhs_text="dq term (branch)", rhs_text="batch_id*nhead_q*seqlen_q16*dpad*2")


def p_seq16(v):
    return v["seqlen_q"] % 16 == 0


def p_hdim_dpad(v):
    return v["hdim_q"] == v["dpad"]


def p_no_wrap(lay: Layout):
    """32-bit precondition: Seqs < 2^32, (batch-1)*BAs*2 < 2^32 and (batch-1)*nhead_q*seqlen_q*hdim*4 < 2^32."""
    def pre(v):
        s = strides(lay, v, v["hdim"])
        return all_(s["Seqs"] < U32, (v["batch"] - 1) * s["BAs"] * 2 < U32,
                    (v["batch"] - 1) * v["nhead_q"] * v["seqlen_q"] * v["hdim"] * 4 < U32)
    return pre


def in_memory(v):
    """Q, dO, dQ (2 bytes), LSE, D and the fp32 accumulator fit in 288 GiB (contiguous sizes)."""
    rows = v["batch"] * v["nhead_q"] * v["seqlen_q"]
    return rows * (3 * v["hdim"] * 2 + 8 + v["hdim"] * 4) <= MEMORY_GIB * GiB


def sbhd_lemmas(lay: Layout):
    """Steps of the 32-bit SBHD proof, each proved before use (see pattern B)."""
    def st(v):
        return strides(lay, v, v["hdim"])
    p = lambda v: v["batch_id"] * v["nhead_q"] * v["seqlen_q"]
    return (
        ("Q's byte strides fit 32 bits", lambda v: all_(u32(st(v)["BAs"]) == st(v)["BAs"], u32(st(v)["Seqs"]) == st(v)["Seqs"])),
        ("BAs < Seqs <=> batch > 1", lambda v: (st(v)["BAs"] < st(v)["Seqs"]) == (v["batch"] > 1)),
        ("BAs/(hdim*e) == nhead_q", lambda v: div(st(v)["BAs"], v["hdim"] * v["e"]) == v["nhead_q"]),
        ("batch_id*nhead_q*seqlen_q <= (batch-1)*nhead_q*seqlen_q",
         lambda v: p(v) <= (v["batch"] - 1) * v["nhead_q"] * v["seqlen_q"]),
        ("batch_id*nhead_q*seqlen_q*hdim*4 < 2^32", lambda v: p(v) * v["hdim"] * 4 < U32),
        ("batch_id*nhead_q <= batch_id*nhead_q*seqlen_q", lambda v: v["batch_id"] * v["nhead_q"] <= p(v)),
        ("batch == 1 => batch_id == 0", lambda v: implies(v["batch"] == 1, v["batch_id"] == 0)),
    )


# ---- expected results, written out ---------------------------------------------------------
NOBRANCH = {"bhsd": None, "bshd": None, "sbhd": _shape(2, 1, 2)}   # SBHD: BAs*2 = nhead*hdim*4, right only for seqlen 1
BRANCH = {
    "bhsd": None, "bshd": None, "sbhd": None,
    "bshd_qkv_packed": _shape(2, 1, 1),       # Q's batch stride is 3x
    "my_view": _shape(2, 1, 1),               # Q's batch stride is 4x
    "bshd_dq_bhsd": None,                     # the accumulator is the host's, whatever dQ's layout
    "sbhd_padded_hdim": _shape(2, 1, 1, hdim_pad=256),
    "bshd_batch_broadcast": _shape(2, 1, 1),
    "hbsd_head_major": _shape(2, 2, 1),
    "bshd_lse_padded": None,                  # LSE padding does not enter the dQ term
}


def _ex(x):
    return dict(expect="proved") if x is None else dict(expect="counterexample", expect_shape=x)


def _claims():
    out = [a32_claim(FILE[n], branch=False, **_ex(x)) for n, x in NOBRANCH.items()]
    out += [a32_claim(LAYOUTS[n], **_ex(x)) for n, x in BRANCH.items()]
    for n in ("bhsd", "bshd", "sbhd"):
        out.append(a16_claim(FILE[n], pre=lambda v: all_(p_seq16(v), p_hdim_dpad(v))))
    out.append(a16_claim(FILE["bhsd"], pre=p_hdim_dpad, expect="counterexample", dropped=p_seq16,
                         expect_shape=_shape(2, 1, 1), suffix=".seqlen-unaligned"))
    for n in ("bhsd", "sbhd"):
        out.append(a16_claim(FILE[n], pre=p_seq16, expect="counterexample", dropped=p_hdim_dpad,
                             expect_shape=_shape(2, 1, 16, hdim_q=72), suffix=".hdim-below-dpad"))
    for n in ("bhsd", "sbhd"):
        lay = FILE[n]
        lem = sbhd_lemmas(lay) if n == "sbhd" else ()
        out.append(a32_claim(lay, width32=True, pre=p_no_wrap(lay), suffix=".no-wrap", lemmas=lem))
        out.append(a32_claim(lay, width32=True, pre=in_memory, expect="counterexample", dropped=p_no_wrap(lay),
                             expect_shape=_shape(2, 8, 2 ** 20), suffix=".in-memory"))
    return out


CLAIMS = _claims()
