"""Bounds claims decided by certificates, without a nonlinear solver
(addrsim.backends.positivity, the facts of addrsim.backends.z3_int.IntEncoder).

Specification: the dK store of a tile-major backward kernel writes at
``(256*seqlen_k*(batch_id*nhead_q + head_id) + 49152*kv_tile + lane offset) mod 2**32``
bytes and stays inside dK's ``256*batch*nhead_q*seqlen_k`` bytes: the kv tile is below the
launch's ``(seqlen_k + 191) / 192`` tiles and ``seqlen_k`` is a multiple of 64, so the last tile
ends 64 rows (16 KiB) before the head's slice does, more than the lane offset's 13 KiB.  That
is shown by products of the facts with integer tightening; without ``seqlen_k mod 64 == 0``
it is not shown, and it is false (seqlen_k 193).  Whatever is shown holds at every point of
a small domain (exhaustive check of random claims).
"""
import itertools
import math
import random

import pytest

from addrsim.backends.positivity import certify
from addrsim.backends.z3_int import IntEncoder
from addrsim.ir import expr as X
from addrsim.ir import poly as P
from addrsim.ir.expr import Const, Sym

B, N, L = (Sym(n, 64, "shape") for n in ("batch", "nhead_q", "seqlen_k"))
BID, HID, KT, TID = (Sym(n, 32, k) for n, k in (("batch_id", "id"), ("head_id", "id"), ("kv_tile", "id"),
                                                 ("tid_x", "lane")))
RANGES = {"batch": (1, 4096), "nhead_q": (1, 256), "seqlen_k": (1, 1 << 20), "batch_id": (0, 4095),
          "head_id": (0, 255), "kv_tile": (0, 1 << 20), "tid_x": (0, 1023)}


def c64(v):
    return Const(v, 64)


def c32(v):
    return Const(v, 32)


def dk_domain(multiple_of_64=True):
    """Shape bounds, the grid (ids below their dimensions, the kv tile below the launch's
    tiles, 256 threads), device memory (dK: 256*batch*nhead_q*seqlen_k bytes in 192 GiB) and
    the exact-argument layer (the head stride 256*nhead_q*seqlen_k fits a u32)."""
    conds = [X.band(X.ule(c64(RANGES[v.name][0]), v), X.ule(v, c64(RANGES[v.name][1]))) for v in (B, N, L)]
    conds += [X.ult(X.zext(BID, 64), B), X.ult(X.zext(HID, 64), N), X.ult(TID, c32(256)),
              X.ult(X.zext(KT, 64), X.udiv(X.sub(X.add(L, c64(192)), c64(1)), c64(192))),
              X.ule(X.mul(X.mul(X.mul(B, N), L), c64(256)), c64(192 << 30)),
              X.ule(X.mul(X.mul(N, L), c64(256)), c64(0xFFFFFFFF))]
    if multiple_of_64:
        conds.append(X.eq(X.urem(L, c64(64)), c64(0)))
    return conds


def dk_offset():
    """The store's byte offset as the kernel computes it: 32-bit scalar products (the batch
    term wraps past 4 GiB) plus the lane's offset (row block and column of the thread)."""
    l32, n32 = X.extract(L, 31, 0), X.extract(N, 31, 0)
    rows = X.add(X.add(X.mul(KT, c32(49152)), X.mul(HID, X.mul(l32, c32(256)))),
                 X.mul(BID, X.mul(X.mul(n32, l32), c32(256))))
    lane = X.add(X.mul(X.lshr(X.and_(TID, c32(0x3C0)), c32(6)), c32(4096)),
                 X.shl(X.and_(TID, c32(0xF)), c32(4)))
    return X.add(rows, lane)


def dk_claim():
    """16 bytes at the offset lie inside dK (bytes, 64-bit)."""
    return X.ule(X.add(X.zext(dk_offset(), 64), c64(16)), X.mul(X.mul(X.mul(B, N), L), c64(256)))


def shown(conds, claim, ranges=RANGES):
    enc = IntEncoder(ranges, facts_from=conds)
    for c in conds:
        enc.holds(c)
    return enc.implied(claim)


def test_the_dk_store_stays_inside_its_allocation_by_a_certificate():
    assert shown(dk_domain(), dk_claim())


def test_without_whole_64_row_blocks_it_is_not_shown_and_it_is_false():
    assert not shown(dk_domain(multiple_of_64=False), dk_claim())
    # seqlen_k 193: two tiles, the second starts at row 192 and lane 255's row block 3 ends past row 193
    env = {"batch": 1, "nhead_q": 1, "seqlen_k": 193, "batch_id": 0, "head_id": 0, "kv_tile": 1, "tid_x": 255}
    assert all(X.evaluate(c, env) == 1 for c in dk_domain(multiple_of_64=False))
    assert X.evaluate(dk_claim(), env) == 0


def test_the_negation_of_a_false_bound_is_shown():
    """``not (offset + 16 <= extent)`` is never shown when the offset fits: the negated
    comparison is decided like the comparison (xor with 1)."""
    conds = dk_domain()
    assert not shown(conds, X.bnot(dk_claim()))
    assert shown(conds, X.bnot(X.ult(X.mul(X.mul(X.mul(B, N), L), c64(256)), c64(256))))


def test_the_tightening_uses_the_granularity_of_every_atom():
    """``seqlen_k + 191 - 192*U >= 0`` with ``seqlen_k mod 64 == 0``: the constant drops to
    the largest value congruent to it mod 64 that the other terms allow (128)."""
    F = P.Facts()
    F.multiple_of("seqlen_k", 64)
    p = {(("seqlen_k", 1),): 1, (("U", 1),): -192, (): 191}
    assert F.tighten(p)[()] == 128
    F2 = P.Facts()
    assert F2.tighten(p) == p


def test_a_certificate_is_checked_in_exact_arithmetic():
    """``x - y >= 0`` does not follow from ``x + y >= 0``; no product makes it so."""
    F = P.Facts()
    F.interval.update({"x": (0, 10), "y": (0, 10)})
    F.assume_nonneg({(("x", 1),): 1, (("y", 1),): 1})
    assert certify(F, {(("x", 1),): 1, (("y", 1),): -1}, 0) == (False, 0) or not certify(
        F, {(("x", 1),): 1, (("y", 1),): -1}, 0)[0]
    F.assume_nonneg({(("x", 1),): 1, (("y", 1),): -1, (): -2})     # x >= y + 2
    assert certify(F, {(("x", 1),): 1, (("y", 1),): -1}, 2)[0]
    assert not certify(F, {(("x", 1),): 1, (("y", 1),): -1}, 3)[0]


# ---------------------------------------------------------------- soundness on a small domain

SMALL = {"x": (0, 7), "y": (1, 7), "z": (0, 5)}
XS = [Sym(n, 8, "shape") for n in SMALL]


def _random_expr(rnd, depth):
    if depth == 0 or rnd.random() < 0.25:
        return rnd.choice(XS) if rnd.random() < 0.75 else Const(rnd.choice([1, 2, 3, 4, 8, 16, 64]), 8)
    a, b = _random_expr(rnd, depth - 1), _random_expr(rnd, depth - 1)
    k = rnd.random()
    if k < 0.3:
        return X.add(a, b)
    if k < 0.5:
        return X.mul(a, b)
    if k < 0.6:
        return X.sub(a, b)
    if k < 0.7:
        return X.lshr(a, Const(rnd.choice([1, 2, 3]), 8))
    if k < 0.8:
        return X.udiv(a, rnd.choice([Const(rnd.choice([3, 4, 6]), 8), XS[1]]))
    if k < 0.85:
        return X.urem(a, rnd.choice([Const(4, 8), XS[1]]))
    if k < 0.9:
        return X.and_(a, Const(rnd.choice([0x3C, 0xF, 0x30]), 8))
    # a minimum or a maximum, signed or unsigned (the kernels' min(rows left, 3))
    c = rnd.choice([X.ult, X.ule, X.slt, X.sle])(a, b)
    return X.ite(c, a, b) if rnd.random() < 0.5 else X.ite(c, b, a)


def _random_cond(rnd, depth):
    a, b = _random_expr(rnd, depth), _random_expr(rnd, depth)
    c = rnd.choice([X.ule, X.ult, X.ule, X.slt, X.sle])(a, b)
    return X.bnot(c) if rnd.random() < 0.2 else c


@pytest.mark.parametrize("seed", range(16))
def test_whatever_is_shown_holds_at_every_point(seed):
    """Random conditions and claims over 8-bit arithmetic (wraps, shifts, quotients,
    remainders, masks, minima and maxima, signed and unsigned comparisons) on x, y, z in small ranges: every claim the facts and certificates show
    holds at every point of the domain (exhaustive)."""
    rnd = random.Random(seed)
    points = [dict(zip(SMALL, v)) for v in itertools.product(*(range(lo, hi + 1) for lo, hi in SMALL.values()))]
    shown_n = 0
    for _ in range(12):
        conds = [_random_cond(rnd, 2) for _ in range(rnd.randint(1, 3))]
        if rnd.random() < 0.5:
            conds.append(X.eq(X.urem(XS[0], Const(2, 8)), Const(0, 8)))
        inside = [p for p in points if all(X.evaluate(c, p) == 1 for c in conds)]
        for _ in range(6):
            claim = _random_cond(rnd, 3)
            if shown(conds, claim, SMALL):
                shown_n += 1
                bad = [p for p in inside if X.evaluate(claim, p) != 1]
                assert not bad, (claim, conds, bad[:3])
    assert shown_n >= 1


def test_a_bound_on_the_rows_left_in_a_tile_bounds_both_arms_of_the_minimum():
    """The kernels guard their second 64-row block with ``min(rows_left, 3) > 1`` (signed:
    ``s_min_i32``, then ``s_cmp_gt_i32``): that says ``rows_left >= 2``.  A maximum says nothing
    of the kind, and the same claim is then false (x = y = 0)."""
    x, y, _ = XS
    left = X.sub(x, y)                                  # may be negative: signed
    three = Const(3, 8)
    smallest = X.ite(X.slt(left, three), left, three)
    largest = X.ite(X.slt(left, three), three, left)
    claim = X.ule(X.add(y, Const(2, 8)), x)
    assert shown([X.bnot(X.sle(smallest, Const(1, 8)))], claim, SMALL)
    guard = X.bnot(X.sle(largest, Const(1, 8)))
    assert not shown([guard], claim, SMALL)
    env = {"x": 0, "y": 1, "z": 0}
    assert X.evaluate(guard, env) == 1 and X.evaluate(claim, env) == 0


def test_the_kv_head_of_a_query_head_is_below_nhead_k_under_an_integer_gqa_ratio():
    """K and V rows are read at ``kv_head = head_id / (nhead_q / nhead_k)``, computed behind
    the kernel's divide-by-zero guard (an ``ite`` whose condition the ratio's interval
    decides: the ratio is at least 1).  With ``nhead_q mod nhead_k == 0`` the KV head is below
    nhead_k, so ``256*seqlen_k*(kv_head + 1) <= 256*nhead_k*seqlen_k``; without it the claim is
    not shown, and it is false (nhead_q 3, nhead_k 2: ratio 1, head 2 reads KV head 2)."""
    NK = Sym("nhead_k", 64, "shape")
    ranges = dict(RANGES, nhead_k=(1, 256))
    ratio = X.udiv(N, NK)
    r32 = X.extract(ratio, 31, 0)
    kv_head = X.ite(X.eq(r32, c32(0)), Sym("guarded", 32, "opaque"), X.udiv(HID, r32))
    row = X.mul(X.zext(X.add(kv_head, c32(1)), 64), X.mul(L, c64(256)))
    claim = X.ule(row, X.mul(X.mul(NK, L), c64(256)))
    base = [X.band(X.ule(c64(1), v), X.ule(v, c64(hi))) for v, hi in ((N, 256), (NK, 256), (L, 1 << 20))]
    base += [X.ult(X.zext(HID, 64), N), X.ule(NK, N)]
    gqa = X.eq(X.urem(N, NK), c64(0))
    assert shown(base + [gqa], claim, ranges)
    assert not shown(base, claim, ranges)
    env = {"nhead_q": 3, "nhead_k": 2, "seqlen_k": 64, "head_id": 2, "guarded": 0}
    assert all(X.evaluate(c, env) == 1 for c in base) and X.evaluate(claim, env) == 0


def _soffset_case(guard_rows: int):
    """A 64-row tile ``t`` of a head of ``seqlen_k`` rows (256 bytes each) reads its second
    row block at ``16384*t + (rows_left > guard_rows ? 16384 : 0)``, ``rows_left`` the 64-row
    blocks left from the tile (signed 32-bit, as ``s_sub_i32`` computes it)."""
    t = KT
    blocks = X.lshr(X.extract(L, 31, 0), c32(6))
    rows_left = X.sub(blocks, t)
    soff = X.ite(X.slt(c32(guard_rows), rows_left), c32(16384), c32(0))
    offset = X.add(X.mul(t, c32(16384)), soff)
    claim = X.ule(X.add(X.zext(offset, 64), c64(16)), X.mul(L, c64(256)))
    conds = [X.band(X.ule(c64(64), L), X.ule(L, c64(1 << 20))), X.eq(X.urem(L, c64(64)), c64(0)),
             X.ult(X.zext(t, 64), X.udiv(L, c64(64)))]
    return conds, claim


def test_a_guarded_soffset_is_bounded_in_each_case_of_its_guard(monkeypatch):
    """Only in the case ``rows_left > 1`` is the second block read, and then the tile is at
    least two blocks from the end: the certificate splits the ``ite`` into its cases (one
    certificate cannot: the offset's interval reaches past the last tile).  With the guard
    ``rows_left > 0`` the last tile reads past the head, and nothing is shown."""
    import addrsim.backends.z3_int as Z
    conds, claim = _soffset_case(1)
    assert shown(conds, claim)
    monkeypatch.setattr(Z, "MAX_SPLITS", 0)
    assert not shown(conds, claim)
    monkeypatch.undo()
    conds, claim = _soffset_case(0)
    assert not shown(conds, claim)
    env = {"seqlen_k": 128, "kv_tile": 1}
    assert all(X.evaluate(c, env) == 1 for c in conds) and X.evaluate(claim, env) == 0


# ---------------------------------------------------------------- the divisor products

def _last_tile_facts():
    """K in BSHD, the last 192-row tile of a sequence holding 128 rows (``seqlen_q/64 - 3*kv_tile
    >= 2`` learnt from the kernel's rows-left guard): ``batch_id < batch``, ``seqlen_k ==
    seqlen_q``, ``64*U <= seqlen_q`` (U = floor(seqlen_q/64)), the KV head below nhead_k, a
    0/1 lane bit; the intervals as the README kernel's domain gives them."""
    F = P.Facts()
    F.interval.update({"batch": (1, 4096), "batch_id": (0, 4095), "nhead_k": (1, 256), "seqlen_k": (128, 1048448),
                       "seqlen_q": (128, 1048448), "U": (2, 16382), "kv_tile": (0, 5460), "kv_head": (0, 255),
                       "bit": (0, 1)})
    a = lambda k: {((k, 1),): 1}       # noqa: E731
    for p in ({(("batch", 1),): 1, (("batch_id", 1),): -1, (): -1},
              P.add(a("seqlen_k"), a("seqlen_q"), -1), P.add(a("seqlen_q"), a("seqlen_k"), -1),
              {(("seqlen_q", 1),): 1, (("U", 1),): -64},
              {(("U", 1),): 1, (("kv_tile", 1),): -3, (): -2},
              {(("nhead_k", 1),): 1, (("kv_head", 1),): -1, (): -1}):
        F.assume_nonneg(p)
    return F


def _last_tile_room(slack: int):
    """The bytes left after the last row a lane reads (row 126 + the bit's row; 256 bytes a
    row of one head, nhead_k heads a row): zero at ``slack`` 0, so every fact is needed whole."""
    bnl = (("batch", 1), ("nhead_k", 1), ("seqlen_k", 1))
    inl = (("batch_id", 1), ("nhead_k", 1), ("seqlen_k", 1))
    return {bnl: 256, inl: -256, (("kv_tile", 1), ("nhead_k", 1)): -49152, (("nhead_k", 1),): -32256,
            (("bit", 1), ("nhead_k", 1)): -256, (("kv_head", 1),): -256, (): -256 - slack}


def test_the_divisor_products_show_a_last_tile_with_no_bytes_to_spare(monkeypatch):
    """The README kernel's last K BSHD bounds query: the greedy products (cheapest first, at
    most MAX_PRODUCTS) ran out before the chain nhead_k*(seqlen_k - seqlen_q),
    nhead_k*(seqlen_q - 64*U), nhead_k*(U - 3*kv_tile - 2) among its 19 facts; every fact times
    every divisor of the claim's monomials has it.  Here (6 facts) the greedy search needs 40
    products: cut at 30, only the divisor products show it."""
    from addrsim.backends import positivity as pos
    F = _last_tile_facts()
    d = _last_tile_room(0)
    assert certify(F, d, 0)[0]
    monkeypatch.setattr(pos, "MAX_PRODUCTS", 30)
    assert not pos._shown(F, d, 0, pos.products(F, d), 2000)[0]
    assert pos._shown(F, d, 0, pos.divisor_products(F, d), 2000)[0]
    assert certify(F, d, 0)[0]


def test_one_byte_more_is_not_shown_and_it_is_false():
    F = _last_tile_facts()
    d = _last_tile_room(1)
    assert not certify(F, d, 0)[0]
    env = {"batch": 1, "batch_id": 0, "nhead_k": 1, "seqlen_k": 128, "seqlen_q": 128, "U": 2, "kv_tile": 0,
           "kv_head": 0, "bit": 1}
    assert all(sum(c * math.prod(env[k] ** e for k, e in m) for m, c in g.items()) >= 0 for g in F.nonneg)
    assert sum(c * math.prod(env[k] ** e for k, e in m) for m, c in d.items()) == -1


def test_a_certificate_charges_its_simplex_iterations():
    """Units are the solver's deterministic work (ITER_RU an iteration), never seconds: the
    same call charges the same units, and a limit below one iteration's worth shows nothing."""
    from addrsim.backends import positivity as pos
    F = _last_tile_facts()
    d = _last_tile_room(0)
    ok, used = certify(F, d, 0)
    assert ok and used > 0 and used % pos.ITER_RU == 0 and certify(F, d, 0) == (ok, used)
    assert not certify(F, d, 0, rlimit=pos.ITER_RU - 1)[0]
