"""Values read as signed: causal bottom-right rows (addrsim.backends.z3_int.signed_reads).

Specification: a causal bottom-right kernel computes the first q row of kv tile ``kv`` as
``max(0, 256*kv - (seqlen_k - seqlen_q))`` in 32-bit scalar arithmetic; ``seqlen_k - seqlen_q``
is negative whenever the q sequence is the longer, and the kernel reads it only through a
signed comparison and a clamp at zero.  The integer encoding gives such a difference its exact
(possibly negative) value, without ``mod``, so no wrap site stands for it; a difference read
unsigned (zero-extended into an address) keeps its ``mod`` and its wrap is found; one whose
exact value may leave the signed range keeps its ``mod`` too.  Group mode's array facts
(entries in order, steps at most seqlen) bound the difference of two reads.
"""
import random

import pytest
import z3

from addrsim.backends.z3_int import IntEncoder, signed_reads
from addrsim.ir import expr as X
from addrsim.ir import poly as P
from addrsim.ir.expr import Const, Sym
from addrsim.prove.query import Query, _quick

SK, SQ = Sym("seqlen_k", 32, "shape"), Sym("seqlen_q", 32, "shape")
KV = Sym("kv_tile", 32, "id")
RANGES = {"seqlen_k": (1, 1 << 24), "seqlen_q": (1, 1 << 24), "kv_tile": (0, 1 << 16)}
C32 = lambda v: Const(v, 32)      # noqa: E731
C64 = lambda v: Const(v, 64)      # noqa: E731


def first_row(clamp=True):
    """The kernel's first q row of the kv tile: max(0, 256*kv - (seqlen_k - seqlen_q)), 32-bit."""
    y = X.sub(X.mul(KV, C32(256)), X.sub(SK, SQ))
    return X.ite(X.sle(C32(0), y), y, C32(0)) if clamp else y


def row_offset(row):
    """The row's byte offset, 64-bit (row * 512: hdim 256, bf16)."""
    return X.mul(X.zext(row, 64), C64(512))


def expected_offset():
    """The same row in exact 64-bit arithmetic: (256*kv + seqlen_q - seqlen_k) * 512 when that
    is non-negative, else 0."""
    kv, sk, sq = (X.zext(v, 64) for v in (KV, SK, SQ))
    top = X.add(X.mul(kv, C64(256)), sq)
    return X.ite(X.ule(sk, top), X.mul(X.sub(top, sk), C64(512)), C64(0))


def grid():
    """kv tiles start inside the k sequence: 256*kv < seqlen_k."""
    return [X.ult(X.mul(X.zext(KV, 64), C64(256)), X.zext(SK, 64))]


def test_a_clamped_bottom_right_row_is_read_signed_and_proved_without_a_wrap():
    claim = X.eq(row_offset(first_row()), expected_offset())
    q = Query(grid(), claim, RANGES, rlimit=10 ** 7)
    assert len(q.signed_ok) == 2                      # seqlen_k - seqlen_q and 256*kv - that
    q.enc.enc(q.goal)
    assert len(q.enc.signed_exact) == 2
    assert all(w == 64 for _, _, w in q.enc.wrapped)    # only the expected side's guarded 64-bit sub
    assert _quick(q) == "proved"


def test_the_row_without_its_clamp_is_read_unsigned_and_wraps():
    """The wrong kernel: the row zero-extended without the clamp (a negative row becomes a
    row near 2**32): the difference keeps its mod, and the counterexample breaks the claim."""
    claim = X.eq(row_offset(first_row(clamp=False)), expected_offset())
    q = Query(grid(), claim, RANGES, rlimit=10 ** 7)
    q.enc.enc(q.goal)
    assert any(w == 32 for _, _, w in q.enc.wrapped)
    got = _quick(q)
    assert isinstance(got, dict)
    assert X.evaluate(claim, got) == 0 and 256 * got["kv_tile"] + got["seqlen_q"] < got["seqlen_k"]


def test_a_signed_read_whose_value_may_leave_the_signed_range_keeps_its_mod():
    """seqlen_k - seqlen_q with 32-bit lengths up to 2**32 - 1: the kernel's signed test
    "seqlen_k >= seqlen_q" misreads a difference past 2**31; it is refuted, not proved."""
    wide = {"seqlen_k": (1, (1 << 32) - 1), "seqlen_q": (1, (1 << 32) - 1), "kv_tile": (0, 0)}
    claim = X.eq(X.sle(C32(0), X.sub(SK, SQ)), X.ule(SQ, SK))
    q = Query([], claim, wide, rlimit=10 ** 7)
    q.enc.enc(q.goal)
    assert not q.enc.signed_exact and any(w == 32 for _, _, w in q.enc.wrapped)
    got = _quick(q)
    assert isinstance(got, dict) and X.evaluate(claim, got) == 0


@pytest.mark.parametrize("seed", range(4))
def test_the_encoding_gives_the_claim_its_machine_value_at_every_point(seed):
    """Both sides of the bottom-right claim (with the signed nodes exact) take their machine
    values at random points, the q sequence longer or shorter than the k sequence."""
    rnd = random.Random(seed)
    conds = grid()
    for e in (row_offset(first_row()), expected_offset(), X.sle(C32(5), X.sub(SK, SQ))):
        enc = IntEncoder(RANGES, facts_from=conds, signed_ok=signed_reads(conds + [e]))
        for c in conds:
            enc.holds(c)
        t = enc.enc(e)
        for _ in range(20):
            sk = rnd.randrange(1, 1 << 24)
            env = {"seqlen_k": sk, "seqlen_q": rnd.randrange(1, 1 << 24), "kv_tile": rnd.randrange(0, (sk + 255) // 256)}
            s = z3.Solver()
            s.add(*enc.side, *[enc.vars[k] == v for k, v in env.items() if k in enc.vars])
            s.add(t != X.evaluate(e, env))
            assert s.check() == z3.unsat, env


def test_which_readers_read_signed():
    d = X.sub(SK, SQ)
    guarded = X.ite(X.sle(C32(0), d), d, C32(0))
    assert id(d) in signed_reads([X.eq(X.zext(guarded, 64), C64(1))])
    assert id(d) in signed_reads([X.eq(X.zext(X.ite(X.slt(d, C32(0)), C32(0), d), 64), C64(1))])
    assert id(d) in signed_reads([X.slt(d, C32(7)), X.eq(X.add(d, SK), C32(3))])
    assert id(d) not in signed_reads([X.eq(X.zext(d, 64), C64(1))])                      # zext: unsigned
    assert id(d) not in signed_reads([X.eq(X.ite(X.ult(SQ, SK), d, C32(0)), C32(1))])    # not its sign
    assert id(d) not in signed_reads([X.eq(X.ite(X.sle(C32(0), d), C32(0), d), C32(1))]) # the negative arm
    assert id(d) not in signed_reads([X.slt(d, C32(7)), X.ult(d, C32(9))])
    assert id(d) not in signed_reads([d])                                                # a root


# ---------------------------------------------------------------- group mode's array facts

ARR = Sym("seqstart_q", 64, "array")
BID = Sym("batch_id", 32, "id")
LEN_Q = Sym("max_seqlen_q", 64, "shape")


def _reads():
    """seqstart_q[batch_id] and seqstart_q[batch_id + 1], once with a 32-bit offset (the
    kernel's, folded) and once with a 64-bit one (the facts')."""
    o32 = X.zext(X.mul(BID, C32(4)), 64)
    o64 = X.mul(X.zext(BID, 64), C64(4))
    return (X.select(ARR, o32), X.select(ARR, X.add(o32, C64(4))),
            X.select(ARR, o64), X.select(ARR, X.add(o64, C64(4))))


def _facts(lo, hi, step=True):
    """The order fact of the pair (a disjunction over the offsets' order) and its step."""
    oa, ob = lo.args[1], hi.args[1]
    va, vb = X.zext(lo, 64), X.zext(hi, 64)
    out = [X.bor(X.band(X.ule(oa, ob), X.ule(va, vb)), X.band(X.ult(ob, oa), X.ule(vb, va)))]
    if step:
        out.append(X.bor(X.bnot(X.eq(ob, X.add(oa, C64(4)))), X.ule(vb, X.add(va, LEN_Q))))
    return out


def test_the_length_of_a_sequence_is_exact_by_the_array_facts():
    """The facts speak of the 64-bit offsets, the kernel reads at 32-bit ones: the same
    elements (equal offset polynomials), so seqstart_q[b+1] - seqstart_q[b] in 32 bits is in
    [0, max_seqlen_q] and gets no mod."""
    a32, b32, a64, b64 = _reads()
    ranges = {"batch_id": (0, 1023), "max_seqlen_q": (1, 1 << 20)}
    length = X.sub(b32, a32)
    enc = IntEncoder(ranges, facts_from=_facts(a64, b64))
    enc.enc(length)
    assert not enc.wrapped
    assert enc.interval(length)[0] == 0
    assert enc.facts.bound_by_facts(enc.poly(length)) == (0, 1 << 20)    # the step fact: at most max_seqlen_q
    bare = IntEncoder(ranges, facts_from=_facts(a64, b64, step=False)[:0])
    bare.enc(length)
    assert bare.wrapped                        # without the facts the difference may wrap


def test_an_order_fact_is_learnt_only_where_its_other_case_cannot_hold():
    """or(A, B) teaches A when B is false at every point (offsets 4 apart: the second case,
    offset b below offset a, never holds); offsets of unknown order teach nothing."""
    a32, b32, a64, b64 = _reads()
    ranges = {"batch_id": (0, 1023), "max_seqlen_q": (1, 1 << 20)}
    enc = IntEncoder(ranges, facts_from=_facts(a64, b64, step=False))
    enc.enc(X.sub(b64, a64))
    d = P.add(enc.poly(b64), enc.poly(a64), -1)
    assert enc.facts.bound_by_facts(d)[0] == 0
    other = X.select(ARR, X.zext(X.mul(Sym("k", 32, "id"), C32(4)), 64))
    enc2 = IntEncoder({**ranges, "k": (0, 1023)}, facts_from=_facts(a64, other, step=False))
    enc2.enc(X.sub(other, a64))
    d2 = P.add(enc2.poly(other), enc2.poly(a64), -1)
    assert enc2.facts.bound_by_facts(d2)[0] < 0


def test_bounds_by_facts_hold_at_random_points():
    """Facts.bound_by_facts on random linear facts and polynomials: every point that meets
    the facts and the intervals lies inside the bound."""
    rnd = random.Random(7)
    names = ["a", "b", "c", "d"]
    for _ in range(40):
        F = P.Facts()
        for n in names:
            F.set_interval(n, 0, 20)
        facts = []
        for _ in range(3):
            g = {(( rnd.choice(names), 1),): rnd.choice([1, -1]) for _ in range(2)}
            g[()] = rnd.randrange(-5, 10)
            facts.append(g)
            F.assume_nonneg(g)
        p = {((n, 1),): rnd.choice([1, -1, 2]) for n in rnd.sample(names, 3)}
        lo, hi = F.bound_by_facts(p)
        for _ in range(300):
            env = {n: rnd.randrange(0, 21) for n in names}
            val = lambda poly: sum(c * (env[m[0][0]] if m else 1) for m, c in poly.items())   # noqa: E731
            if all(val(g) >= 0 for g in facts):
                assert lo <= val(p) <= hi, (p, facts, env)


def test_a_signed_node_read_unsigned_is_an_error_not_a_wrong_encoding():
    """signed_ok computed over other roots than those encoded: the encoder refuses a reader
    that would read the exact negative value as its machine value."""
    d = X.sub(SK, SQ)
    enc = IntEncoder(RANGES, signed_ok=frozenset({id(d)}))
    roots = [X.slt(d, C32(0)), X.zext(d, 64)]       # kept alive: the encoder's memo is by id
    enc.enc(roots[0])
    assert enc.signed_exact == {id(d)}
    with pytest.raises(AssertionError):
        enc.enc(roots[1])
    with pytest.raises(AssertionError):
        enc.enc(d)


def test_a_query_is_freed_by_reference_counting_alone():
    """No reference cycle through the encoders' lazy signed reads (an encoder that held
    ``lambda: query.signed_ok`` kept every query, and its Z3 contexts, alive until the cyclic
    collector ran: a scan worker grew to 3.98 GB on the wheel)."""
    import gc
    import weakref
    # no difference that may be negative: the encoders never compute the signed reads
    claim = X.eq(X.zext(X.mul(KV, C32(1 << 12)), 64), X.mul(X.zext(KV, 64), C64(1 << 12)))
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        q = Query(grid(), claim, RANGES, rlimit=10 ** 7)
        assert q.solve(rlimit=10 ** 6)[0] == "proved"
        ref = weakref.ref(q)
        del q
        assert ref() is None
    finally:
        if enabled:
            gc.enable()
