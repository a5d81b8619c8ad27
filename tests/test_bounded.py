"""Carries the conditions rule out (addrsim.ir.bounded): a loop's V# stride field read after
the 48-bit base was advanced is the base's own, once the base is a canonical address.

Each rewrite is an equality wherever the conditions hold: checked here by evaluation at
random points that satisfy them, and shown to be refused when a bound is missing."""
import random

import pytest

from addrsim.ir import expr as X
from addrsim.ir.bounded import upper, upper_bounds, without_dead_carries
from addrsim.ir.expr import Const, Sym
from addrsim.prove.query import Query

CANONICAL = 1 << 47


def _advanced_vsharp(s8, s9, step):
    """The V# words 0-1 after ``s_add_u32 s8, s8, step; s_addc_u32 s9, s9, 0``: the stride
    field (bits 61..48) times an index, plus the 48-bit base (bytes)."""
    lo = X.add(s8, step)
    hi = X.add(s9, X.zext(X.ult(lo, s8), 32))
    base = X.zext(X.extract(X.concat(hi, lo), 47, 0), 64)
    stride = X.zext(X.extract(hi, 29, 16), 64)
    return X.add(base, X.mul(stride, X.zext(Sym("index", 32), 64)))


def _canonical(s8, s9):
    return X.ult(X.extract(X.concat(s9, s8), 47, 0), Const(CANONICAL, 48))


def test_the_stride_field_after_a_canonical_base_advances_is_the_bases_own():
    s8, s9, step = Sym("s8", 32), Sym("s9", 32), Sym("step", 32)
    e = X.fold_carries(_advanced_vsharp(s8, s9, step))
    got = without_dead_carries(e, [_canonical(s8, s9)])
    stride = X.extract(s9, 29, 16)
    assert any(X.digest(n) == X.digest(stride) for n in X.walk(got))
    assert not any(isinstance(n, X.Op) and n.op == "extract" and n.params == (61, 48) for n in X.walk(got))


def test_without_the_canonical_bound_the_carry_stays():
    """A base just below 2**48 advanced by 1 carries into the stride field: nothing is removed."""
    s8, s9, step = Sym("s8", 32), Sym("s9", 32), Sym("step", 32)
    e = X.fold_carries(_advanced_vsharp(s8, s9, step))
    assert without_dead_carries(e, []) is e
    assert X.digest(without_dead_carries(e, [X.ult(s8, Const(1 << 31, 32))])) == X.digest(e)
    env = {"s8": 0xffffffff, "s9": 0x0003ffff, "step": 1, "index": 1}
    assert X.evaluate(e, env) != X.evaluate(X.add(X.zext(X.extract(X.concat(Sym("s9", 32), Sym("s8", 32)), 47, 0), 64),
                                                  X.add(Const(1, 64), X.zext(X.extract(Sym("s9", 32), 29, 16), 64))), env)


@pytest.mark.parametrize("seed", range(8))
def test_the_rewrite_keeps_the_value_wherever_the_conditions_hold(seed):
    rnd = random.Random(seed)
    s8, s9, step, b48 = Sym("s8", 32), Sym("s9", 32), Sym("step", 32), Sym("b48", 48)
    small = Sym("small", 16)
    conds = [_canonical(s8, s9), X.ult(b48, Const(CANONICAL, 48)), X.ule(small, Const(rnd.choice([7, 1000, 65535]), 16))]
    exprs = [X.fold_carries(_advanced_vsharp(s8, s9, step)),
             X.zext(X.add(b48, X.zext(step, 48)), 64),
             X.extract(X.add(X.concat(s9, s8), X.zext(small, 64)), 40 + rnd.randrange(20), 16 + rnd.randrange(16)),
             X.zext(X.add(X.zext(small, 32), step), 64)]
    for e in exprs:
        got = without_dead_carries(e, conds)
        for _ in range(400):
            env = {"s8": rnd.choice([0, 0xffffffff, rnd.getrandbits(32)]), "s9": rnd.getrandbits(32),
                   "step": rnd.choice([0, 0xffffffff, rnd.getrandbits(32)]), "index": rnd.getrandbits(32),
                   "b48": rnd.choice([CANONICAL - 1, rnd.getrandbits(47), rnd.getrandbits(48)]),
                   "small": rnd.getrandbits(16)}
            if all(X.evaluate(c, env) for c in conds):
                assert X.evaluate(got, env) == X.evaluate(e, env)


def test_upper_bounds_come_from_stated_comparisons_and_the_width():
    x, y = Sym("x", 32), Sym("y", 32)
    b = upper_bounds([X.band(X.ult(x, Const(100, 32)), X.ule(y, Const(7, 32)))])
    assert upper(x, b) == 99 and upper(y, b) == 7
    assert upper(X.add(x, y), b) == 106
    assert upper(X.ite(Sym("c", 1), x, Const(5, 32)), b) == 99
    assert upper(Sym("z", 32), b) == 0xffffffff


def test_an_advanced_base_translation_is_proved_once_its_carries_are_gone():
    """The loop induction's translation obligation in miniature: two workgroups' bases x and
    x + T (both canonical, 48-bit), advanced by one step: the difference of the accessed
    addresses is the same from every base (bytes), with the stride products cancelling."""
    T = Sym("T", 48)
    def addr(tag):
        s8, s9 = Sym(f"s8{tag}", 32), Sym(f"s9{tag}", 32)
        moved = Sym(f"m{tag}", 48)
        hi16 = X.extract(s9, 31, 16)
        pair = X.concat(hi16, moved)
        cond = [X.eq(moved, X.add(X.extract(X.concat(s9, s8), 47, 0), T)), X.ult(moved, Const(CANONICAL, 48)),
                _canonical(s8, s9)]
        a1 = _advanced_vsharp(X.extract(pair, 31, 0), X.extract(pair, 63, 32), Sym("step", 32))
        a0 = _advanced_vsharp(s8, s9, Sym("step", 32))
        return cond, X.sub(a1, a0)
    cx, dx = addr("x")
    cy, dy = addr("y")
    q = Query(cx + cy, X.eq(dx, dy), {}, 20_000_000)
    assert q.solve()[0] == "proved"


def test_terms_both_sides_share_cancel_before_a_solver():
    """eq(a + M, b + M) becomes eq(a - b, 0) (mod 2**64) with the product M gone; equal at
    every point."""
    from addrsim.ir.poly import cancelled
    rnd = random.Random(3)
    a, b, s, i = (Sym(n, 64) for n in ("a", "b", "s", "i"))
    m = X.mul(X.zext(X.extract(s, 29, 16), 64), X.zext(X.extract(i, 31, 0), 64))
    claim = X.eq(X.add(a, m), X.add(b, m))
    got = cancelled(claim)
    assert "s" not in X.symbols(got) and "i" not in X.symbols(got)
    for _ in range(200):
        env = {n: rnd.getrandbits(64) for n in "absi"}
        if rnd.random() < 0.3:
            env["b"] = env["a"]
        assert X.evaluate(got, env) == X.evaluate(claim, env)


def test_a_claim_is_proved_from_the_conditions_of_its_cone_and_only_then():
    """Conditions on symbols the claim never meets (transitively) are left out of a first
    try; one in the cone is kept: x <= 5 follows from x == y and y <= 5, not from the
    unrelated z * z == 9; a refutation still satisfies every condition."""
    x, y, z = Sym("x", 8), Sym("y", 8), Sym("z", 8)
    conds = [X.eq(x, y), X.ule(y, Const(5, 8)), X.eq(X.mul(z, z), Const(9, 8))]
    assert Query(conds, X.ule(x, Const(5, 8)), {}, 1_000_000).solve()[0] == "proved"
    v, model, _ = Query(conds, X.ule(x, Const(4, 8)), {}, 1_000_000).solve()
    assert v == "refuted" and model["x"] == 5 and (model["z"] * model["z"]) % 256 == 9


# ------------------------------------------------------------------ intervals under ranges

def _vsharp_words(q, off, steps):
    """V# words 0-1 of buffer Q as the README kernel builds them: ``s_or_b32 s9, s9, 0x40000``
    (stride 4 bytes in bits 61..48) over the 48-bit base, then ``off`` and ``steps`` tile steps
    of 0x1000 bytes added with s_add_u32/s_addc_u32; returns (base + 4*index, stride field)."""
    from tests.test_nowrap import _pair_add
    hi = X.or_(X.zext(X.extract(q, 47, 32), 32), Const(0x40000, 32))
    hi, lo = _pair_add(hi, X.extract(q, 31, 0), off)
    for _ in range(steps):
        hi, lo = _pair_add(hi, lo, Const(0x1000, 32))
    stride = X.zext(X.extract(hi, 29, 16), 64)
    base = X.zext(X.extract(X.concat(hi, lo), 47, 0), 64)
    return X.add(base, X.mul(stride, X.zext(Sym("index", 32), 64))), stride


def test_a_vsharp_stride_field_is_a_constant_once_the_base_is_a_user_address():
    """Q below 2**47 (every allocation, addrsim.prove.machines.PTR_LIMIT): the carries of the
    base's tile steps cannot reach bit 48, so the stride field is 4 and the address is linear
    in the index; without the range a carry can reach it and the field stays."""
    q, off = Sym("Q", 48, "ptr"), Sym("off", 32)
    addr, stride = _vsharp_words(q, off, 3)
    ranges = {"Q": (0, (1 << 47) - 1)}
    got = without_dead_carries(X.fold_carries(addr), [], ranges)
    assert not any(isinstance(n, X.Op) and n.op == "extract" and n.params[1] in (16, 48) for n in X.walk(got)), got
    assert X.digest(without_dead_carries(X.fold_carries(stride), [], ranges)) == X.digest(Const(4, 64))
    assert not isinstance(without_dead_carries(X.fold_carries(stride), [], {}), Const)
    rnd = random.Random(0)
    for _ in range(500):
        env = {"Q": rnd.choice([(1 << 47) - 1, (1 << 47) - 0x1000, rnd.getrandbits(47)]),
               "off": rnd.choice([0xffffffff, 0xffffe000, rnd.getrandbits(32)]), "index": rnd.getrandbits(32)}
        assert X.evaluate(got, env) == X.evaluate(addr, env)


def _random_expr(rnd, leaves, depth):
    if depth == 0 or rnd.random() < 0.2:
        return rnd.choice(leaves)
    op = rnd.choice(["add", "mul", "sub", "or", "and", "lshr", "shl", "udiv", "extract", "zext", "ite", "concat"])
    a, b = _random_expr(rnd, leaves, depth - 1), _random_expr(rnd, leaves, depth - 1)
    if op in ("lshr", "shl", "udiv"):
        return getattr(X, {"lshr": "lshr", "shl": "shl", "udiv": "udiv"}[op])(a, Const(rnd.randrange(1, 9), 32))
    if op == "extract":
        lo_ = rnd.randrange(0, 24)
        return X.zext(X.extract(a, lo_ + rnd.randrange(0, 8), lo_), 32)
    if op == "zext":
        return X.extract(X.zext(a, 40), 31, 0)
    if op == "ite":
        return X.ite(X.ult(a, b), a, b)
    if op == "concat":
        return X.extract(X.concat(X.extract(a, 15, 0), X.extract(b, 15, 0)), 31, 0)
    return {"add": X.add, "mul": X.mul, "sub": X.sub, "or": X.or_, "and": X.and_}[op](a, b)


@pytest.mark.parametrize("seed", range(12))
def test_an_interval_holds_every_value_in_the_ranges(seed):
    """interval(e) contains e's value at every point inside the symbols' ranges and the
    stated bounds (random expressions of the operations it reads; random points, the
    range ends included)."""
    from addrsim.ir.bounded import interval
    rnd = random.Random(seed)
    ranges = {n: tuple(sorted((rnd.randrange(0, 1 << rnd.choice([4, 12, 20, 32])),) * 1 +
                              (rnd.randrange(0, 1 << rnd.choice([4, 12, 20, 32])),))) for n in "abc"}
    leaves = [Sym(n, 32) for n in "abc"] + [Const(rnd.getrandbits(rnd.choice([3, 16, 32])), 32)]
    es = [_random_expr(rnd, leaves, 4) for _ in range(30)]
    b = upper_bounds([], ranges)
    for e in es:
        lo, hi = interval(e, b)
        for _ in range(60):
            env = {n: rnd.choice([r[0], r[1], rnd.randint(*r)]) for n, r in ranges.items()}
            assert lo <= X.evaluate(e, env) <= hi, (e, env, lo, hi)


# ------------------------------------------------------------------ strengthening

def test_an_exact_offset_inside_the_allocation_proves_the_wrapped_one():
    """``zext(x*y mod 2**32) + 4 <= E`` is implied by ``x*y + 4 <= E`` over 64 bits (the
    wrapped offset is never above the exact one): the strengthened claim holds only where
    the claim does, at random points including wrapping ones."""
    from addrsim.ir.bounded import strengthened
    x, y, e = Sym("x", 32), Sym("y", 32), Sym("E", 64)
    tile = X.zext(X.ite(X.ult(x, y), X.mul(y, Const(0x1000, 32)), Const(0, 32)), 64)   # a tile step taken or not
    claim = X.ule(X.add(X.add(X.zext(X.mul(x, y), 64), tile), Const(4, 64)), e)
    st = strengthened(claim, [], {"E": (0, 1 << 40)})
    assert st is not claim and not any(isinstance(n, X.Op) and n.op == "mul" and n.width == 32 for n in X.walk(st))
    rnd = random.Random(1)
    for _ in range(2000):
        env = {"x": rnd.getrandbits(rnd.choice([8, 20, 32])), "y": rnd.getrandbits(rnd.choice([8, 20, 32])),
               "E": rnd.getrandbits(rnd.choice([16, 33, 40]))}
        if X.evaluate(st, env):
            assert X.evaluate(claim, env)
    # the wrapped term on the large side is never widened (that would weaken the claim)
    other = X.ule(e, X.zext(X.mul(x, y), 64))
    assert strengthened(other, [], {}) is other


def test_only_a_proof_of_the_stronger_claim_is_used():
    """``zext(x*y mod 2**32) <= zext((x*y mod 2**32) | z)`` holds for every x, y, z although
    the exact product may exceed the right side: the strengthened attempt fails and the
    claim is still proved, never refuted."""
    from addrsim.prove.query import _proved_strengthened
    x, y, z = Sym("x", 32), Sym("y", 32), Sym("z", 32)
    claim = X.ule(X.zext(X.mul(x, y), 64), X.zext(X.or_(X.mul(x, y), z), 64))
    q = Query([], claim, {}, 10**7)
    assert q.goal is not None and not isinstance(q.goal, Const)
    assert not _proved_strengthened(q)
    assert q.solve()[0] == "proved"


def test_a_counterexample_names_the_pointer_its_rewrite_cancelled():
    """``P + x + 4 <= P + 10`` is decided as ``x + 4 <= 10``; the model of its refutation
    still gives P (in its range), so the claim itself evaluates at it."""
    p, x = Sym("P", 48, "ptr"), Sym("x", 32)
    claim = X.ule(X.add(X.add(X.zext(p, 64), X.zext(x, 64)), Const(4, 64)), X.add(X.zext(p, 64), Const(10, 64)))
    q = Query([], claim, {}, 10**7)
    assert "P" not in X.symbols(q.goal)
    verdict, model, _ = q.solve()
    assert verdict == "refuted" and "P" in model and model["P"] < 1 << 47
    assert X.evaluate(claim, model) == 0
    assert q.complete({"x": 7}) == {"x": 7, "P": 0}      # a model made without P (a wrap cover's)


def test_a_case_of_the_split_equals_the_claim_where_its_conditions_hold():
    """Each case of the split over the ite conditions fixes them to constants: equal to the
    claim at every point where the conditions take those values (random points)."""
    from addrsim.ir.bounded import ite_conditions, with_conditions
    x, y = Sym("x", 32), Sym("y", 32)
    c1, c2 = X.ult(x, y), X.ult(y, Const(7, 32))
    e = X.ule(X.add(X.ite(c1, x, y), X.ite(c2, Const(3, 32), X.ite(c1, y, Const(1, 32)))), Sym("E", 32))
    cs = ite_conditions(e, 3)
    assert len(cs) == 2 and ite_conditions(e, 1) is None
    keys = [X.digest(c) for c in cs]
    rnd = random.Random(3)
    for _ in range(500):
        env = {"x": rnd.getrandbits(rnd.choice([3, 32])), "y": rnd.getrandbits(rnd.choice([3, 32])),
               "E": rnd.getrandbits(32)}
        values = [X.evaluate(c, env) for c in cs]
        assert X.evaluate(with_conditions(e, dict(zip(keys, values))), env) == X.evaluate(e, env)


def test_a_bounds_claim_with_a_tile_step_is_proved_through_the_stronger_claim():
    """``zext(x*64) + zext(ite(x < t, 64, 0)) + 4 <= 64*t + 68`` under ``x < t <= 2**20``: the
    strengthened claim (exact offsets) is proved, so the claim is."""
    from addrsim.prove.query import _proved_strengthened
    x, t = Sym("x", 32), Sym("t", 64)
    step = X.zext(X.ite(X.ult(X.zext(x, 64), t), Const(64, 32), Const(0, 32)), 64)
    claim = X.ule(X.add(X.add(X.zext(X.mul(x, Const(64, 32)), 64), step), Const(4, 64)),
                  X.add(X.mul(t, Const(64, 64)), Const(68, 64)))
    q = Query([X.ult(X.zext(x, 64), t)], claim, {"t": (1, 1 << 20)}, 10**7)
    assert _proved_strengthened(q)
