"""Counterexample minimisation (addrsim.prove.query.minimize): on synthetic 32-bit wraps whose
lexicographically least failing shape is known in closed form, the candidate-then-proof
search returns exactly that shape and says it is minimal; with no budget it still returns a
counterexample and says it is not proven minimal.  Each returned model is checked by
evaluation."""
from types import SimpleNamespace

import pytest

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Sym
from addrsim.prove.query import Query, minimize, violates

B, H, S = Sym("batch", 64, "shape"), Sym("nhead_q", 64, "shape"), Sym("seqlen_q", 64, "shape")
BID, HID, TILE = Sym("batch_id", 32, "id"), Sym("head_id", 32, "id"), Sym("tile", 32, "id")
PROB = SimpleNamespace(grid={"z": BID, "y": HID, "x": TILE})


def _u32_wrap(c: int, *vs):
    """claim: the 32-bit product c*v1*...*vk (as a kernel's s_mul_i32 chain computes it)
    equals the exact 64-bit one; it fails exactly when c*v1*...*vk >= 2**32."""
    exact = Const(c, 64)
    for v in vs:
        exact = X.mul(exact, v)
    wrapped = Const(c, 32)
    for v in vs:
        wrapped = X.mul(wrapped, X.extract(v, 31, 0))
    return X.eq(X.zext(wrapped, 64), exact)


def _ranges(hi_s):
    return {"batch": (1, 64), "nhead_q": (1, 128), "seqlen_q": (1, hi_s), "batch_id": (0, 63), "head_id": (0, 127),
            "tile": (0, 0), "lane": (0, 0)}


def _closed_form(c, hi):
    """The least (batch, nhead_q, seqlen_q) with c*b*h*s >= 2**32, lexicographically, inside
    the ranges ``hi`` = (batch max, nhead max, seqlen max)."""
    need = -(-(1 << 32) // c)
    for b in range(1, hi[0] + 1):
        if b * hi[1] * hi[2] < need:
            continue
        for h in range(1, hi[1] + 1):
            if b * h * hi[2] >= need:
                return b, h, -(-need // (b * h))


@pytest.mark.parametrize("c,hi_s", [(256, 1 << 20), (512, 1 << 16), (2, 1 << 20), (384, 3000)])
def test_least_failing_shape_is_the_closed_form_one(c, hi_s):
    claim = _u32_wrap(c, B, H, S)
    conds = [X.ule(B, Const(64, 64)), X.ule(H, Const(128, 64)), X.ule(S, Const(hi_s, 64)),
             X.ule(Const(1, 64), B), X.ule(Const(1, 64), H), X.ule(Const(1, 64), S)]
    ranges = _ranges(hi_s)
    q = Query(conds, claim, ranges, 10 ** 7)
    start = {"batch": 64, "nhead_q": 128, "seqlen_q": hi_s, "batch_id": 0, "head_id": 0, "tile": 0, "lane": 0}
    assert violates(conds, claim, start)
    model, minimal = minimize(q, start, PROB, 40 * 10 ** 6)
    assert minimal
    assert (model["batch"], model["nhead_q"], model["seqlen_q"]) == _closed_form(c, (64, 128, hi_s))
    # nothing smaller fails: shown per sub-domain by the solver or, once the narrowed ranges keep
    # every product inside 32 bits, by polynomial arithmetic alone (then no units are spent)
    assert violates(conds, claim, model)


def test_no_budget_still_returns_a_counterexample_not_called_minimal():
    claim = _u32_wrap(256, B, H, S)
    conds = [X.ule(B, Const(64, 64)), X.ule(H, Const(128, 64)), X.ule(S, Const(1 << 20, 64))]
    q = Query(conds, claim, _ranges(1 << 20), 10 ** 7)
    start = {"batch": 64, "nhead_q": 128, "seqlen_q": 1 << 20, "batch_id": 0, "head_id": 0, "tile": 0, "lane": 0}
    model, minimal = minimize(q, start, PROB, 0)
    assert not minimal and violates(conds, claim, model)


def test_a_smaller_failure_that_evaluation_misses_is_found_by_the_solver():
    """Besides the wrap (least nhead_q 16 at batch 1), the claim also fails at nhead_q=2,
    seqlen_q=7, which lowering nhead_q from the probe's shape by evaluation cannot reach
    (seqlen_q stays at 2**20 there): the proof step finds it, and proves nothing lies below."""
    odd = X.band(X.eq(H, Const(2, 64)), X.eq(S, Const(7, 64)))
    claim = X.band(_u32_wrap(256, B, H, S), X.bnot(odd))
    conds = [X.ule(B, Const(64, 64)), X.ule(H, Const(128, 64)), X.ule(S, Const(1 << 20, 64)),
             X.ule(Const(1, 64), B), X.ule(Const(1, 64), H), X.ule(Const(1, 64), S)]
    q = Query(conds, claim, _ranges(1 << 20), 10 ** 7)
    start = {"batch": 64, "nhead_q": 128, "seqlen_q": 1 << 20, "batch_id": 0, "head_id": 0, "tile": 0, "lane": 0}
    model, minimal = minimize(q, start, PROB, 40 * 10 ** 6)
    assert minimal and (model["batch"], model["nhead_q"], model["seqlen_q"]) == (1, 2, 7)
    assert q.used > 0


LANE = Sym("tid_x", 32, "lane")


def test_the_least_seqlen_counts_the_last_tile_and_the_worst_lane(monkeypatch):
    """A tile-major offset as the fmha_v3_bwd K/V loads compute it (bytes, 32-bit):
    (batch_id*nhead_q + head_id)*seqlen_q*256 + tile*49152 + (tid_x & 15)*16, with tile below
    ceil(seqlen_q/192).  At batch=2, nhead_q=9 the last workgroup, last tile and lane 15 reach
    2**32 first, at a seqlen_q tens of thousands below where tile 0 and lane 0 do: the search
    finds that shape by evaluation, and one solver call per variable proves that nothing
    below it fails, down to the tile and the lane."""
    w = lambda e: X.extract(e, 31, 0)  # noqa: E731
    def offset(width):
        cast = (lambda e: e) if width == 32 else (lambda e: X.zext(e, 64))
        k = lambda c: Const(c, width)  # noqa: E731
        b, h, s = (w(v) if width == 32 else v for v in (B, H, S))
        rows = X.mul(X.add(X.mul(cast(BID), h), cast(HID)), s)
        return X.add(X.add(X.mul(rows, k(256)), X.mul(cast(TILE), k(49152))),
                     X.mul(cast(X.band(LANE, Const(15, 32))), k(16)))
    claim = X.eq(X.zext(offset(32), 64), offset(64))
    tiles = X.udiv(X.add(S, Const(191, 64)), Const(192, 64))
    conds = [X.ule(Const(2, 64), B), X.ule(B, Const(2, 64)), X.ule(Const(9, 64), H), X.ule(H, Const(9, 64)),
             X.ule(Const(1, 64), S), X.ule(S, Const(1 << 20, 64)), X.ult(X.zext(BID, 64), B),
             X.ult(X.zext(HID, 64), H), X.ult(X.zext(TILE, 64), tiles), X.ult(LANE, Const(256, 32))]
    ranges = {"batch": (2, 2), "nhead_q": (9, 9), "seqlen_q": (1, 1 << 20), "batch_id": (0, 1), "head_id": (0, 8),
              "tile": (0, 1 << 20), "tid_x": (0, 1023)}
    q = Query(conds, claim, ranges, 10 ** 7)
    start = {"batch": 2, "nhead_q": 9, "seqlen_q": 1 << 20, "batch_id": 1, "head_id": 8, "tile": 0, "tid_x": 0}
    assert violates(conds, claim, start)
    calls = []
    inner = Query.solve_within
    monkeypatch.setattr(Query, "solve_within", lambda self, *a: calls.append(a[0]) or inner(self, *a))
    model, minimal = minimize(q, start, PROB, 40 * 10 ** 6)
    assert minimal and violates(conds, claim, model)
    assert len(calls) <= 4, calls            # seqlen_q, batch_id, head_id, tile: one proof each

    def fails(s, tile, lane):
        return 17 * s * 256 + tile * 49152 + lane * 16 >= 1 << 32
    least = next(s for s in range(900_000, 1 << 20) if fails(s, (s + 191) // 192 - 1, 15))
    last = (least + 191) // 192 - 1
    assert not fails(least, 0, 0)            # tile 0, lane 0 fail only much later
    assert model["seqlen_q"] == least
    assert model["tile"] == min(t for t in range(last + 1) if fails(least, t, 15))
    assert model["tid_x"] == min(ln for ln in range(16) if fails(least, model["tile"], ln))


# ----------------------------------------------------------------------------- the wrap cover

def _bshd_slice_offset(width_ids=32):
    """BSHD Q as the fmha_v3_bwd kernels address it (bytes): the 32-bit sum
    batch_id*stride + head_id*256, stride = nhead_q*seqlen_q*256 the host's exact u32 batch
    stride; the claim: it equals the exact 64-bit offset."""
    stride = X.mul(X.mul(X.extract(H, 31, 0), X.extract(S, 31, 0)), Const(256, 32))
    low = X.add(X.mul(BID, stride), X.mul(HID, Const(256, 32)))
    exact = X.add(X.mul(X.zext(BID, 64), X.mul(X.mul(H, S), Const(256, 64))), X.mul(X.zext(HID, 64), Const(256, 64)))
    conds = [X.ule(Const(1, 64), B), X.ule(B, Const(64, 64)), X.ule(Const(1, 64), H), X.ule(H, Const(128, 64)),
             X.ule(Const(64, 64), S), X.ule(S, Const(1 << 20, 64)),
             X.eq(X.urem(S, Const(64, 64)), Const(0, 64)),                        # the kernel's seqlen trait
             X.ult(X.mul(X.mul(H, S), Const(256, 64)), Const(1 << 32, 64)),       # the u32 stride is exact
             X.ult(X.zext(BID, 64), B), X.ult(X.zext(HID, 64), H)]
    return conds, X.eq(X.zext(low, 64), exact)


def _thin_band_minimum():
    """The least (batch, nhead_q, seqlen_q) of :func:`_bshd_slice_offset`, by enumeration: at
    batch 1 nothing wraps; at batch 2 the last workgroup wraps when
    n*s*256 + (n-1)*256 >= 2**32 with n*s*256 < 2**32 and 64 | s."""
    for n in range(1, 129):
        for s in range(64, (1 << 20) + 1, 64):
            if n * s * 256 >= 1 << 32:
                break
            if n * s * 256 + (n - 1) * 256 >= 1 << 32:
                return 2, n, s


def test_a_thin_band_of_failing_shapes_is_minimised_and_proven_by_the_wrap_cover(monkeypatch):
    """The failing shapes lie in a band one head wide under the exact-stride bound (the
    README kernel's BSHD Q: (2, 73, 229824)); evaluation misses it, and on the real kernel
    the whole query costs 4-7 Mru an attempt.  The wrap sites decide every step: each
    "nothing below" is a site obligation over one add and one multiply, and the whole
    query is never asked."""
    def whole_query(*a):
        raise AssertionError("minimisation asked the whole query")
    monkeypatch.setattr(Query, "solve_within", whole_query)
    conds, claim = _bshd_slice_offset()
    ranges = dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20))
    q = Query(conds, claim, ranges, 10 ** 7)
    start = {"batch": 64, "nhead_q": 73, "seqlen_q": 229824, "batch_id": 63, "head_id": 72, "tile": 0, "lane": 0}
    assert violates(conds, claim, start)
    model, minimal = minimize(q, start, PROB, 6 * 10 ** 6)
    assert minimal
    assert (model["batch"], model["nhead_q"], model["seqlen_q"]) == _thin_band_minimum() == (2, 73, 229824)
    assert violates(conds, claim, model)


def test_the_wrap_cover_says_unsat_only_where_nothing_fails():
    """The defining property of :class:`addrsim.prove.cover.WrapCover`: a box it calls free of
    counterexamples holds none (enumerated), and a model it returns breaks the claim."""
    from addrsim.backends.bitwuzla_run import AVAILABLE
    from addrsim.prove.cover import wrap_cover
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim = _bshd_slice_offset()
    ranges = dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20))
    q = Query(conds, claim, ranges, 10 ** 7)
    cov, used = wrap_cover(q)
    assert cov is not None and used == 0       # E' shown by normal forms (addrsim.ir.poly.normal)
    assert {n.op for n, _, _ in cov.sites} <= {"add", "mul"}
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    assert cov.attempt({"batch": (1, 1)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    assert cov.attempt({"batch": (2, 2), "nhead_q": (1, 72)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    got, m = cov.attempt({"batch": (2, 2), "nhead_q": (73, 73)}, check, BZLA_RU_PER_CALL)
    assert got in (("sat",) if AVAILABLE else ("sat", "unknown"))
    if got == "sat":
        assert check(m) and m["batch"] == 2 and m["nhead_q"] == 73
    # enumeration of the box called free: batch 2, nhead_q <= 72, the last workgroup and the
    # 32 longest sequences whose stride is exact (the largest offsets of each nhead_q)
    for n in range(1, 73):
        top = min(1 << 20, ((1 << 32) - 1) // (256 * n)) // 64 * 64
        for s in range(max(64, top - 31 * 64), top + 1, 64):
            assert not violates(conds, claim, {"batch": 2, "nhead_q": n, "seqlen_q": s, "batch_id": 1,
                                               "head_id": n - 1, "tile": 0, "lane": 0})


def test_no_cover_for_a_wrong_formula():
    """A claim false over the integers too (a wrong stride, not a wrap) has no wrap cover:
    dropping every wrap does not make it hold, so minimisation does not lean on one."""
    from addrsim.prove.cover import wrap_cover
    conds, claim = _bshd_slice_offset()
    wrong = X.eq(claim.args[0], X.add(claim.args[1], X.mul(X.zext(HID, 64), Const(2, 64))))
    q = Query(conds, wrong, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    assert wrap_cover(q)[0] is None


def test_an_undecided_query_is_refuted_by_its_wrap_cover():
    """A bit-vector query the solvers left undecided is tried on its wrap cover over the whole
    domain (addrsim.prove.query._decided_by_cover): every failing shape makes a 32-bit product
    wrap, and a site model that breaks the claim refutes it; the model is a counterexample
    when evaluated."""
    from addrsim.prove.query import _decided_by_cover
    claim = _u32_wrap(256, B, H, S)
    conds = [X.ule(B, Const(64, 64)), X.ule(H, Const(128, 64)), X.ule(S, Const(1 << 20, 64)),
             X.ule(Const(1, 64), B), X.ule(Const(1, 64), H), X.ule(Const(1, 64), S)]
    q = Query(conds, claim, _ranges(1 << 20), 10 ** 7)
    verdict, model, why = _decided_by_cover(q, {}, "the solvers gave up", 3 * 10 ** 6)
    assert verdict == "refuted" and why is None and violates(conds, claim, model)
    assert q.used > 0                  # the cover's units are charged to the query


def test_the_batch_boxes_partition_the_batch_range():
    """The cover is asked box by box over the batch, [1, 1], [2, 3], [4, 7], ...: the boxes
    are contiguous, disjoint and end at the range's upper bound, so "no counterexample in
    any box" is "none in the domain"."""
    from addrsim.prove.query import _batch_boxes
    for hi in (1, 2, 3, 64, 100, 1365):
        conds = [X.ule(B, Const(hi, 64)), X.ule(Const(1, 64), B)]
        q = Query(conds, _u32_wrap(256, B, H, S), dict(_ranges(1 << 20), batch=(1, hi)), 10 ** 7)
        boxes = [b["batch"] for b in _batch_boxes(q)]
        assert boxes[0] == (1, 1) and boxes[-1][1] == hi
        assert all(b[0] == a[1] + 1 and b[0] <= b[1] for a, b in zip(boxes, boxes[1:]))
        assert len(boxes) <= hi.bit_length() + 1


def test_a_wrap_only_at_a_large_batch_is_found_in_its_box():
    """The product wraps only from batch 5 up (256*b*h*s >= 2**32 needs b >= 5 when h*s <=
    2**22): the boxes [1, 1] .. [2, 3] are shown free of wraps, and the box [4, 7] gives the
    counterexample."""
    from addrsim.prove.query import _decided_by_cover
    claim = _u32_wrap(256, B, H, S)
    conds = [X.ule(B, Const(64, 64)), X.ule(H, Const(4, 64)), X.ule(S, Const(1 << 20, 64)),
             X.ule(Const(1, 64), B), X.ule(Const(1, 64), H), X.ule(Const(1, 64), S)]
    q = Query(conds, claim, _ranges(1 << 20), 10 ** 7)
    verdict, model, why = _decided_by_cover(q, {}, "the solvers gave up", 3 * 10 ** 6)
    assert verdict == "refuted" and violates(conds, claim, model) and 4 <= model["batch"] <= 7


def test_a_cover_that_no_box_can_wrap_proves_the_query():
    """No product can wrap where the conditions hold (h*s <= L at batch 1, h*s <= L/2 at batch
    2: 256*b*h*s <= 2**31 for L = 2**23), a disjunction the facts do not read: every box of
    the batch range is free of wraps and the claim holds wherever none wraps: proved.  The
    control (L = 2**25) wraps at batch 1."""
    from addrsim.prove.query import _decided_by_cover

    def query(lim):
        hs = X.mul(H, S)
        conds = [X.bor(X.band(X.ule(B, Const(1, 64)), X.ule(hs, Const(lim, 64))),
                       X.band(X.ule(B, Const(2, 64)), X.ule(hs, Const(lim // 2, 64)))),
                 X.ule(Const(1, 64), B), X.ule(Const(1, 64), H), X.ule(Const(1, 64), S)]
        return Query(conds, _u32_wrap(256, B, H, S), _ranges(1 << 20), 10 ** 7)
    q = query(1 << 23)
    assert not q.identity and _decided_by_cover(q, {}, "the solvers gave up", 3 * 10 ** 6)[0] == "proved"
    q = query(1 << 25)
    verdict, model, _ = _decided_by_cover(q, {}, "the solvers gave up", 3 * 10 ** 6)
    assert verdict == "refuted" and model["batch"] == 1 and violates(q.conds, q.claim, model)


def test_an_undecided_box_is_cut_along_nhead_q_then_seqlen_q():
    """A box the cover cannot decide is replaced by its pieces along nhead_q ([1, 1], [2, 3],
    ...), then seqlen_q: each level partitions its box, so "no wrap in any piece" still means
    "none in the domain".  Stubbed cover: undecided on every box that does not bound
    seqlen_q, a counterexample only at nhead_q in [16, 31], seqlen_q in [2**19, 2**20 - 1]."""
    import addrsim.prove.query as QM
    q = Query([X.ule(Const(1, 64), B)], _u32_wrap(256, B, H, S), _ranges(1 << 20), 10 ** 7)
    boxes = QM._sub_boxes(q, {"batch": (1, 1)})
    assert [b["nhead_q"] for b in boxes][:3] == [(1, 1), (2, 3), (4, 7)] and boxes[-1]["nhead_q"][1] == 128
    assert all(b["batch"] == (1, 1) for b in boxes)
    deeper = QM._sub_boxes(q, boxes[4])
    assert [b["seqlen_q"] for b in deeper][-1] == (1 << 20, 1 << 20) and deeper[0]["nhead_q"] == (16, 31)
    halves = QM._sub_boxes(q, deeper[0])          # every variable cut: nhead_q is halved
    assert [b["nhead_q"] for b in halves] == [(16, 23), (24, 31)] and all(b["seqlen_q"] == (1, 1) for b in halves)
    assert QM._sub_boxes(q, {"batch": (1, 1), "nhead_q": (16, 16), "seqlen_q": (1, 1)}) == []

    asked = []

    def covered(q_, box, memo, bad=None):
        memo["cover"] = object()
        asked.append(box)
        if "seqlen_q" not in box:
            return None
        hit = box["nhead_q"] == (16, 31) and box["seqlen_q"] == (1 << 19, (1 << 20) - 1) and bad
        return ("sat", dict(box=box)) if hit else ("unsat", None)
    orig = QM._covered
    try:
        QM._covered = lambda q_, box, memo, ru=0: covered(q_, box, memo, bad=True)
        verdict, model, _ = QM._decided_by_cover(q, {}, "gave up", 10 ** 12)
        assert verdict == "refuted" and model["box"]["batch"] == (1, 1)
        assert asked[:2] == [{"batch": (1, 1)}, {"batch": (1, 1), "nhead_q": (1, 1)}]     # depth first
        asked.clear()
        QM._covered = lambda q_, box, memo, ru=0: covered(q_, box, memo, bad=False)
        assert QM._decided_by_cover(q, {}, "gave up", 10 ** 12)[0] == "proved"
        leaves = [b for b in asked if "seqlen_q" in b]
        assert len(leaves) == len(_geometric_count(64)) * 8 * 21     # every piece of every level
        asked.clear()
        QM._covered = lambda q_, box, memo, ru=0: (memo.__setitem__("cover", object()), asked.append(box))[0]
        assert QM._decided_by_cover(q, {}, "gave up", 10 ** 12)[0] == "unknown"   # a leaf left undecided
        assert len(asked) == QM.COVER_MAX_BOXES          # halving stops at the box count
    finally:
        QM._covered = orig


def _geometric_count(hi):
    from addrsim.prove.query import _geometric
    return _geometric(1, hi)


def test_a_formula_bug_is_not_decided_by_a_wrap_cover():
    """A wrong formula (not an overflow) has no wrap cover: the undecided answer stays
    "unknown", with the solvers' reason."""
    from addrsim.prove.query import _decided_by_cover
    claim = X.eq(X.mul(B, Const(2, 64)), X.mul(B, Const(3, 64)))
    conds = [X.ule(B, Const(64, 64)), X.ule(Const(1, 64), B)]
    q = Query(conds, claim, _ranges(1 << 20), 10 ** 7)
    verdict, model, why = _decided_by_cover(q, {}, "the solvers gave up", 3 * 10 ** 6)
    assert verdict == "unknown" and model is None and why.startswith("the solvers gave up")


def test_an_attempt_spends_at_most_its_cap():
    """A minimisation attempt (:meth:`Query.solve_within`) runs several stages (the integer
    encoding, its range obligations, Z3 and Bitwuzla on bit-vectors, the integer encoding once
    more); together they spend at most ATTEMPT_CAP times the attempt's units, so one hard box
    cannot eat the whole minimisation budget (uncapped, this one spends 3x).  The box is hard
    for every stage: is the prime 2**61 - 1 a product of two numbers of 2 to 2**31?"""
    from addrsim.prove.query import ATTEMPT_CAP, BZLA_RU_PER_CALL
    claim = X.bnot(X.eq(X.mul(B, H), Const((1 << 61) - 1, 64)))
    conds = [X.ule(Const(2, 64), B), X.ule(Const(2, 64), H), X.ule(B, Const(1 << 31, 64)), X.ule(H, Const(1 << 31, 64))]
    q = Query(conds, claim, {"batch": (2, 1 << 31), "nhead_q": (2, 1 << 31)}, 10 ** 7)
    ru = 200_000
    verdict, _, _ = q.solve_within({"batch": (2, 1 << 31)}, ru, ru // 2)
    assert verdict in ("unknown", "proved")
    assert q.used <= ATTEMPT_CAP * ru + BZLA_RU_PER_CALL


def test_the_cover_cuts_only_along_variables_the_claim_reads():
    """A wrap of ``256*kv_tile*nhead_q`` with ``kv_tile < seqlen_k/192`` (a kernel whose K rows
    do not depend on seqlen_q): boxes are cut along batch, nhead_q and seqlen_k, never
    seqlen_q, which would leave every piece as hard as the box."""
    import addrsim.prove.query as QM
    kv, sk = Sym("kv_tile", 32, "id"), Sym("seqlen_k", 64, "shape")
    claim = _u32_wrap(256, B, H, X.zext(kv, 64))
    conds = [X.ule(Const(1, 64), B), X.ult(X.zext(kv, 64), X.udiv(sk, Const(192, 64))), X.ule(Const(1, 64), S)]
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_k=(1, 1 << 20), kv_tile=(0, 1 << 20)), 10 ** 7)
    assert QM._split_vars(q) == ["batch", "nhead_q", "seqlen_k"]


def _row_window_claim(limit_rows=None):
    """A lane's dK offset in 32 bits: rows ``64*kv_tile + tid_x/16`` of stride
    ``R = 256*nhead_q`` bytes plus the head's ``256*head_id`` (< R); the claim that the sum
    does not carry out of 32 bits.  It fails only where a row's offset lies within one head
    window below 2**32: a thin band (one row in 2**32 / R) that the crossing probe reaches
    by bisecting the tile."""
    kv, tid, sk = Sym("kv_tile", 32, "id"), Sym("tid_x", 32, "lane"), Sym("seqlen_k", 64, "shape")
    r32 = X.mul(X.extract(H, 31, 0), Const(256, 32))
    w = X.add(X.mul(kv, X.mul(r32, Const(64, 32))), X.mul(X.lshr(tid, Const(4, 32)), r32))
    bh = X.mul(HID, Const(256, 32))
    claim = X.eq(X.zext(X.add(w, bh), 64), X.add(X.zext(w, 64), X.zext(bh, 64)))
    conds = [X.ule(Const(1, 64), H), X.ule(Const(1, 64), sk), X.ult(X.zext(HID, 64), H),
             X.ult(X.zext(kv, 64), X.udiv(X.add(sk, Const(63, 64)), Const(64, 64))), X.ult(tid, Const(64, 32))]
    if limit_rows:
        conds.append(X.ule(X.mul(sk, H), Const(limit_rows, 64)))
    ranges = {"nhead_q": (1, 256), "seqlen_k": (1, 1 << 20), "head_id": (0, 255), "kv_tile": (0, 1 << 20),
              "tid_x": (0, 1023)}
    return conds, claim, ranges


def test_the_crossing_probe_finds_a_head_window_across_2_to_the_32():
    from addrsim.prove.probe import crossing
    conds, claim, ranges = _row_window_claim()
    grid = {"batch": "batch_id", "head": "head_id", "tile": "kv_tile", "lane": "tid_x"}
    wraps = [n for n in X.walk(claim) if isinstance(n, X.Op) and n.op in ("add", "mul") and n.width == 32]
    m = crossing(conds, claim, wraps, ranges, grid)
    assert m is not None and violates(conds, claim, m)
    assert m["seqlen_k"] * m["nhead_q"] * 256 > 1 << 32          # only a tensor past 4 GiB
    conds, claim, ranges = _row_window_claim(limit_rows=(1 << 24) - 1)
    assert crossing(conds, claim, wraps, ranges, grid) is None       # none where none exists


def test_an_overflow_with_a_free_cover_is_decided_before_the_whole_query(monkeypatch):
    """The dK row-window overflow: its cover is shown by normal forms (no solver), so the
    cover decides it (the crossing probe finds the band) before Z3 or Bitwuzla see the whole
    formula, and the counterexample breaks the claim when evaluated."""
    import types
    import addrsim.prove.query as QM
    conds, claim, ranges = _row_window_claim()
    prob = types.SimpleNamespace(grid={"z": Sym("batch_id", 32, "id"), "y": HID, "x": Sym("kv_tile", 32, "id")},
                                 array_specs=None)
    monkeypatch.setattr(QM, "probe", lambda *a, **k: None)        # not found by the sampled probe
    monkeypatch.setattr(QM.Query, "solve", lambda self, *a, **k: pytest.fail("the whole query was asked"))
    verdict, model, _, _, _, _ = QM.decide_query(conds, claim, ranges, 10 ** 7, prob, 0)
    assert verdict == "refuted" and violates(conds, claim, model)


def _cover_needs_z3():
    """(conds, claim, ranges): 256*nhead_k*seqlen_q in 32 bits against 256*nhead_q*seqlen_q,
    with nhead_k <= nhead_q <= nhead_k: an overflow whose E' (the claim without the wrap)
    normal forms do not show (the two heads are equal only through two inequalities), Z3 does."""
    HK = Sym("nhead_k", 64, "shape")
    exact = X.mul(X.mul(Const(256, 64), H), S)
    wrapped = X.mul(X.mul(Const(256, 32), X.extract(HK, 31, 0)), X.extract(S, 31, 0))
    conds = [X.ule(HK, H), X.ule(H, HK)]
    return conds, X.eq(X.zext(wrapped, 64), exact), dict(_ranges(1 << 24), nhead_k=(1, 128))


def _cut_by_the_wall_clock(base):
    """A solver class like ``base`` (:class:`addrsim.backends.z3_run.Isolated`) whose every
    check the wall clock's safety net stops: unknown, ``wallclock`` set."""
    import z3

    class Cut(base):
        def check(self, rlimit, *a):
            self.wallclock = True
            return z3.unknown, "canceled"
    return Cut


def test_a_cover_check_stopped_by_the_wall_clock_marks_the_query(monkeypatch):
    """E' left undecided by the wall clock's safety net (a loaded machine), not by the
    units: no cover, and the query is marked so (its answer is not cached as a function of
    its key)."""
    from addrsim.prove import cover as C
    conds, claim, ranges = _cover_needs_z3()
    q = Query(conds, claim, ranges, 10 ** 7)
    monkeypatch.setattr(C, "Isolated", _cut_by_the_wall_clock(C.Isolated))
    assert C.wrap_cover(q)[0] is None and q.wallclock


def test_a_refutation_touched_by_the_wall_clock_is_returned_with_its_query(monkeypatch):
    """decide_query returns the Query beside a counterexample when the wall clock's safety
    net stopped one of its solver calls (here the cover's E'), so that callers keep the
    answer, whose minimisation then depended on load, out of the cache; an untouched
    refutation comes back without it."""
    import addrsim.prove.query as QM
    from addrsim.prove import cover as C
    conds, claim, ranges = _cover_needs_z3()
    monkeypatch.setattr(QM, "probe", lambda *a, **k: None)
    v, m, _, _, q, _ = QM.decide_query(conds, claim, ranges, 10 ** 7, PROB, 10 ** 6)
    assert v == "refuted" and violates(conds, claim, m) and q is None
    monkeypatch.setattr(C, "Isolated", _cut_by_the_wall_clock(C.Isolated))
    v, m, _, _, q, _ = QM.decide_query(conds, claim, ranges, 10 ** 7, PROB, 10 ** 6)
    assert v == "refuted" and violates(conds, claim, m) and q is not None and q.wallclock


def _whole_query_never_asked(monkeypatch):
    import addrsim.prove.query as QM

    def whole(self, *a, **k):
        raise AssertionError("the whole query was asked")
    monkeypatch.setattr(QM, "probe", lambda *a, **k: None)
    monkeypatch.setattr(QM.Query, "solve", whole)
    return QM


def test_an_overflow_whose_cover_needs_z3_is_decided_before_the_whole_query(monkeypatch):
    """256*nhead_k*seqlen_q in 32 bits (E' shown by Z3, not by normal forms), with the probe
    and the quick integer try finding nothing: the wrap cover built with Z3 refutes it box
    by box, and the whole query (whose stages spent 24 Mru undecided on gfx942 hd128
    a16_rtna_pddv K SBHD) is never asked; the counterexample is the least one."""
    QM = _whole_query_never_asked(monkeypatch)
    monkeypatch.setattr(QM, "_quick", lambda q: None)
    conds, claim, ranges = _cover_needs_z3()
    v, m, _, minimal, _, _ = QM.decide_query(conds, claim, ranges, 10 ** 7, PROB, 10 ** 7)
    assert v == "refuted" and violates(conds, claim, m) and minimal
    assert (m["nhead_q"], m["nhead_k"], m["seqlen_q"]) == (1, 1, 1 << 24)


def test_a_claim_the_quick_integer_try_proves_pays_for_no_cover(monkeypatch):
    """The same product where it cannot wrap (seqlen_q < 2**17, nhead_k <= 128: under 2**32)
    is proved by the integer encoding on a fresh solver; no wrap cover is built and the
    whole query is never asked."""
    QM = _whole_query_never_asked(monkeypatch)

    def no_cover(q, free_only=False):
        assert free_only, "a wrap cover was built with Z3"
        return None, 0                        # the free early cover (normal forms) is not built either
    monkeypatch.setattr(QM, "wrap_cover", no_cover)
    conds, claim, ranges = _cover_needs_z3()
    ranges["seqlen_q"] = (1, (1 << 17) - 1)
    conds = conds + [X.ule(S, Const((1 << 17) - 1, 64)), X.ule(H, Const(128, 64))]
    v, m, _, _, _, _ = QM.decide_query(conds, claim, ranges, 10 ** 7, PROB, 10 ** 7)
    assert v == "proved" and m is None


def test_a_box_whose_sites_cannot_wrap_there_costs_no_solver_call():
    """The row-window overflow in a box of short sequences (seqlen_k <= 4095: at most
    4095 rows of at most 65536 bytes): the encoding over the box's ranges keeps every site
    inside 32 bits, so the cover says "unsat" there with no units spent; the whole domain
    is not such a box."""
    from addrsim.prove.cover import wrap_cover
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim, ranges = _row_window_claim()
    q = Query(conds, claim, ranges, 10 ** 7)
    cov, _ = wrap_cover(q)
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    before = cov.used
    assert cov.attempt({"seqlen_k": (1, 4095)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    assert cov.used == before
    sites = {id(n) for n, _, _ in cov.sites}
    assert sites - cov._exact_in({"seqlen_k": (1, 1 << 20)})


def test_a_site_unsat_over_the_whole_domain_is_asked_once(monkeypatch):
    """A site that Bitwuzla decides (its integer obligation undecided once), once unsat in a
    box, is asked over the whole domain, once, within GLOBAL_BZLA_RU: unsat there (no
    counterexample wraps it), no later box asks it again; otherwise each box asks it as
    before (gfx950 a16_psskddv: 25 sites asked in 5 to 11 boxes each, unsat over the whole
    domain in 2 Bitwuzla calls)."""
    from addrsim.prove import cover as C
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim = _bshd_slice_offset()
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    cov, _ = C.wrap_cover(q)
    assert cov is not None and len(cov.sites) >= 2
    never, other = cov.sites[0][0], cov.sites[1][0]
    calls = []

    def fake(self, n, bounds, violates, per_call, ru):
        calls.append((n, dict(bounds), ru))
        return ("unsat", None) if n is never or bounds else ("unknown", None)
    monkeypatch.setattr(C.WrapCover, "_bv_call", fake)
    monkeypatch.setattr(C.WrapCover, "_exact_in", lambda self, bounds: set())
    cov._bv_only = {id(n) for n, _, _ in cov.sites}          # every site goes to Bitwuzla
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    mine = lambda n: [(b, ru) for m, b, ru in calls if m is n]  # noqa: E731
    assert cov.attempt({"batch": (1, 1)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    assert mine(never) == [({"batch": (1, 1)}, C.SITE_BZLA_RU)]           # no box unsat yet: the box
    calls.clear()
    assert cov.attempt({"batch": (2, 2)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    assert mine(never) == [({}, C.GLOBAL_BZLA_RU)]                         # then the whole domain, once
    assert mine(other) == [({}, C.GLOBAL_BZLA_RU), ({"batch": (2, 2)}, C.SITE_BZLA_RU)]
    calls.clear()
    assert cov.attempt({"batch": (3, 3)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    assert mine(never) == [] and mine(other) == [({"batch": (3, 3)}, C.SITE_BZLA_RU)]


@pytest.mark.skipif(not __import__("addrsim.backends.bitwuzla_run", fromlist=["AVAILABLE"]).AVAILABLE,
                    reason="needs Bitwuzla")
def test_sites_asked_over_the_whole_domain_still_find_the_thin_band():
    """The wrong kernel for the whole-domain site answers: the README kernel's BSHD Q offset,
    whose 32-bit sum wraps only in a band one head wide.  Every site decided by Bitwuzla alone
    (so each, once unsat in a box, is asked over the whole domain): the boxes below the band
    are still unsat, and the band's box still gives a model that breaks the claim; a site that
    wraps somewhere is never taken as unsat everywhere."""
    from addrsim.prove.cover import wrap_cover
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim = _bshd_slice_offset()
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    cov, _ = wrap_cover(q)
    cov._bv_only = {id(n) for n, _, _ in cov.sites}
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    assert cov.attempt({"batch": (1, 1)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    assert cov.attempt({"batch": (2, 2), "nhead_q": (1, 72)}, check, BZLA_RU_PER_CALL)[0] == "unsat"
    got, m = cov.attempt({"batch": (2, 2), "nhead_q": (73, 73)}, check, BZLA_RU_PER_CALL)
    assert got == "sat" and check(m) and (m["batch"], m["nhead_q"]) == (2, 73)
    assert cov._global                                          # the whole-domain question was asked


def test_a_smaller_batch_raises_the_claims_own_variables_too():
    """K's offset reads nhead_k and seqlen_k, not seqlen_q: (batch_id + nhead_k)*seqlen_k*256
    bytes in 32 bits, with the device memory shared by Q's rows and K's,
    batch*(seqlen_q + nhead_k*seqlen_k) <= 2**26.  From a failing shape at batch 64 with one
    K head, the candidate at batch 1 (what evaluation offers before the solver is asked)
    raises nhead_k and seqlen_k, the claim's, before seqlen_q, which would take the memory K
    needs: it fails, at nhead_k 64 and seqlen_k near 2**20.  Raising nhead_q, seqlen_q and
    seqlen_k alone leaves one K head there, and breaks nothing."""
    from addrsim.prove.query import _lowered, _raised
    q, start, names = _k_offset_query()
    conds, claim = q.conds, q.claim
    assert violates(conds, claim, start)
    low = _lowered(start, "batch", 1, names)
    assert not violates(conds, claim, low)
    raised = _raised(q, low, "batch", names)
    assert raised["batch"] == 1 and violates(conds, claim, raised)
    assert raised["nhead_k"] == 64 and raised["nhead_k"] * raised["seqlen_k"] >= 1 << 24 and q.used == 0


def _k_offset_query():
    """(query, failing shape at batch 64, grid names) of the K-offset problem:
    (batch_id + nhead_k)*seqlen_k*256 bytes in 32 bits, device memory
    batch*(seqlen_q + nhead_k*seqlen_k) <= 2**26."""
    HK, SK = Sym("nhead_k", 64, "shape"), Sym("seqlen_k", 64, "shape")
    exact = X.mul(X.mul(X.add(X.zext(BID, 64), HK), SK), Const(256, 64))
    wrapped = X.mul(X.mul(X.add(BID, X.extract(HK, 31, 0)), X.extract(SK, 31, 0)), Const(256, 32))
    claim = X.eq(X.zext(wrapped, 64), exact)
    memory = X.ule(X.mul(B, X.add(S, X.mul(HK, SK))), Const(1 << 26, 64))
    conds = [memory, X.ult(X.zext(BID, 64), B), X.ult(X.zext(HID, 64), H)] + [
        X.band(X.ule(Const(1, 64), v), X.ule(v, Const(hi, 64))) for v, hi in ((B, 64), (H, 64), (HK, 64), (S, 1 << 20),
                                                                             (SK, 1 << 20))]
    ranges = {"batch": (1, 64), "nhead_q": (1, 64), "nhead_k": (1, 64), "seqlen_q": (1, 1 << 20),
              "seqlen_k": (1, 1 << 20), "batch_id": (0, 63), "head_id": (0, 63), "tile": (0, 0), "lane": (0, 0)}
    q = Query(conds, claim, ranges, 10 ** 7)
    start = {"batch": 64, "nhead_q": 1, "nhead_k": 1, "seqlen_q": 1, "seqlen_k": 1 << 18, "batch_id": 63,
             "head_id": 0, "tile": 0, "lane": 0}
    names = {"batch": "batch_id", "head": "head_id", "tile": "tile", "lane": "lane", "arrays": None}
    return q, start, names


def _gqa_problem(traits):
    """A problem's domain for head groups: head_id < nhead_q, 1 <= nhead_q, nhead_k <= 256,
    plus ``traits``."""
    from addrsim.model.schema import SHAPE_VARS
    nq, nk = Sym("nhead_q", 64, "shape"), Sym("nhead_k", 64, "shape")
    dom = [X.ult(X.zext(HID, 64), nq)] + [X.band(X.ule(Const(1, 64), v), X.ule(v, Const(256, 64))) for v in (nq, nk)]
    bounds = {v: (1, 256) for v in SHAPE_VARS}
    group = X.udiv(HID, X.extract(X.udiv(nq, nk), 31, 0))
    return SimpleNamespace(domain=dom + traits(nq, nk), bounds=bounds, grid={"z": BID, "y": HID, "x": TILE}), group, nk


@pytest.mark.parametrize("traits,shown", [
    (lambda nq, nk: [X.eq(X.urem(nq, nk), Const(0, 64))], True),      # an integer GQA ratio (the traits layer)
    (lambda nq, nk: [X.ule(nk, nq)], False),                          # nhead_q 3, nhead_k 2: head 2 is in group 2
])
def test_a_head_group_lemma_holds_only_where_the_domain_implies_it(traits, shown):
    """K/V's head group udiv(head_id, nhead_q/nhead_k) is below nhead_k when nhead_k divides
    nhead_q; the lemma (addrsim.prove.check.group_lemmas) is stated only once the query
    pipeline proves it from the domain.  Without the integer ratio it is false, and not stated."""
    from addrsim.prove.check import _shown_from_domain
    prob, group, nk = _gqa_problem(traits)
    assert _shown_from_domain(X.ult(group, X.extract(nk, 31, 0)), prob, {}) is shown


@pytest.mark.slow
def test_k_bhsd_of_a_gqa_kernel_is_minimal_with_the_head_group_lemma(corpus):
    """gfx942 bwd_hd128_bf16_a32_rtna_psskddv, K BHSD, address: batch 1 cannot wrap (a K head
    group is below nhead_k, kv_tile*192 < seqlen_k, and nhead_k*seqlen_k*hdim_q*2 < 2**32 by the
    exact layer), which the solvers did not show without the lemma (batch 2121, then 2, not
    proven minimal).  With it, the least failing shape is proven minimal."""
    from addrsim.api import verify
    co = corpus / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a32_rtna_psskddv.co"
    c = verify(co, buffers=["k"], layouts=["bhsd"], properties=["address"])["kernels"][0]["checks"][0]
    cx = c["counterexample"]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow" and cx["minimal"]
    assert [cx["shape"][v] for v in ("batch", "nhead_q", "nhead_k")] == [2, 9, 9]


NAMES = {"batch": "batch_id", "head": "head_id", "tile": "tile", "lane": "tid_x", "arrays": None}


def _eval_query(claim, conds, ranges):
    return Query(conds + [X.ult(X.zext(BID, 64), B), X.ult(X.zext(HID, 64), H)], claim, ranges, 10 ** 7)


def test_the_evaluation_floor_steps_over_values_the_traits_reject():
    """4096*nhead_q*seqlen_q in 32 bits with seqlen_q a multiple of 64 (a kernel trait): at
    nhead_q 3 the least failing seqlen_q is 349568 (2**20/3 rounded up to 64).  Bisection by
    evaluation asks mostly values that are no multiple of 64; each such value is tried
    rounded up to the traits' grains too, so "does not fit" is not read as "does not fail"
    and the floor is exactly that least value, with no solver call.  (From 1009216, the
    failing seqlen of the pddv dK BSHD check, plain bisection stayed there.)"""
    from addrsim.prove.query import _eval_floor
    claim = _u32_wrap(4096, H, S)
    conds = [X.eq(X.urem(S, Const(64, 64)), Const(0, 64))]
    ranges = dict(_ranges(1 << 20), nhead_q=(3, 3), tid_x=(0, 0))
    q = _eval_query(claim, conds, ranges)
    start = {"batch": 1, "nhead_q": 3, "seqlen_q": 1009216, "batch_id": 0, "head_id": 2, "tile": 0, "tid_x": 0}
    assert violates(q.conds, claim, start)
    got = _eval_floor(q, start, "seqlen_q", 1, NAMES)
    assert got["seqlen_q"] == 349568 and violates(q.conds, claim, got) and q.used == 0
    assert not violates(q.conds, claim, dict(got, seqlen_q=349568 - 64))


def test_a_smaller_nhead_q_raises_a_padded_head_dimension():
    """2*nhead_q*hdim_q*seqlen_q in 32 bits, seqlen_q 2**20, hdim_q in [72, 120], a multiple of
    8 and equal to hdim_v (a pddv kernel's traits): nhead_q 18 fails at hdim 120, not at 72
    (29 there).  From a failure at nhead_q 64, hdim 72, the evaluation floor raises hdim_q
    (hdim_v following it) and finds 18."""
    from addrsim.prove.query import _eval_floor
    D, DV = Sym("hdim_q", 64, "shape"), Sym("hdim_v", 64, "shape")
    claim = _u32_wrap(2, H, D, S)
    conds = [X.eq(X.urem(D, Const(8, 64)), Const(0, 64)), X.eq(D, DV),
             X.ule(Const(72, 64), D), X.ule(D, Const(120, 64))]
    ranges = dict(_ranges(1 << 20), seqlen_q=(1 << 20, 1 << 20), hdim_q=(72, 120), hdim_v=(72, 120), tid_x=(0, 0))
    q = _eval_query(claim, conds, ranges)
    start = {"batch": 1, "nhead_q": 64, "seqlen_q": 1 << 20, "hdim_q": 72, "hdim_v": 72, "batch_id": 0,
             "head_id": 63, "tile": 0, "tid_x": 0}
    assert violates(q.conds, claim, start)
    got = _eval_floor(q, start, "nhead_q", 1, NAMES)
    assert (got["nhead_q"], got["hdim_q"], got["hdim_v"]) == (18, 120, 120) and violates(q.conds, claim, got)


def _straddle_claim():
    """A relative tile offset: the 32-bit sum tile*T + head_id*256 against tile*T (32 bits)
    plus head_id*256 (exact), T = 2**26 - 64, tiles below 101.  Only tile 64, whose offset is
    2**32 - 4096, straddles 2**32 (for head_id >= 16): the last tile's offset has wrapped
    for every head alike, and breaks nothing."""
    TT = Sym("tile", 32, "id")
    row = X.mul(TT, Const((1 << 26) - 64, 32))
    lane = X.mul(LANE, Const(4, 32))
    lhs = X.zext(X.add(X.add(row, X.mul(HID, Const(256, 32))), lane), 64)
    rhs = X.add(X.zext(X.add(row, lane), 64), X.mul(X.zext(HID, 64), Const(256, 64)))
    conds = [X.ult(TT, Const(101, 32)), X.ult(LANE, Const(1, 32)), X.ult(X.zext(HID, 64), H)]
    return conds, X.eq(lhs, rhs)


def test_the_tile_that_straddles_2_to_the_32_is_found_where_the_last_tile_breaks_nothing():
    from addrsim.prove.probe import crossing_at
    conds, claim = _straddle_claim()
    point = {"nhead_q": 32, "head_id": 31, "tile": 100, "tid_x": 0}
    assert not violates(conds, claim, point)
    wraps = [n for n in X.walk(claim) if isinstance(n, X.Op) and n.op in ("add", "mul") and n.width == 32]
    m = crossing_at(conds, claim, wraps, point, NAMES, 100, 0)
    assert m is not None and m["tile"] == 64 and violates(conds, claim, m)
    assert crossing_at(conds, claim, wraps, dict(point, nhead_q=8, head_id=7), NAMES, 100, 0) is None


def test_straddling_tiles_of_many_shapes_are_each_the_one_found_alone():
    """The crossing probe over several shapes at once (one batch): each shape gets the tile
    it gets alone (tile 64 where the heads reach 16, none where they do not)."""
    from addrsim.prove.probe import crossing_at, crossings_at
    conds, claim = _straddle_claim()
    wraps = [n for n in X.walk(claim) if isinstance(n, X.Op) and n.op in ("add", "mul") and n.width == 32]
    points = [{"nhead_q": h, "head_id": h - 1, "tile": 100, "tid_x": 0} for h in (32, 8, 17, 16, 64)]
    alone = [crossing_at(conds, claim, wraps, p, NAMES, 100, 0) for p in points]
    assert [m and m["tile"] for m in alone] == [64, None, 64, None, 64]
    assert crossings_at(conds, claim, wraps, points, NAMES, [100] * 5, 0) == alone


def test_candidates_raised_together_are_each_the_one_raised_alone():
    """The K-offset problem of the test above: lowered shapes of several batches raised in one
    batch of evaluations give, point by point, what each gets raised alone (nhead_k and
    seqlen_k raised to the device memory left)."""
    from addrsim.prove.query import _lowered, _raised, _raised_many
    q, start, names = _k_offset_query()
    lows = [_lowered(start, "batch", b, names) for b in (1, 2, 5, 17, 64)]
    alone = [_raised(q, t, "batch", names) for t in lows]
    assert _raised_many(q, lows, "batch", names) == alone
    assert violates(q.conds, q.claim, alone[0]) and len({tuple(sorted(t.items())) for t in alone}) == 5


def test_the_evaluation_floor_is_the_step_by_step_bisection():
    """The floor evaluates the candidates of the next bisection steps together; the value it
    returns is the one a bisection that evaluates one candidate at a time returns (the
    trait-rounded seqlen of the test above, and the batch of the K-offset problem)."""
    from addrsim.prove.query import _candidates, _eval_floor, _fitting
    claim = _u32_wrap(4096, H, S)
    q = _eval_query(claim, [X.eq(X.urem(S, Const(64, 64)), Const(0, 64))], dict(_ranges(1 << 20), nhead_q=(3, 3), tid_x=(0, 0)))
    start = {"batch": 1, "nhead_q": 3, "seqlen_q": 1009216, "batch_id": 0, "head_id": 2, "tile": 0, "tid_x": 0}
    k, kstart, knames = _k_offset_query()
    for q_, model, var, names in ((q, start, "seqlen_q", NAMES), (k, kstart, "batch", knames)):
        a, b, best = 1, model[var], model
        while a < b:                                     # one candidate at a time
            mid = (a + b) // 2
            for x in _fitting(mid, b):
                t = _candidates(q_, model, var, [x], names)[0]
                if t is not None:
                    best, b = t, x
                    break
            else:
                a = mid + 1
        assert _eval_floor(q_, model, var, 1, names) == best


@pytest.mark.slow
def test_a_pddv_dk_wrap_is_an_overflow_at_the_least_head_count(corpus):
    """gfx942 bwd_hd128_bf16_a16_rtna_pddv, dK BSHD, address: the integer reading of the claim
    (floors of hdim_q*(...)/2 with hdim_q a multiple of 8) is left undecided by the integer
    solver within its budget, so the counterexample was "unclassified", at nhead_q 25.  Its
    normal forms agree once the 32-bit sites may not wrap: an overflow, at the VGPR sum
    0x2cd0.  With batch_id bounded by a batch of 1 before encoding, boxes of nhead_q up to 18
    hold no wrap without a solver call, and 19 is the least failing head count (the
    minimisation's later variables, a thin band of seqlen_q, stay unproven)."""
    from addrsim.api import verify
    co = corpus / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a16_rtna_pddv.co"
    c = verify(co, buffers=["dk"], layouts=["bshd"], properties=["address"])["kernels"][0]["checks"][0]
    cx = c["counterexample"]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow"
    assert c["overflow"] and c["overflow"][0]["pc"] == 0x2cd0
    assert [cx["shape"][v] for v in ("batch", "nhead_q")] == [1, 19]


@pytest.mark.slow
def test_a_group_head_offset_is_minimal_with_the_packed_total_bounded(corpus):
    """gfx942 bwd_hd128_fp16_causal_br_a32_pssk_group, dO BHSD, address: the 32-bit head
    offset head_id*total_q*hdim*2 wraps from head 16 at total_q 2**20.  Proving nhead_q <= 16
    holds no counterexample needs total_q <= batch*seqlen_q (implied by seqstart_q, now a
    stated bound) and the cover leaving out the causal bottom-right subtractions, whose 32-bit
    wraps are signed offsets that break nothing (each shown within SHRINK_RU, up to 0.7 Mru
    on the psskddv_group kernel).  Before, each nhead_q was proved one at a time until the
    budget ran out, at nhead_q 5: "not proven minimal"."""
    from addrsim.api import verify
    co = corpus / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_fp16_causal_br_a32_pssk_group.co"
    c = verify(co, buffers=["do"], layouts=["bhsd"], properties=["address"])["kernels"][0]["checks"][0]
    cx = c["counterexample"]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow" and cx["minimal"]
    assert [cx["shape"][v] for v in ("batch", "nhead_q", "seqlen_q", "total_q")] == [1, 17, 1 << 20, 1 << 20]
    assert cx["coords"]["head_id"] == 16


def _pddv_like_query():
    """2*nhead_q*hdim_q*seqlen_q in 32 bits, hdim_q in [72, 120] by 8 and equal to hdim_v, nhead_q a
    multiple of nhead_k (a pddv kernel's traits, models/fmha_bwd_v3.yaml)."""
    D, DV, HK = Sym("hdim_q", 64, "shape"), Sym("hdim_v", 64, "shape"), Sym("nhead_k", 64, "shape")
    claim = X.band(_u32_wrap(2, H, D, S), X.eq(X.urem(H, HK), Const(0, 64)))
    conds = [X.band(X.eq(D, DV), X.eq(X.urem(D, Const(8, 64)), Const(0, 64))), X.eq(X.urem(H, HK), Const(0, 64)),
             X.ule(Const(72, 64), D), X.ule(D, Const(120, 64))]
    ranges = dict(_ranges(1 << 20), hdim_q=(72, 120), hdim_v=(72, 120), nhead_k=(1, 128), tid_x=(0, 0))
    return _eval_query(claim, conds, ranges)


def test_pieces_partition_the_box_by_the_few_values_a_trait_allows():
    """An attempt the solvers cannot decide over a range of (nhead_q, hdim_q) is cut into
    pieces of one nhead_q and one hdim_q (hdim_v following it through the trait's equality):
    every shape of the box that the traits allow lies in exactly one piece; nhead_k, with
    more values than FINE_MAX, is left whole; a seqlen range is kept as a range."""
    from addrsim.prove.query import ORDER, _pieces
    q = _pddv_like_query()
    box = {"batch": (1, 1), "nhead_q": (16, 18)}
    ps = _pieces(q, box, "nhead_q", list(ORDER))
    assert len(ps) == 3 * 7 and all(p["nhead_q"][0] == p["nhead_q"][1] for p in ps)
    assert all(p["hdim_q"] == p["hdim_v"] and p["hdim_q"][0] % 8 == 0 for p in ps)
    assert all("nhead_k" not in p and "seqlen_q" not in p for p in ps)
    for h in range(16, 19):
        for d in range(72, 121):
            inside = [p for p in ps if p["nhead_q"][0] == h and p["hdim_q"][0] == d]
            assert len(inside) == (1 if d % 8 == 0 else 0)
    ps = _pieces(q, dict(box, nhead_q=(19, 19), seqlen_q=(1, 1 << 19)), "seqlen_q", list(ORDER))
    assert len(ps) == 7 and all(p["seqlen_q"] == (1, 1 << 19) for p in ps)


def test_a_box_decided_by_pieces_is_still_checked_by_evaluation():
    """Minimisation with pieces: the least (batch, nhead_q, seqlen_q) of the pddv-like wrap is
    the closed-form one (nhead_q 18 at hdim 120, seqlen_q then 2**31 / (18 * 120) rounded up),
    proven minimal, and fails by evaluation."""
    q = _pddv_like_query()
    start = {"batch": 1, "nhead_q": 40, "nhead_k": 1, "seqlen_q": 1 << 20, "hdim_q": 120, "hdim_v": 120,
             "batch_id": 0, "head_id": 39, "tile": 0, "tid_x": 0}
    assert violates(q.conds, q.claim, start)
    model, minimal = minimize(q, start, PROB, 40 * 10 ** 6)
    assert minimal and violates(q.conds, q.claim, model)
    assert (model["batch"], model["nhead_q"], model["hdim_q"]) == (1, 18, 120)
    assert model["seqlen_q"] == -(-(1 << 31) // (18 * 120))


@pytest.mark.slow
def test_a_head_count_is_shown_least_piece_by_piece(corpus):
    """gfx942 bwd_hd128_bf16_a32_rtna_psskddv, dV SBHD, address: the least failing nhead_q (19, at
    batch 1) was not shown minimal: over a range of hdim_q the solvers gave up on every
    nhead_q box.  Cut into pieces of one nhead_q and one hdim_q (addrsim.prove.query._pieces),
    each is decided in a fraction of the units, and the shape is proven minimal."""
    from addrsim.api import verify
    co = corpus / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a32_rtna_psskddv.co"
    c = verify(co, buffers=["dv"], layouts=["sbhd"], properties=["address"])["kernels"][0]["checks"][0]
    cx = c["counterexample"]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow" and cx["minimal"]
    assert [cx["shape"][v] for v in ("batch", "nhead_q", "seqlen_q", "seqlen_k")] == [1, 19, 1, 883009]


@pytest.mark.slow
def test_an_undecided_piece_does_not_hide_a_later_one(corpus):
    """gfx942 bwd_hd192_bf16_causal_br_a32_rtna_psskddv, K BSHD, address: at batch 2 the
    counterexample lies at hdim_q 192, the last of the 8 pieces (129..192 by 8).  Pieces that
    stopped at the first undecided one left batch 2 unproven and the shape at (3, 6), not
    minimal (the whole wheel's scan of 4dc0a36); the others are asked too, then the whole
    box, and (2, 12) is proven minimal, as one solver call over the box showed before pieces."""
    from addrsim.api import verify
    co = corpus / "gfx942" / "fmha_v3_bwd" / "bwd_hd192_bf16_causal_br_a32_rtna_psskddv.co"
    c = verify(co, buffers=["k"], layouts=["bshd"], properties=["address"])["kernels"][0]["checks"][0]
    cx = c["counterexample"]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow" and cx["minimal"]
    assert [cx["shape"][v] for v in ("batch", "nhead_q", "nhead_k")] == [2, 12, 12]


def test_a_site_both_solvers_leave_undecided_in_a_box_is_asked_again_over_the_integers(monkeypatch):
    """The wrong kernel for SITE_BOX_INT_RU: the thin band of the README kernel's BSHD Q, with
    Z3's first integer try given no units and Bitwuzla undecided everywhere.  In a box, the site
    is then asked once more of Z3 over the integers (a fresh solver) within SITE_BOX_INT_RU when the caller gives
    those units (minimisation's boxes): the band's box gives a model that breaks the claim, a box
    below it is unsat; without them (the query's own decision, box by box within one budget)
    nothing more is asked (gfx950 hd192 a32_rtna_psskddv dK BHSD: the
    batch = 1 box undecided at 0.05 + 0.5 Mru was sat at 0.56 Mru, and its least shape
    batch=1 nhead_q=11 was then proven minimal, where batch=2 nhead_q=6 had been reported)."""
    from addrsim.prove import cover as C
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim = _bshd_slice_offset()
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    cov, _ = C.wrap_cover(q)
    asked = []
    real = C.WrapCover._site_int

    def site_int(self, t, w, ru, violates, bounds=None):
        asked.append((ru, bounds is not None))
        return ("unknown", None) if ru == C.SITE_INT_RU else real(self, t, w, ru, violates, bounds)
    monkeypatch.setattr(C.WrapCover, "_site_int", site_int)
    monkeypatch.setattr(C.WrapCover, "_bv_call", lambda *a: ("unknown", None))
    monkeypatch.setattr(C.WrapCover, "_exact_in", lambda self, bounds: set())
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    band = {"batch": (2, 2), "nhead_q": (73, 73)}
    assert cov.attempt(band, check, BZLA_RU_PER_CALL)[0] == "unknown"
    assert all(ru == C.SITE_INT_RU for ru, _ in asked)
    got, m = cov.attempt(band, check, BZLA_RU_PER_CALL, int_ru=C.SITE_BOX_INT_RU)
    assert got == "sat" and check(m) and (m["batch"], m["nhead_q"]) == (2, 73)
    assert (C.SITE_BOX_INT_RU, True) in asked                  # on a fresh solver
    assert cov.attempt({"batch": (1, 1)}, check, BZLA_RU_PER_CALL, int_ru=C.SITE_BOX_INT_RU)[0] == "unsat"


def test_in_a_box_of_one_value_the_fresh_integer_try_comes_before_bitwuzla(monkeypatch):
    """Where the caller gives SITE_BOX_INT_RU (a minimisation box of one value), a site Z3's
    first try left undecided is asked of a fresh Z3 before Bitwuzla: the README kernel's BSHD Q
    band is then refuted without a Bitwuzla call, which the box without those units makes
    (the whole wheel: 8 more counterexamples proven least than with Bitwuzla first, 0 lost,
    results 2026-12-07e item 6)."""
    from addrsim.prove import cover as C
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim = _bshd_slice_offset()
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    cov, _ = C.wrap_cover(q)
    bv = []
    real = C.WrapCover._site_int
    monkeypatch.setattr(C.WrapCover, "_site_int", lambda self, t, w, ru, violates, bounds=None: (
        ("unknown", None) if ru == C.SITE_INT_RU else real(self, t, w, ru, violates, bounds)))
    monkeypatch.setattr(C.WrapCover, "_bv_call", lambda *a: bv.append(1) or ("unknown", None))
    monkeypatch.setattr(C.WrapCover, "_exact_in", lambda self, bounds: set())
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    band = {"batch": (2, 2), "nhead_q": (73, 73)}
    got, m = cov.attempt(band, check, BZLA_RU_PER_CALL, int_ru=C.SITE_BOX_INT_RU)
    assert got == "sat" and check(m) and bv == []
    assert cov.attempt(band, check, BZLA_RU_PER_CALL)[0] == "unknown" and bv


def test_minimisation_asks_the_second_integer_try_only_in_boxes_of_one_value(monkeypatch):
    """SITE_BOX_INT_RU is spent only where a box holds one value of each variable fixed so far
    (a galloping step, batch = 1): in a wide box (nhead_q in [1, 127]) such a try spent the
    minimisation's units undecided, 1 Mru a site, and the least shape went unproven."""
    from addrsim.prove import query as Q
    from addrsim.prove.cover import SITE_BOX_INT_RU
    calls = []
    real = Q._covered

    def covered(q, box, memo, bzla_ru=Q.SITE_BZLA_RU, int_ru=0):
        calls.append((dict(box), int_ru))
        return real(q, box, memo, bzla_ru, int_ru)
    monkeypatch.setattr(Q, "_covered", covered)
    conds, claim = _bshd_slice_offset()
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    start = {"batch": 64, "nhead_q": 73, "seqlen_q": 229824, "batch_id": 63, "head_id": 72, "tile": 0, "lane": 0}
    model, minimal = minimize(q, start, PROB, 6 * 10 ** 6)
    assert minimal and (model["batch"], model["nhead_q"]) == (2, 73)
    assert {ru for _, ru in calls} == {0, SITE_BOX_INT_RU}
    for box, ru in calls:
        assert (ru == SITE_BOX_INT_RU) == all(lo == hi for lo, hi in box.values())


def test_a_second_integer_try_cut_by_the_wall_clock_marks_the_cover(monkeypatch):
    """The fresh solver of the second integer try is not the cover's base: when the wall clock's
    safety net (not the resource units) stops it, the base is marked, so that the minimisation's
    answer, no longer a function of the query, is kept out of the cache."""
    from addrsim.prove import cover as C
    from addrsim.prove.query import BZLA_RU_PER_CALL
    conds, claim = _bshd_slice_offset()
    q = Query(conds, claim, dict(_ranges(1 << 20), seqlen_q=(64, 1 << 20)), 10 ** 7)
    cov, _ = C.wrap_cover(q)
    monkeypatch.setattr(C, "Isolated", _cut_by_the_wall_clock(C.Isolated))
    monkeypatch.setattr(C.WrapCover, "_bv_call", lambda *a: ("unknown", None))
    monkeypatch.setattr(C.WrapCover, "_exact_in", lambda self, bounds: set())
    cov._bv_only = {id(n) for n, _, _ in cov.sites}
    check = lambda m: violates(conds, claim, m)  # noqa: E731
    assert not cov.base.wallclock
    got = cov.attempt({"batch": (2, 2), "nhead_q": (73, 73)}, check, BZLA_RU_PER_CALL, int_ru=C.SITE_BOX_INT_RU)
    assert got[0] == "unknown" and cov.base.wallclock
