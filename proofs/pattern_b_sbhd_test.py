"""Pattern B, the SGPR-safe heuristic (DOMAIN.md section 2; seed note "Pattern B: SGPR-Safe
Heuristic").

The wheel's kernels get only Q's byte strides BAs (batch), Hs (head), Seqs (sequence row) and
seq_len = seqlen_q (argument list ``... seq_len Ts Hs BAs Seqs ...``, DOMAIN.md section 4;
filled by aiter codegen.py: ``args.BAs = a.batch_stride_q * 2``, mha_bwd.h fields are 32-bit
unsigned).  The LSE/D batch term (bytes) must be ``batch_id * nhead_q * seqlen_q * 4``
(``batch_id * batch_stride_lsed * 4`` in general).  Without nhead_q the kernel derives it:

* non-SBHD shortcut: ``(batch_id * BAs) >> 6`` for hdim 128 with e = 2 bytes, in general
  ``batch_id * BAs * 4 / (hdim * e)`` (a shift when hdim*e/4 is a power of two): right when
  ``BAs = nhead_q*seqlen_q*hdim*e`` (BHSD, BSHD), wrong for SBHD (``BAs = nhead_q*hdim*e``);
* pattern B: ``if BAs < Seqs`` (taken as "this is SBHD") rebuild the term from the batch
  stride: ``nhead_q = BAs / (hdim*e)``, term = ``batch_id * (BAs/(hdim*e)) * seq_len * 4``;
  otherwise the shortcut.

Claims, per layout of models/layouts.yaml, per view of examples/layouts/views.yaml and per
extra view written in proofs/_layouts.py (SBHD with a padded head dim, a batch-broadcast Q,
a head-major permutation, LSE rows padded), for every head dim of the families (64, 128,
192, 256; e = 2) and every shape in addrsim's bounds:

* ``B.detect.<layout>``: ``BAs < Seqs  <=>  (layout is SBHD and batch > 1)`` (exact strides);
* ``B.term.<layout>``: pattern B's term == the true LSE batch term, for batch_id < batch;
* ``B.u32.*``: the same with the 32-bit machine: BAs and Seqs cast to u32 by the host, the
  products in s_mul_i32 (low 32 bits), with the no-wrap precondition, without it, and with
  only "the call fits in device memory" (288 GiB).

A layout "is SBHD" when Q's dimension order is [seq, batch, head, hdim] (the root of a view's
``extends`` chain; the extra views say it explicitly).  With batch == 1 an SBHD Q has
BAs == Seqs, the test is false, and the shortcut is taken -- harmless, since batch_id = 0.

Units: BAs, Hs, Seqs, terms in bytes; the yaml strides in elements (times e = 2, or times 4
for fp32 LSE); hdim, hdim_pad, seq_len in elements.
"""
from __future__ import annotations

from ._claims import (BATCH, NHEAD, SEQLEN, U32, Claim, Dom, all_, div, fits_memory, hdim_cases, implies, ite, 
                      shr, u32)
from ._layouts import Layout, extra_layouts, file_layouts, lse_bytes, q_bytes, view_layouts

SRC = ("DOMAIN.md sections 1, 2, 4; seed note fmha-bwd-sbhd-lsed-fix.txt (Pattern B); aiter codegen.py "
       "G2:557-721 (args.BAs = a.batch_stride_q * 2), mha_bwd.h H:66-158 (u32 Hs, BAs, Seqs, seq_len)")

FILE = file_layouts()
VIEWS = view_layouts()
EXTRA = extra_layouts()
LAYOUTS = {**FILE, **VIEWS, **EXTRA}


def _log2(n: int):
    return n.bit_length() - 1 if n > 0 and n & (n - 1) == 0 else None


def strides(lay: Layout, v, width32: bool = False):
    """Q's byte strides as the kernel sees them: exact, or after the host's u32 cast."""
    s = q_bytes(lay, v, v["hdim"], v["e"])
    return {k: u32(x) for k, x in s.items()} if width32 else s


def shortcut(v, BAs, shift=None, width32=False):
    """The non-SBHD shortcut: (batch_id*BAs) >> log2(hdim*e/4) -- ``>> 6`` for hdim 128, e 2 --
    or batch_id*BAs / (hdim*e/4) when that is not a power of two (bytes).  ``width32``: the
    product in s_mul_i32."""
    p = v["batch_id"] * BAs
    if width32:
        p = u32(p)
    k = shift if shift is not None else _log2(v["hdim"] * v["e"] // 4)
    return shr(p, k) if k is not None else div(p, v["hdim"] * v["e"] // 4)


def sbhd_term(v, BAs, width32=False):
    """The SBHD branch: nhead_q recovered as BAs / (hdim*e), term = batch_id * nhead * seq_len * 4
    (bytes); ``width32``: s_mul_i32 twice then s_lshl_b32 2."""
    nh = div(BAs, v["hdim"] * v["e"])
    if width32:
        return u32(u32(u32(v["batch_id"] * nh) * v["seqlen_q"]) * 4)
    return v["batch_id"] * nh * v["seqlen_q"] * 4


def detect(s, cmp="lt"):
    """The SBHD test on Q's strides: BAs < Seqs (s_cmp_lt_u32)."""
    return s["BAs"] < s["Seqs"] if cmp == "lt" else s["BAs"] <= s["Seqs"]


def pattern_b(lay: Layout, v, *, branch=True, shift=None, cmp="lt", width32=False):
    """Pattern B's LSE/D batch term in bytes (``branch=False``: the shortcut alone)."""
    s = strides(lay, v, width32)
    short = shortcut(v, s["BAs"], shift, width32)
    if not branch:
        return short
    return ite(detect(s, cmp), sbhd_term(v, s["BAs"], width32), short)


def true_term(lay: Layout, v):
    """The true LSE/D batch term: batch_id * LSE's batch stride (bytes)."""
    return v["batch_id"] * lse_bytes(lay, v, v["hdim"])["batch"]


def _vars(lay: Layout, ids: bool):
    d = {"batch": Dom(*BATCH), "nhead_q": Dom(*NHEAD), "seqlen_q": Dom(*SEQLEN)}
    if ids:
        d["batch_id"] = Dom(0, BATCH[1] - 1)
    if any("hdim_pad" in t for t in lay.text.values()):
        d["hdim_pad"] = Dom(1, 1024)
    return d


def _domain(v):
    cs = []
    if "batch_id" in v:
        cs += [v["batch_id"] >= 0, v["batch_id"] < v["batch"]]
    if "hdim_pad" in v:
        cs.append(v["hdim_pad"] >= v["hdim"])      # a padded head dim is at least the head dim
    return all_(*cs) if cs else True


def _where(lay: Layout) -> str:
    return f"{lay.name} ({lay.origin}; Q strides {', '.join(f'{k}={x}' for k, x in lay.text.items())})"


def detect_claim(lay: Layout, *, expect="proved", expect_shape=None, cmp="lt", width32=False, pre=None,
                 dropped=None, suffix="", cases=None):
    """``BAs < Seqs  <=>  (layout is SBHD and batch > 1)`` for ``lay``."""
    sb = lay.is_sbhd
    return Claim(
        name=f"B.{'u32.' if width32 else ''}detect.{lay.name}{suffix}", pattern="B",
        statement=(f"{'u32(BAs) < u32(Seqs)' if width32 else 'BAs < Seqs'} <=> "
                   f"(layout is SBHD and batch > 1), for {_where(lay)}"),
        variables=_vars(lay, ids=False),
        lhs=lambda v: detect(strides(lay, v, width32), cmp),
        rhs=lambda v: (v["batch"] > 1) if sb else False,
        precondition=pre or (lambda v: True), domain=_domain, cases=cases or hdim_cases(),
        expect=expect, expect_shape=expect_shape, dropped=dropped, source=SRC,
        lhs_text="u32(BAs) < u32(Seqs)" if width32 else "BAs < Seqs", rhs_text=f"is_sbhd({sb}) and batch > 1")


def term_claim(lay: Layout, *, expect="proved", expect_shape=None, branch=True, shift=None, cmp="lt",
               width32=False, pre=None, dropped=None, suffix="", cases=None, minimize=("batch", "nhead_q", "seqlen_q"),
               lemmas=()):
    """Pattern B's batch term == batch_id * LSE batch stride (bytes) for ``lay``."""
    return Claim(
        name=f"B.{'u32.' if width32 else ''}term.{lay.name}{suffix}", pattern="B",
        statement=(f"{'32-bit ' if width32 else ''}pattern B term "
                   f"(BAs < Seqs ? batch_id*(BAs/(hdim*e))*seq_len*4 : (batch_id*BAs)>>log2(hdim*e/4)) "
                   f"== batch_id*batch_stride_lsed*4 bytes, for {_where(lay)}"),
        variables=_vars(lay, ids=True),
        lhs=lambda v: pattern_b(lay, v, branch=branch, shift=shift, cmp=cmp, width32=width32),
        rhs=lambda v: true_term(lay, v),
        precondition=pre or (lambda v: True), domain=_domain, cases=cases or hdim_cases(),
        expect=expect, expect_shape=expect_shape, dropped=dropped, minimize=minimize, source=SRC,
        lhs_text="pattern B term", rhs_text="batch_id*batch_stride_lsed*4", lemmas=lemmas)


def shape(b, h, s, **kw):
    return dict(batch=b, nhead_q=h, seqlen_q=s, **kw)


# ---- expected results, written out (the proofs must reproduce them) ----------------------

# BAs < Seqs <=> (SBHD and batch > 1): None = proved, else the minimal counterexample
DETECT = {
    "bhsd": None, "bshd": None, "sbhd": None,
    "bshd_qkv_packed": None, "my_view": None, "bshd_dq_bhsd": None,
    "sbhd_padded_hdim": None,
    "bshd_batch_broadcast": shape(1, 1, 1),      # BAs = 0 < Seqs even with batch 1: not SBHD, detected
    "hbsd_head_major": None,                     # BAs = seqlen*hdim*e >= Seqs = hdim*e: never detected
    "bshd_lse_padded": None,
}

# pattern B term == batch_id * batch_stride_lsed * 4
TERM = {
    "bhsd": None, "bshd": None, "sbhd": None,
    "bshd_qkv_packed": shape(2, 1, 1),           # Q's batch stride is 3x (packed QKV), LSE rows padded
    "my_view": shape(2, 1, 1),                   # Q's batch stride is 4x (a view of every 4th head group)
    "bshd_dq_bhsd": None,                        # only dQ differs; Q and LSE are plain BSHD
    "sbhd_padded_hdim": shape(2, 1, 1, hdim_pad=256),   # BAs/(hdim*e) = nhead*hdim_pad/hdim != nhead
    "bshd_batch_broadcast": shape(2, 1, 1),      # BAs = 0: detected as SBHD, nhead recovered as 0
    "hbsd_head_major": shape(2, 2, 1),           # BAs = seqlen*hdim*e: the shortcut misses nhead
    "bshd_lse_padded": shape(2, 1, 1),           # LSE batch stride nhead*(seqlen+64), kernel assumes seqlen
}


def _expect(table, name):
    x = table[name]
    return dict(expect="proved") if x is None else dict(expect="counterexample", expect_shape=x)


def p_no_wrap(lay: Layout):
    """32-bit precondition (bytes): Seqs < 2^32, (batch-1)*BAs < 2^32 (the shortcut's s_mul_i32
    and the host's cast of BAs, for every batch_id) and (batch-1)*nhead_q*seqlen_q*4 < 2^32 (the
    SBHD branch's products)."""
    def pre(v):
        s = strides(lay, v)
        return all_(s["Seqs"] < U32, (v["batch"] - 1) * s["BAs"] < U32,
                    (v["batch"] - 1) * v["nhead_q"] * v["seqlen_q"] * 4 < U32)
    return pre


def p_strides_fit(lay: Layout):
    """The host's u32 casts keep BAs and Seqs (bytes < 2^32)."""
    def pre(v):
        s = strides(lay, v)
        return all_(s["BAs"] < U32, s["Seqs"] < U32)
    return pre


def in_memory(v):
    return fits_memory(v, v["hdim"], v["e"])


def sbhd_lemmas(lay: Layout):
    """Steps of the 32-bit SBHD proof, each proved by check() before it is used (they spare
    Z3 the nonlinear reasoning it does not always find, e.g. for hdim 192)."""
    def fit(v):
        st = strides(lay, v)
        return all_(u32(st["BAs"]) == st["BAs"], u32(st["Seqs"]) == st["Seqs"])
    return (
        ("Q's byte strides fit 32 bits", fit),
        ("BAs < Seqs <=> batch > 1", lambda v: (strides(lay, v)["BAs"] < strides(lay, v)["Seqs"]) == (v["batch"] > 1)),
        ("BAs/(hdim*e) == nhead_q", lambda v: div(strides(lay, v)["BAs"], v["hdim"] * v["e"]) == v["nhead_q"]),
        ("batch_id*nhead_q*seqlen_q <= (batch-1)*nhead_q*seqlen_q",
         lambda v: v["batch_id"] * v["nhead_q"] * v["seqlen_q"] <= (v["batch"] - 1) * v["nhead_q"] * v["seqlen_q"]),
        ("(batch-1)*nhead_q*seqlen_q*4 < 2^32", lambda v: (v["batch"] - 1) * v["nhead_q"] * v["seqlen_q"] * 4 < U32),
        ("batch_id*nhead_q*seqlen_q*4 < 2^32", lambda v: v["batch_id"] * v["nhead_q"] * v["seqlen_q"] * 4 < U32),
        ("batch_id*nhead_q <= batch_id*nhead_q*seqlen_q",
         lambda v: v["batch_id"] * v["nhead_q"] <= v["batch_id"] * v["nhead_q"] * v["seqlen_q"]),
        ("batch == 1 => the shortcut is 0", lambda v: implies(v["batch"] == 1, shortcut(v, strides(lay, v, True)["BAs"],
                                                                                           width32=True) == 0)),
    )


def _claims():
    out = []
    for n, lay in LAYOUTS.items():
        out.append(detect_claim(lay, **_expect(DETECT, n)))
    for n, lay in LAYOUTS.items():
        out.append(term_claim(lay, **_expect(TERM, n), minimize=("batch", "nhead_q", "seqlen_q", "hdim_pad")))
    pad = LAYOUTS["sbhd_padded_hdim"]
    # the exact boundary for a padded SBHD head dim: right iff nhead_q*(hdim_pad - hdim) < hdim
    out.append(Claim(
        name="B.term.sbhd_padded_hdim.iff", pattern="B",
        statement=("SBHD with head dim padded to hdim_pad, batch_id >= 1: pattern B's term is right "
                   "<=> nhead_q*(hdim_pad - hdim) < hdim (BAs/(hdim*e) == nhead_q)"),
        variables=_vars(pad, ids=True),
        lhs=lambda v: pattern_b(pad, v) == true_term(pad, v),
        rhs=lambda v: v["nhead_q"] * (v["hdim_pad"] - v["hdim"]) < v["hdim"],
        precondition=lambda v: v["batch_id"] >= 1, domain=_domain, cases=hdim_cases(), source=SRC,
        lhs_text="term right", rhs_text="nhead_q*(hdim_pad-hdim) < hdim"))
    # 32-bit machine: the host's u32 casts and s_mul_i32
    big = shape(1, 16, 2 ** 20)      # hdim 128: nhead*seqlen*256 = 2^32, u32(BAs) = 0 < Seqs
    for n, cex in (("bhsd", big), ("bshd", big), ("sbhd", None)):
        lay = FILE[n]
        ex = dict(expect="proved") if cex is None else dict(expect="counterexample", expect_shape=cex,
                                                             dropped=p_strides_fit(lay))
        out.append(detect_claim(lay, width32=True, **ex))
        if cex is not None:
            out.append(detect_claim(lay, width32=True, pre=p_strides_fit(lay), suffix=".strides-fit"))
    wraps = {"bhsd": shape(2, 16, 2 ** 20), "bshd": shape(2, 16, 2 ** 20), "sbhd": shape(5, 256, 2 ** 20)}
    in_mem = {"bhsd": shape(2, 16, 2 ** 20), "bshd": shape(2, 16, 2 ** 20), "sbhd": None}
    for n in ("bhsd", "bshd", "sbhd"):
        lay = FILE[n]
        lem = sbhd_lemmas(lay) if n == "sbhd" else ()
        out.append(term_claim(lay, width32=True, pre=p_no_wrap(lay), suffix=".no-wrap", lemmas=lem))
        out.append(term_claim(lay, width32=True, expect="counterexample", expect_shape=wraps[n],
                              dropped=p_no_wrap(lay), suffix=".wraps"))
        ex = dict(expect="proved") if in_mem[n] is None else dict(expect="counterexample", expect_shape=in_mem[n],
                                                                   dropped=p_no_wrap(lay))
        out.append(term_claim(lay, width32=True, pre=in_memory, suffix=".in-memory", lemmas=lem, **ex))
    return out


CLAIMS = _claims()
