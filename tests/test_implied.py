"""Shape ranges a domain implies (addrsim.ir.implied): sound (every point of the domain stays
inside the narrowed ranges), and tight where a host states a shape bound as a stride
inequality (the wheel's SBHD routing is batch = 1)."""
import itertools
import random

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Sym
from addrsim.ir.implied import implied_ranges, monomial
from addrsim.model.models import build_problem, load_models

B, H, D = (Sym(n, 64, "shape") for n in ("batch", "nhead_q", "hdim_q"))


def c64(v):
    return Const(v, 64)


def test_sbhd_routing_condition_is_batch_one():
    """codegen.py: batch_stride_q >= stride_q; SBHD elements: nhead_q*hdim_q >= batch*nhead_q*hdim_q."""
    cond = X.ule(X.mul(X.mul(B, H), c64(128)), X.mul(H, c64(128)))
    r = implied_ranges([cond], {"batch": (1, 4096), "nhead_q": (1, 256)})
    assert r == {"batch": (1, 1), "nhead_q": (1, 256)}


def test_cancelling_needs_factors_of_at_least_one():
    """With nhead_q allowed to be 0, 0 <= 0 holds at every batch: nothing may be cancelled."""
    cond = X.ule(X.mul(B, H), H)
    assert implied_ranges([cond], {"batch": (1, 9), "nhead_q": (0, 4)}) == {"batch": (1, 9), "nhead_q": (0, 4)}


def test_a_side_that_can_wrap_is_not_read():
    """32-bit batch*2**28 wraps past batch 15: the inequality is no polynomial one there."""
    b32 = Sym("b", 32, "shape")
    cond = X.ule(X.mul(b32, Const(1 << 28, 32)), Const(1 << 30, 32))
    assert implied_ranges([cond], {"b": (1, 64)}) == {"b": (1, 64)}
    assert implied_ranges([cond], {"b": (1, 15)}) == {"b": (1, 4)}


def test_a_narrower_product_inside_a_wide_side_that_can_wrap_is_not_read():
    """zext(b*2**28 at 32 bits) at 64 bits: the 64-bit side fits, the 32-bit product inside does not."""
    b32 = Sym("b", 32, "shape")
    cond = X.ule(X.zext(X.mul(b32, Const(1 << 28, 32)), 64), c64(1 << 30))
    assert implied_ranges([cond], {"b": (1, 64)}) == {"b": (1, 64)}


def test_lower_bounds_and_strictness():
    """2*batch*nhead_q < 4*nhead_q is 2*batch < 4 (batch <= 1, not 2); 64 <= 2*hdim_q (hdim_q >= 32)."""
    conds = [X.ult(X.mul(X.mul(c64(2), B), H), X.mul(c64(4), H)), X.ule(c64(64), X.mul(c64(2), D))]
    r = implied_ranges(conds, {"batch": (1, 8), "nhead_q": (1, 8), "hdim_q": (1, 256)})
    assert r == {"batch": (1, 1), "nhead_q": (1, 8), "hdim_q": (32, 256)}


def test_monomial_reads_products_shifts_and_zext():
    e = X.shl(X.zext(X.mul(Sym("x", 32, "shape"), Const(3, 32)), 64), c64(2))
    assert monomial(e) == (12, {"x": 1})
    assert monomial(X.add(B, H)) is None


def _random_monomial(rng, names):
    e = c64(rng.randint(1, 4))
    for n in rng.sample(names, rng.randint(0, len(names))):
        for _ in range(rng.randint(1, 2)):
            e = X.mul(e, Sym(n, 64, "shape"))
    return e


def test_narrowing_is_sound_on_random_monomial_domains():
    """Property: every point that satisfies the conditions lies inside the narrowed ranges."""
    rng = random.Random(14)
    names = ["a", "b", "c"]
    for _ in range(300):
        ranges = {n: (rng.randint(0, 2), rng.randint(2, 6)) for n in names}
        conds = []
        for _ in range(rng.randint(1, 3)):
            op = rng.choice([X.ule, X.ult, X.eq])
            conds.append(op(_random_monomial(rng, names), _random_monomial(rng, names)))
        got = implied_ranges(conds, ranges)
        for point in itertools.product(*(range(ranges[n][0], ranges[n][1] + 1) for n in names)):
            env = dict(zip(names, point))
            if all(X.evaluate(c, env) for c in conds):
                assert all(got[n][0] <= env[n] <= got[n][1] for n in names), (conds, ranges, got, env)


def test_wheel_routed_sbhd_problem_has_batch_one(real_kernel):
    """The README kernel, SBHD: the kernel's own domain keeps batch 1..4096; routed through
    codegen.py's fmha_v3_bwd it is batch = 1, reported as implied."""
    from addrsim.loader.listing import load_source
    src = load_source(real_kernel, None)
    k, ms = src.co.kernels[0], load_models()
    own = build_problem(ms, k, "sbhd", Sym("tid_x", 32, "lane"), {}, src.co.arch)
    routed = build_problem(ms, k, "sbhd", Sym("tid_x", 32, "lane"), {}, src.co.arch, routed="fmha_v3_bwd")
    assert own.bounds["batch"] == (1, 4096) and own.implied() == {}
    assert routed.bounds["batch"] == (1, 1) and routed.implied() == {"batch": (1, 1)}
    assert routed.declared["batch"] == (1, 4096)
    bshd = build_problem(ms, k, "bshd", Sym("tid_x", 32, "lane"), {}, src.co.arch, routed="fmha_v3_bwd")
    assert bshd.bounds["batch"] == (1, 4096)


def test_a_group_problem_bounds_the_packed_total_by_its_sequences(tmp_path):
    """Group mode (examples/group_lse_seqstart.s, the model's seqstart_q: from 0 to total_q in
    batch steps of 1..seqlen_q): batch <= total_q <= batch*seqlen_q is stated as an implied
    bound.  Without it total_q ranged to 2**24 in a box of batch 1, and a head offset
    head_id*total_q*hdim*2 was bounded by no interval.  It holds on every array the spec
    allows (telescoping), and excludes a total past batch*seqlen_q."""
    import random
    from addrsim.loader.listing import load_source
    from test_examples import MODEL, build
    src = load_source(build("group_lse_seqstart", tmp_path), None)
    prob = build_problem(load_models([MODEL]), src.co.kernels[0], "bhsd", Sym("tid_x", 32, "lane"), {}, src.co.arch)
    mine = [a for a in prob.assumptions if "(implied)" in a.source and "total_q" in a.text]
    assert sorted(a.text for a in mine) == ["total_q <= batch * seqlen_q", "total_q >= batch * 1"]
    assert all(a.layer == "bounds" and "arrays.seqstart_q" in a.source for a in mine)
    rng = random.Random(7)
    for _ in range(200):
        batch, seqlen = rng.randint(1, 64), rng.randint(1, 4096)
        total = sum(rng.randint(1, seqlen) for _ in range(batch))
        env = {"batch": batch, "seqlen_q": seqlen, "total_q": total}
        assert all(X.evaluate(a.expr, env) for a in mine)
    assert not X.evaluate(mine[0].expr if "<=" in mine[0].text else mine[1].expr,
                          {"batch": 2, "seqlen_q": 10, "total_q": 21})
