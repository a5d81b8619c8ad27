"""No-wrap and identities without a solver (addrsim.ir.poly, the facts of
addrsim.backends.z3_int.IntEncoder), and the vectorised probe (addrsim.prove.probe).

Specification: a product that a kernel computes in 32 bits, ``256*head_id*seqlen_q`` with
``head_id < nhead_q``, cannot wrap when the exact-argument layer says
``256*nhead_q*seqlen_q < 2**32``: the integer encoding then has no ``mod`` for it, although
interval arithmetic over the shape bounds alone (head_id < 256, seqlen_q <= 2**20) allows
2**36.  ``256*batch_id*nhead_q*seqlen_q``, which the device-memory layer bounds only by
192 GiB, keeps its ``mod``: it really wraps.  Every encoding with facts gives each node its
machine value at every point of the conditions; the LSE formula's identity is decided by
polynomial arithmetic with no solver budget at all; a wrong formula is not.
"""
import random

import numpy as np
import pytest
import z3

from addrsim.backends.z3_int import IntEncoder
from addrsim.ir import expr as X
from addrsim.ir import poly as P
from addrsim.ir.expr import Const, Sym
from addrsim.prove import probe as PR
from addrsim.prove.query import Query

B, H, S = (Sym(n, 64, "shape") for n in ("batch", "nhead_q", "seqlen_q"))
BID, HID = Sym("batch_id", 32, "id"), Sym("head_id", 32, "id")
RANGES = {"batch": (1, 4096), "nhead_q": (1, 256), "seqlen_q": (1, 1 << 20), "batch_id": (0, 4095),
          "head_id": (0, 255)}
GIB192 = 192 << 30


def c64(v):
    return Const(v, 64)


def u32(e):
    return X.extract(e, 31, 0)


def domain(exact_layer=True):
    """Shape bounds, the grid (ids below their dimensions), device memory (the q tensor:
    batch*nhead_q*seqlen_q*128 bf16 elements), and the exact-argument layer (the batch stride
    256*nhead_q*seqlen_q bytes fits a u32 argument)."""
    conds = []
    for v in (B, H, S):
        lo, hi = RANGES[v.name]
        conds.append(X.band(X.ule(c64(lo), v), X.ule(v, c64(hi))))
    conds += [X.ult(X.zext(BID, 64), B), X.ult(X.zext(HID, 64), H),
              X.ule(X.mul(X.mul(X.mul(B, H), S), c64(256)), c64(GIB192))]
    if exact_layer:
        conds.append(X.ule(X.mul(X.mul(H, S), c64(256)), c64(0xFFFFFFFF)))
    return conds


def head_offset():
    """256*head_id*seqlen_q computed in 32 bits (s_mul_i32 twice)."""
    return X.mul(X.mul(HID, u32(S)), Const(256, 32))


def batch_offset():
    return X.mul(X.mul(X.mul(BID, u32(H)), u32(S)), Const(256, 32))


def wrapped_nodes(conds, e, facts=True):
    enc = IntEncoder(RANGES, facts_from=conds if facts else None)
    for c in conds:
        enc.holds(c)
    enc.enc(e)
    return enc, {id(n) for n, _, _ in enc.wrapped}


def test_grid_dominance_and_the_exact_layer_keep_a_32_bit_product_from_wrapping():
    e = head_offset()
    _, plain = wrapped_nodes(domain(), e, facts=False)
    enc, with_facts = wrapped_nodes(domain(), e)
    assert id(e) in plain                    # intervals alone: 256*255*2**20 >= 2**32
    assert id(e) not in with_facts and enc.nowrap_by_facts >= 1
    assert enc.interval(e)[1] <= 0xFFFFFFFF


def test_without_the_exact_layer_the_same_product_may_wrap():
    e = head_offset()
    _, with_facts = wrapped_nodes(domain(exact_layer=False), e)
    assert id(e) in with_facts               # 192 GiB of memory does not bound it by 2**32


def test_a_product_that_really_wraps_keeps_its_mod():
    e = batch_offset()
    _, with_facts = wrapped_nodes(domain(), e)
    assert id(e) in with_facts               # batch_id*nhead_q*seqlen_q*256 reaches 2**32 in memory


def _points(conds, n, seed):
    rnd = random.Random(seed)
    out = []
    while len(out) < n:
        env = {"batch": rnd.choice([1, 2, 3, 64, 4096]), "nhead_q": rnd.choice([1, 2, 9, 16, 255, 256]),
               "seqlen_q": rnd.choice([1, 64, 986944, 1 << 16, 1 << 20])}
        env["batch_id"] = rnd.randrange(env["batch"])
        env["head_id"] = rnd.randrange(env["nhead_q"])
        if all(X.evaluate(c, env) == 1 for c in conds):
            out.append(env)
    return out


@pytest.mark.parametrize("exact_layer", [True, False])
def test_the_encoding_with_facts_gives_every_node_its_machine_value(exact_layer):
    conds = domain(exact_layer)
    e = X.add(X.add(batch_offset(), head_offset()), X.mul(u32(S), Const(4, 32)))
    enc = IntEncoder(RANGES, facts_from=conds)
    for c in conds:
        enc.holds(c)
    t = enc.enc(e)
    for env in _points(conds, 25, seed=exact_layer):
        s = z3.Solver()
        s.add(*enc.side, *[enc.vars[k] == v for k, v in env.items() if k in enc.vars])
        s.add(t != X.evaluate(e, env))
        assert s.check() == z3.unsat, env


def test_bounds_from_a_memory_fact_cover_part_of_a_monomial():
    F = P.Facts()
    F.interval.update({"b": (1, 4096), "h": (1, 256), "s": (1, 1 << 20), "hid": (0, 255)})
    F.dominate("hid", "h", -1)
    F.upper({(("h", 1), ("s", 1)): 256}, 0xFFFFFFFF)
    lo, hi = F.bound({(("hid", 1), ("s", 1)): 256})
    assert (lo, hi) == (0, 256 * (0xFFFFFFFF // 256))
    lo, hi = F.bound({(("b", 1), ("hid", 1), ("s", 1)): 256})
    assert hi == 4096 * 256 * (0xFFFFFFFF // 256)          # the batch factor from its range
    assert F.bound(P.add(P.atom("s"), P.const(-1))) == (0, (1 << 20) - 1)


def _lse_claim(wrong=False):
    """The LSE slice base at (batch_id, head_id) minus the one at (0, 0), 64-bit, against
    batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed with Hs_lsed = 4*seqlen_q bytes."""
    hs = X.mul(S, c64(4))
    def base(bid, hid):
        return X.add(X.mul(X.mul(bid, H), hs), X.mul(hid, hs))
    zero = c64(0)
    a = X.add(Sym("LSE", 64, "ptr"), base(X.zext(BID, 64), X.zext(HID, 64)))
    a00 = X.add(Sym("LSE", 64, "ptr"), base(zero, zero))
    stride = X.mul(B, hs) if wrong else X.mul(H, hs)        # the SBHD bug borrows a batch stride
    expected = X.add(X.mul(X.zext(BID, 64), stride), X.mul(X.zext(HID, 64), hs))
    return X.eq(a, X.add(a00, expected))


def test_an_identity_is_proved_without_a_solver():
    q = Query(domain(), _lse_claim(), RANGES, rlimit=1)
    assert q.identity
    assert q.solve()[0] == "proved" and q.used == 0


def test_a_wrong_formula_is_no_identity():
    q = Query(domain(), _lse_claim(wrong=True), RANGES, rlimit=10 ** 7)
    assert not q.identity
    v, model, _ = q.solve()
    assert v == "refuted" and model["batch"] != model["nhead_q"]


# ----------------------------------------------------------------------------- probe

def test_vectorised_evaluation_agrees_with_the_evaluator_point_by_point():
    conds = domain(exact_layer=False)
    claim = X.eq(X.zext(X.add(batch_offset(), head_offset()), 64),
                 X.add(X.mul(X.mul(X.mul(X.zext(BID, 64), H), S), c64(256)),
                       X.mul(X.mul(X.zext(HID, 64), S), c64(256))))
    rnd = random.Random(3)
    envs = []
    for _ in range(300):
        env = {"batch": rnd.choice([1, 2, 4096, 5000]), "nhead_q": rnd.choice([1, 9, 256]),
               "seqlen_q": rnd.choice([1, 64, 986944, 1 << 20, 1 << 21])}
        env["batch_id"] = rnd.randrange(env["batch"] + 1)          # sometimes outside the grid
        env["head_id"] = rnd.randrange(env["nhead_q"] + 1)
        envs.append(env)
    b = PR._Batch(conds, claim, envs)
    fits, fails = b.fits(), b.fails()
    for i, env in enumerate(envs):
        assert fits[i] == PR._fits(conds, env)
        assert fails[i] == PR._holds(conds, claim, env)
    assert fails.any() and fits.any() and not fails.all()


def test_the_probe_returns_a_checked_counterexample_of_a_32_bit_wrap():
    conds = domain(exact_layer=False)
    claim = X.eq(X.zext(batch_offset(), 64), X.mul(X.mul(X.mul(X.zext(BID, 64), H), S), c64(256)))
    grid = {"batch": "batch_id", "head": "head_id", "tile": "tile", "lane": "lane"}
    order = ["batch", "nhead_q", "seqlen_q", "batch_id", "head_id"]
    m = PR.probe(conds, claim, RANGES, order, grid)
    assert m is not None and PR._holds(conds, claim, m)
    assert 256 * m["batch_id"] * m["nhead_q"] * m["seqlen_q"] >= 1 << 32
    assert np.uint64(0).dtype == np.uint64      # numpy present: the vectorised path ran


def test_group_mode_sequence_starts_are_probed_with_uniform_arrays():
    """Group mode: the row of a query token is seqstart_q[batch_id] + row, read from an int32
    array; its 32-bit byte offset (4*hdim_q bytes per row, hdim 64) wraps once
    seqstart_q[batch_id] >= 2**24.  The probe fills the array uniformly (entry i is
    i*seqlen_q, total_q the last entry), so the array facts hold and the point replays."""
    from types import SimpleNamespace
    from addrsim.prove.query import array_facts
    arr = Sym("seqstart_q", 48, "array")
    tq = Sym("total_q", 64, "shape")
    spec = {"first": c64(0), "last": tq, "step_max": S, "step_min": c64(1), "count": X.add(B, c64(1))}
    prob = SimpleNamespace(array_specs={"seqstart_q": spec})
    start = X.select(arr, X.mul(X.zext(BID, 64), c64(4)))
    claim = X.eq(X.zext(X.mul(start, Const(256, 32)), 64), X.mul(X.zext(start, 64), c64(256)))
    conds = domain(exact_layer=False) + [X.ule(tq, c64(1 << 30))]
    conds += array_facts(conds + [claim], prob)
    grid = {"batch": "batch_id", "head": "head_id", "tile": "tile", "lane": "lane"}
    ranges = dict(RANGES, total_q=(1, 1 << 30))
    order = ["batch", "nhead_q", "seqlen_q", "total_q", "batch_id", "head_id"]
    assert PR.probe(conds, claim, ranges, order, grid) is None          # no spec: nothing probed
    m = PR.probe(conds, claim, ranges, order, grid, arrays=prob.array_specs)
    assert m is not None and PR._holds(conds, claim, m)
    assert m["seqstart_q[]"][4 * m["batch_id"]] * 256 >= 1 << 32
    assert m["total_q"] == m["seqstart_q[]"][4 * m["batch"]]


def test_an_opaque_exec_mask_is_probed_with_every_lane_active():
    """A lane's access is guarded by its EXEC bit, which addrsim holds as an opaque 64-bit
    value after a per-lane write; the probe tries it all ones (every lane active) and finds
    the wrap (a solver model would be replayed the same way before it is reported)."""
    exec_ = Sym("opaque1", 64, "opaque")
    lane = Sym("lane", 32, "lane")
    active = X.eq(X.extract(X.lshr(exec_, X.zext(lane, 64)), 0, 0), Const(1, 1))
    conds = domain(exact_layer=False) + [active, X.ult(lane, Const(64, 32))]
    claim = X.eq(X.zext(batch_offset(), 64), X.mul(X.mul(X.mul(X.zext(BID, 64), H), S), c64(256)))
    grid = {"batch": "batch_id", "head": "head_id", "tile": "tile", "lane": "lane"}
    m = PR.probe(conds, claim, dict(RANGES, lane=(0, 63)), ["batch", "nhead_q", "seqlen_q", "batch_id"], grid)
    assert m is not None and PR._holds(conds, claim, m)
    assert (m["opaque1"] >> m["lane"]) & 1


@pytest.mark.parametrize("seed", range(12))
def test_random_offset_arithmetic_keeps_its_machine_value_under_the_facts(seed):
    """Random 32- and 64-bit sums and products of shape variables, workgroup ids, their
    quotients (a GQA-style udiv) and constants, as a kernel's scalar code builds offsets:
    at points of the domain the encoding with facts gives each its machine value."""
    rnd = random.Random(seed)
    leaves64 = [B, H, S, X.zext(BID, 64), X.zext(HID, 64), X.udiv(X.zext(HID, 64), X.udiv(H, c64(1)))]

    def gen(depth, w):
        if depth == 0 or rnd.random() < 0.3:
            if rnd.random() < 0.3:
                return Const(rnd.choice([1, 2, 4, 64, 128, 256, 49152]), w)
            e = rnd.choice(leaves64)
            return e if w == 64 else u32(e)
        op = rnd.choice([X.add, X.mul, X.mul, X.sub])
        return op(gen(depth - 1, w), gen(depth - 1, w))
    conds = domain(exact_layer=rnd.random() < 0.5)
    for _ in range(4):
        e = gen(4, rnd.choice([32, 64]))
        enc = IntEncoder(RANGES, facts_from=conds)
        for c in conds:
            enc.holds(c)
        t = enc.enc(e)
        for env in _points(conds, 6, seed=rnd.random()):
            s = z3.Solver()
            s.add(*enc.side, *[enc.vars[k] == v for k, v in env.items() if k in enc.vars])
            s.add(t != X.evaluate(e, env))
            assert s.check() == z3.unsat, (e, env)


# ---------------------------------------------------------------- 64-bit carry chains

def _pair_add(hi, lo, x, first=True):
    """s_add_u32 lo, lo, x (or x, lo) ; s_addc_u32 hi, hi, 0: the ISA rows' own semantics."""
    from addrsim.isa.alu import _s_add_u32, _s_addc_u32
    r, c = _s_add_u32(lo, x) if first else _s_add_u32(x, lo)
    h, _ = _s_addc_u32(hi, Const(0, 32), c)
    return h, r


@pytest.mark.parametrize("seed", range(6))
def test_a_folded_carry_chain_has_the_machine_value_at_every_point(seed):
    """fold_carries turns concat(hi, lo) of a chain of s_add_u32/s_addc_u32 steps into one
    64-bit sum, with the same value for every register value (both operand orders, constants
    with the sign bit set, the high and low halves of one 64-bit value)."""
    rnd = random.Random(seed)
    s8, s9 = Sym("s8", 32), Sym("s9", 32)
    xs = [Sym(f"x{i}", 32) for i in range(3)] + [Const(0xffffffc0, 32)]
    hi, lo = s9, s8
    for x in rnd.sample(xs, 3):
        hi, lo = _pair_add(hi, lo, x, rnd.random() < 0.5)
    whole = X.concat(hi, lo)
    folded = X.fold_carries(whole)
    assert not (isinstance(folded, X.Op) and folded.op == "concat" and folded.args[0] is hi)   # it folded
    for _ in range(300):
        env = {n: rnd.choice([0, 1, 0xffffffff, 0xfffffff0, rnd.getrandbits(32)]) for n in ("s8", "s9", "x0", "x1", "x2")}
        assert X.evaluate(folded, env) == X.evaluate(whole, env)
    e = X.sub(X.concat(s9, s8), Sym("D", 64))
    assert X.digest(X.fold_carries(X.concat(X.extract(e, 63, 32), X.extract(e, 31, 0)))) == X.digest(e)


def test_a_pointer_step_is_a_ring_identity_once_its_carries_are_folded():
    """The loop step of a 64-bit pointer pair (two conditional s_add_u32/s_addc_u32 steps) in
    workgroup (b, h) and in (0, 0) moved by D: equal mod 2**64, shown with no solver; a step
    that differs is not."""
    s8, s9, d = Sym("s8", 32), Sym("s9", 32), Sym("D", 64)
    x1, x2 = Sym("x1", 32), Sym("x2", 32)
    other = X.sub(X.concat(s9, s8), d)
    o9, o8 = X.extract(other, 63, 32), X.extract(other, 31, 0)

    def step(hi, lo, x2_):
        return X.concat(*_pair_add(*_pair_add(hi, lo, x1), x2_, False))

    same = X.eq(step(s9, s8, x2), X.add(step(o9, o8, x2), d))
    assert P.ring_identity(X.fold_carries(same))
    assert not P.ring_identity(same)          # the unfolded form is not shown equal by rings alone
    differs = X.eq(step(s9, s8, x2), X.add(step(o9, o8, x1), d))
    assert not P.ring_identity(X.fold_carries(differs))
    q = Query([], same, {}, 1)
    assert q.identity and q.solve()[0] == "proved" and q.used == 0


@pytest.mark.parametrize("steps", [2, 3])
def test_a_chain_of_equal_constant_steps_folds_into_one_sum(steps):
    """``s_add_u32 s8, s8, 0x1000 ; s_addc_u32 s9, s9, 0`` repeated (a V# advanced tile by
    tile): the IR merges the low word into ``x + 0x3000`` and leaves the carries as
    ``ult(x + 0x1000, 0x1000)``, ``ult(x + 0x2000, 0x1000)``; each is the carry of
    ``(S - c) + c``, so the pair folds into one 64-bit sum with the machine value at every
    point, its high word alone too (the stride field)."""
    s8, s9, off = Sym("s8", 32), Sym("s9", 32), Sym("off", 32)
    hi, lo = _pair_add(s9, s8, off)
    for _ in range(steps):
        hi, lo = _pair_add(hi, lo, Const(0x1000, 32))
    whole, high = X.concat(hi, lo), X.extract(X.concat(hi, lo), 63, 48)
    folded, folded_high = X.fold_carries(whole), X.fold_carries(X.extract(hi, 31, 16))
    for f in (folded, folded_high):
        assert not any(isinstance(n, X.Op) and n.op == "ult" for n in X.walk(f)), f
    rnd = random.Random(steps)
    for _ in range(400):
        env = {n: rnd.choice([0, 0xffffffff, 0xffffefff, 0xffffe000, rnd.getrandbits(32)]) for n in ("s8", "s9", "off")}
        assert X.evaluate(folded, env) == X.evaluate(whole, env)
        assert X.evaluate(folded_high, env) == X.evaluate(high, env)


def test_a_48_bit_base_split_into_words_is_one_sum_again():
    """``concat(extract[47:32](K + zext(off)), K[31:0] + off)``: the low word written as the
    sum of the low bits is the low word of the sum, so the pair is ``K + zext(off)``."""
    k, off = Sym("K", 48, "ptr"), Sym("off", 32)
    s = X.add(k, X.zext(off, 48))
    pair = X.concat(X.extract(s, 47, 32), X.add(off, X.extract(k, 31, 0)))
    assert X.digest(X.fold_carries(pair)) == X.digest(s)
    other = X.concat(X.extract(s, 47, 32), X.add(off, X.extract(k, 31, 1) if False else Sym("z", 32)))
    assert X.fold_carries(other).op == "concat"


# ----------------------------------------------------------------------------- normal forms

NK, HD = Sym("nhead_k", 64, "shape"), Sym("hdim_q", 64, "shape")
RATIO_RANGES = dict(RANGES, nhead_k=(1, 256), hdim_q=(8, 256), tid_x=(0, 1023))


def _gqa_domain(divides=True, hdim_multiple=8):
    conds = [X.band(X.ule(c64(1), NK), X.ule(NK, c64(256))), X.band(X.ule(c64(8), HD), X.ule(HD, c64(256))),
             X.ult(X.zext(HID, 64), H), X.ult(X.zext(BID, 64), B)]
    if divides:
        conds.append(X.eq(X.urem(H, NK), c64(0)))
    if hdim_multiple:
        conds.append(X.eq(X.urem(HD, c64(hdim_multiple)), c64(0)))
    return conds


def _dk_sbhd_slice_claim(hdim_intended=HD):
    """The dK slice base of a GQA kernel in SBHD (gfx942 bwd_hd128_bf16_a16_rtna_pddv,
    dK/dV sized by nhead_q): the kernel adds ``BAs_kv*batch_id*ratio + Hs_kv*head_id`` (bytes;
    BAs_kv = 2*nhead_k*hdim_q, Hs_kv = 2*hdim_q, ratio = nhead_q / nhead_k) to a lane's row
    offset W and keeps the dword index ``floor(sum / 4)``; its base at (0, 0) reads
    ``floor(W / 4)`` (the claim: base(b, h) == base(0, 0) + intended).  Intended: ``2*batch_id*nhead_q*hdim_q + 2*head_id*hdim_q`` bytes.  Read
    exactly (no 32-bit wrap), which the wrap cover's E' does."""
    tid = Sym("tid_x", 32)
    u = u32
    w = X.mul(X.lshr(X.and_(tid, Const(0x3c0, 32)), Const(6, 32)), X.mul(X.mul(u(B), u(H)), u(HD)))
    ratio = u(X.udiv(H, NK))
    bh = X.add(X.mul(X.mul(BID, X.mul(X.mul(u(NK), u(HD)), Const(2, 32))), ratio),
               X.mul(HID, X.mul(u(HD), Const(2, 32))))
    dword = lambda e: X.mul(X.zext(X.lshr(e, Const(2, 32)), 64), c64(4))   # noqa: E731
    hd = hdim_intended
    want = X.add(X.mul(X.mul(X.zext(BID, 64), X.mul(H, hd)), c64(2)), X.mul(X.mul(X.zext(HID, 64), hd), c64(2)))
    return X.eq(dword(X.add(w, bh)), X.add(dword(w), want)), w, bh


@pytest.mark.parametrize("divides,multiple,shown", [(True, 8, True), (False, 8, False), (True, 1, False)])
def test_the_gqa_slice_base_is_an_identity_of_normal_forms(divides, multiple, shown):
    """With ``nhead_q mod nhead_k == 0`` and ``hdim_q mod 8 == 0`` the two sides have one normal
    form (nhead_q = nhead_k * ratio; the batch and head terms are multiples of 4, so they
    leave the floor): shown with no solver once the 32-bit sums are taken exact.  Without the
    divisibility fact, or with an odd-granular hdim_q, it is not shown (nor true)."""
    claim, w, bh = _dk_sbhd_slice_claim()
    conds = _gqa_domain(divides, multiple if multiple > 1 else None)
    exact = {id(n) for n in X.walk(claim) if isinstance(n, X.Op) and n.width == 32}
    enc = IntEncoder(RATIO_RANGES, nowrap=frozenset(exact), facts_from=conds)
    assert enc.implied(claim, certificates=False) is shown


def _eval_poly(p, env):
    total = 0
    for m, c in p.items():
        v = c
        for k, e in m:
            v *= env[k] ** e
        total += v
    return total


@pytest.mark.parametrize("seed", range(20))
def test_a_normal_form_has_the_value_of_the_polynomial_at_every_point(seed):
    """:func:`addrsim.ir.poly.normal` at random points of random polynomials over a quotient
    ``q = c / d`` with ``c mod d == 0``, an atom that is a multiple of 8 and floor atoms of
    random dividends, and two atoms known equal: the same value as the polynomial itself."""
    rnd = random.Random(seed)
    F = P.Facts()
    F.divides.add(("c", "d"))
    F.interval.update({"d": (1, 9), "c": (0, 10 ** 6), "h": (0, 10 ** 4), "x": (0, 10 ** 4)})
    F.multiple_of("h", 8)
    F.equate("h", "e")
    quotients = {("c", "d"): "q"}
    atoms = ["c", "d", "q", "h", "x", "e"]

    def rand_poly(keys, lo=-40):
        return {tuple(sorted({k: 1 for k in rnd.sample(keys, rnd.randint(0, 2))}.items(),
                             key=repr)): rnd.randint(lo, 40) for _ in range(rnd.randint(1, 4))}

    floors = {}      # a dividend is a node's value: never negative
    for i in range(3):
        floors[f"f{i}"] = (rand_poly(atoms + [f"f{j}" for j in range(i)], 0), rnd.choice([2, 4, 64, 3]))
    p = rand_poly(atoms + list(floors))
    for _ in range(30):
        d, q, h8 = rnd.randint(1, 9), rnd.randint(0, 50), rnd.randint(0, 30)
        env = {"d": d, "q": q, "c": d * q, "h": 8 * h8, "e": 8 * h8, "x": rnd.randint(0, 10 ** 4)}
        for k, (x, dv) in floors.items():
            env[k] = _eval_poly(x, env) // dv
        n = P.normal(p, F, floors, quotients)
        assert n is not None
        assert _eval_poly(n, _NormalEnv(env)) == _eval_poly(p, env)


class _NormalEnv(dict):
    """Values of a normal form's atoms: ("div", a, g) is a / g, ("floor", A, d) is
    floor(A / d), evaluated on demand (A may hold floors itself)."""

    def __missing__(self, k):
        if k[0] == "div":
            return self[k[1]] // k[2]
        return _eval_poly(dict(k[1]), self) // k[2]


@pytest.mark.parametrize("equal", [True, False])
def test_the_dv_slice_base_reads_hdim_q_where_the_contract_says_hdim_v(equal):
    """dV's intended strides are in hdim_v, the kernel's in hdim_q: one normal form when the
    domain says ``hdim_q == hdim_v`` (the family's trait), none without it."""
    hv = Sym("hdim_v", 64, "shape")
    claim, _, _ = _dk_sbhd_slice_claim(hv)
    conds = _gqa_domain() + ([X.eq(HD, hv)] if equal else [])
    exact = {id(n) for n in X.walk(claim) if isinstance(n, X.Op) and n.width == 32}
    enc = IntEncoder(dict(RATIO_RANGES, hdim_v=(8, 256)), nowrap=frozenset(exact), facts_from=conds)
    assert enc.implied(claim, certificates=False) is equal


# ---------------------------------------------------------------- bit masks (issue 39, 2026-12-05)
# A lane's row and column come from masks of the work-item id (``tid_x & 0x3c0`` is the wave
# times 64, ``(tid_x & 63) >> 4 & 2`` a bit of the lane).  Encoded as fresh integers they made the
# encoding inexact, and the integer stage's models of the README kernel's K/dK bounds claims broke
# nothing when evaluated.  A contiguous mask m = bits j..k-1 is exact: x & m = x mod 2**k - x mod 2**j.

TID = Sym("tid_x", 32, "lane")


@pytest.mark.parametrize("mask", [0x3c0, 0x2, 0x30, 0xff00, 0x3f, 0x80000000, 0x7ffffff8, 0xfffffff0, 0x5, 0x3c3])
def test_an_and_with_a_constant_mask_has_the_machine_value_at_every_point(mask):
    e = X.and_(TID, Const(mask, 32))
    enc = IntEncoder({"tid_x": (0, 1023)})
    t = enc.enc(e)
    bits = mask >> ((mask & -mask).bit_length() - 1)
    contiguous = bits & (bits + 1) == 0
    assert (enc.abstracted == []) == contiguous          # 0x5 and 0x3c3 have holes: still abstracted
    if not contiguous:
        return
    s = z3.Solver()
    s.add(*enc.side)
    v = enc.vars["tid_x"]
    for x in list(range(0, 1024, 37)) + [0, 63, 64, 1023]:
        s.push()
        s.add(v == x, t != X.evaluate(e, {"tid_x": x}))
        assert s.check() == z3.unsat, (hex(mask), x)
        s.pop()


def _wave_row(shift_ok=True):
    """The wave's first row, (tid_x & 0x3c0) against 64 * (tid_x / 64) (or, wrong, 32 * ...)."""
    w = X.and_(TID, Const(0x3c0, 32))
    k = 64 if shift_ok else 32
    return X.eq(w, X.mul(X.udiv(TID, Const(64, 32)), Const(k, 32)))


def test_a_wave_row_from_a_mask_is_proved_by_the_integer_stage():
    q = Query([X.ult(TID, Const(1024, 32))], _wave_row(), {"tid_x": (0, 1023)}, rlimit=10 ** 7)
    assert q.enc.abstracted == []
    assert q.solve()[0] == "proved"


def test_a_wrong_wave_row_is_refuted_with_a_model_that_breaks_it():
    conds = [X.ult(TID, Const(1024, 32))]
    q = Query(conds, _wave_row(shift_ok=False), {"tid_x": (0, 1023)}, rlimit=10 ** 7)
    v, model, _ = q.solve()
    assert v == "refuted" and model["tid_x"] >= 64
    assert X.evaluate(_wave_row(shift_ok=False), {"tid_x": model["tid_x"]}) == 0


def test_the_relaxed_masks_give_a_model_that_breaks_a_wrong_wave_row():
    """Where the exact integer stage is undecided, the masks relaxed to fresh integers are
    asked once more: a model is believed only when it breaks the claim by evaluation."""
    conds = [X.ult(TID, Const(1024, 32))]
    q = Query(conds, _wave_row(shift_ok=False), {"tid_x": (0, 1023)}, rlimit=10 ** 7)
    assert q.enc.exact_masks == 1
    r, model = q._relaxed({}, 10 ** 6)
    assert r == z3.sat and model is not None
    assert X.evaluate(_wave_row(shift_ok=False), {"tid_x": model["tid_x"]}) == 0
    assert q._relaxed({}, 10 ** 6) == (z3.unknown, None)          # once per query


def test_a_relaxed_model_of_a_right_wave_row_is_not_believed():
    q = Query([X.ult(TID, Const(1024, 32))], _wave_row(), {"tid_x": (0, 1023)}, rlimit=10 ** 7)
    r, model = q._relaxed({}, 10 ** 6)
    assert r == z3.sat and model is None            # a fresh integer may take any value: no counterexample


def test_nothing_is_relaxed_without_an_exact_mask():
    claim = X.eq(X.add(TID, Const(1, 32)), X.add(Const(1, 32), TID))
    q = Query([X.ult(TID, Const(1024, 32))], claim, {"tid_x": (0, 1023)}, rlimit=10 ** 7)
    assert q._relaxed({}, 10 ** 6) == (z3.unknown, None)


# ----------------------------------------------------------------------------- the quick try (routed reruns)

def test_the_quick_try_proves_a_right_claim_and_refutes_a_wrong_one():
    """The exact integer encoding asked once on a fresh solver (query._quick, before the
    certificates in a routed rerun): unsat is a proof; a model is a counterexample only when
    it breaks the claim by evaluation."""
    from addrsim.prove.query import _quick
    conds = [X.ult(TID, Const(1024, 32))]
    assert _quick(Query(conds, _wave_row(), {"tid_x": (0, 1023)}, rlimit=10 ** 7)) == "proved"
    got = _quick(Query(conds, _wave_row(shift_ok=False), {"tid_x": (0, 1023)}, rlimit=10 ** 7))
    assert isinstance(got, dict) and X.evaluate(_wave_row(shift_ok=False), {"tid_x": got["tid_x"]}) == 0


def test_a_32_bit_wrap_is_no_quick_proof():
    """256*head_id*seqlen_q in 32 bits against the same product in 64: wraps where the
    domain lets the product pass 2**32 (no exact-argument layer); the quick try must not
    call it proved."""
    from addrsim.prove.query import _quick
    prod = X.mul(X.mul(HID, u32(S)), Const(256, 32))
    claim = X.eq(X.zext(prod, 64), X.mul(X.mul(X.zext(HID, 64), S), c64(256)))
    conds = [X.ult(HID, u32(H)), X.ule(S, c64(1 << 20)), X.ule(H, c64(256))]
    got = _quick(Query(conds, claim, RANGES, rlimit=10 ** 7))
    assert got != "proved"
    if got is not None:
        env = dict(got)
        assert X.evaluate(claim, env) == 0


def test_array_facts_built_once_per_check_are_those_built_afresh():
    """The facts of the sequence-start arrays (order and step of every pair of reads, first and
    last entries) are the same, in the same order, whether each query builds them afresh or
    takes the pairs a memo shared by the check's queries holds; a query with another read
    adds that read's pairs only."""
    from types import SimpleNamespace
    from addrsim.prove.query import array_facts
    arr = Sym("seqstart_q", 48, "array")
    tq = Sym("total_q", 64, "shape")
    spec = {"first": c64(0), "last": tq, "step_max": S, "step_min": c64(1), "count": X.add(B, c64(1))}
    prob = SimpleNamespace(array_specs={"seqstart_q": spec})
    row = lambda k: X.select(arr, X.mul(X.add(X.zext(BID, 64), c64(k)), c64(4)))     # noqa: E731
    queries = [[X.ule(row(0), row(1))], [X.ule(row(1), row(0)), X.ule(row(0), Const(7, 32))],
               [X.ule(row(0), row(2)), X.ult(row(1), row(2))]]
    memo: dict = {}
    digests = lambda fs: [X.digest(f) for f in fs]       # noqa: E731
    for q in queries:
        assert digests(array_facts(q, prob, memo)) == digests(array_facts(q, prob))
    assert len(array_facts(queries[2], prob)) > len(array_facts(queries[0], prob))


def test_sequence_start_facts_hold_for_the_arrays_the_spec_allows_and_wrap_nothing():
    """The facts of a sequence-start array read at batch_id, batch_id + 1, 0 and batch (the
    reads of a group kernel): every array the model allows (non-decreasing, neighbours
    1 to seqlen_q apart) satisfies them, an array with one step past seqlen_q does not, and
    their integer encoding has no node that may wrap (each step is a sum of a 32-bit entry
    and a shape size, not a difference that wraps when read the other way round: those were
    56 satisfiable no-wrap obligations of every group-mode query)."""
    from types import SimpleNamespace
    from addrsim.backends.z3_int import IntEncoder
    from addrsim.prove.query import array_facts
    arr = Sym("seqstart_q", 48, "array")
    tq = Sym("total_q", 64, "shape")
    spec = {"first": c64(0), "last": tq, "step_max": S, "step_min": c64(1), "count": X.add(B, c64(1))}
    prob = SimpleNamespace(array_specs={"seqstart_q": spec})
    at = lambda off: X.zext(X.select(arr, off), 64)                                   # noqa: E731
    bid4 = X.mul(X.zext(BID, 64), c64(4))
    reads = [X.ule(at(bid4), at(X.add(bid4, c64(4)))), X.ule(at(c64(0)), at(X.mul(B, c64(4))))]
    facts = array_facts(reads, prob)
    rnd = random.Random(7)
    for _ in range(100):
        b, s = rnd.randint(1, 6), rnd.randint(1, 1000)
        starts = [0]
        for _ in range(b):
            starts.append(starts[-1] + rnd.randint(1, s))
        env = {"batch": b, "seqlen_q": s, "total_q": starts[-1], "batch_id": rnd.randrange(b),
               "seqstart_q": 0, "seqstart_q[]": {4 * i: v for i, v in enumerate(starts)}}
        assert all(X.evaluate(f, env) == 1 for f in facts)
        i = rnd.randrange(b)
        env["seqstart_q[]"] = {4 * j: v + (s if j > i else 0) for j, v in enumerate(starts)}
        env["total_q"] = env["seqstart_q[]"][4 * b]
        env["batch_id"] = i
        assert not all(X.evaluate(f, env) == 1 for f in facts)      # entry i+1 is more than seqlen_q past i
    enc = IntEncoder(dict(RANGES, total_q=(1, 1 << 30)))
    for f in facts:
        enc.holds(f)
    assert not [n for n, _, _ in enc.wrapped if n.width == 64]


@pytest.mark.parametrize("batch_hi,wraps", [(1, False), (3, True)])
def test_a_batch_of_one_leaves_the_batch_offset_no_room_to_wrap(batch_hi, wraps):
    """``batch_id*(nhead_q*seqlen_q*256)*ratio`` in 32 bits, with ``batch_id < batch``, the exact
    layer's ``nhead_q*seqlen_q*256 < 2**32`` and a GQA ratio up to 256 (gfx942
    bwd_hd128_bf16_a16_rtna_pddv dK BSHD): in a box of batch 1, what minimisation asks, the
    facts' bound propagation makes batch_id 0 before any node is encoded, so the product is
    exact (no ``mod``) and the box needs no solver call; dominance alone bounds it by
    batch*(2**32 - 1)*256.  At batch 3 it really wraps."""
    ratio = Sym("ratio", 32, "shape")
    conds = [X.ult(X.zext(BID, 64), B), X.ult(X.mul(X.mul(H, S), c64(256)), c64(1 << 32))]
    e = X.mul(X.mul(BID, X.mul(X.mul(u32(H), u32(S)), Const(256, 32))), ratio)
    enc = IntEncoder(dict(RANGES, batch=(1, batch_hi), ratio=(1, 256)), facts_from=conds)
    for c in conds:
        enc.holds(c)
    enc.enc(e)
    assert (id(e) in enc.exact) is not wraps
    assert any(n is e for n, _, _ in enc.wrapped) is wraps


def test_an_xor_of_lane_bits_stays_below_their_width_and_its_shift_does_not_wrap():
    """((tid & 3) >> 1) ^ ((tid & 63) >> 5), shifted left by 1 (a swizzled column of the
    gfx950 kernels' LDS reads): below 2, so the shift has no mod; the xor is a fresh integer
    (an over-approximation) that admits the machine value at every lane.  An xor of
    full-width values keeps its full range."""
    tid = Sym("tid_x", 32, "lane")
    sw = X.xor(X.lshr(X.band(tid, Const(3, 32)), Const(1, 32)), X.lshr(X.band(tid, Const(63, 32)), Const(5, 32)))
    e = X.add(X.shl(sw, Const(1, 32)), X.band(tid, Const(1, 32)))
    enc = IntEncoder({"tid_x": (0, 1023)})
    t = enc.enc(e)
    assert enc.interval(sw) == (0, 1) and not enc.wrapped
    for lane in range(0, 1024, 7):
        s = z3.Solver()
        s.add(*enc.side, enc.vars["tid_x"] == lane, t == X.evaluate(e, {"tid_x": lane}))
        assert s.check() == z3.sat, lane
    full = IntEncoder({})
    full.enc(X.xor(Sym("a", 32), Sym("b", 32)))
    assert full.interval(X.xor(Sym("a", 32), Sym("b", 32)))[1] == 0xFFFFFFFF
