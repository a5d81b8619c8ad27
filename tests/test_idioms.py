"""The exhaustive proof of float-reciprocal division (addrsim.prove.idioms)."""
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Sym
from addrsim.prove.idioms import exact_divisions

C = lambda v: Const(v, 32)  # noqa: E731
D, H = Sym("ratio", 32), Sym("head_id", 32, "id")
RANGES = {"ratio": (0, 256), "head_id": (0, 255)}


def llvm_udiv(x, d, corrections=2, scale=0x4F7FFFFE):
    """LLVM's AMDGPU expansion of a 32-bit unsigned division, as the aiter kernels emit it."""
    r = X.fop("u32_from_f32", X.fop("f32_mul", C(scale), X.fop("f32_rcp", X.fop("f32_from_u32", d))))
    r = X.add(r, X.mulhu(r, X.mul(X.sub(C(0), d), r)))          # one Newton step
    q = X.mulhu(x, r)
    rem = X.sub(x, X.mul(q, d))
    for _ in range(corrections):
        c = X.ule(d, rem)
        q, rem = X.ite(c, X.add(q, C(1)), q), X.ite(c, X.sub(rem, d), rem)
    return q


def test_llvm_expansion_is_proved_and_replaced_by_udiv():
    addr = X.add(X.mul(llvm_udiv(H, D), Sym("Hs_k", 32)), Sym("tid_x", 32, "lane"))
    out, proofs, left = exact_divisions(addr, RANGES)
    assert left == [] and len(proofs) == 1
    p = proofs[0]
    assert (p.dividend, p.divisor) == ("head_id", "ratio")
    assert p.points == 256 * 256 and p.variants == 3          # ratio 0 excluded; rcp -1/0/+1 ULP
    # what is left is exact integer division, guarded against a zero divisor
    assert any(isinstance(n, X.Op) and n.op == "udiv" for n in X.walk(out))
    for h, d in ((0, 1), (255, 1), (255, 7), (17, 256), (200, 3)):
        env = {"head_id": h, "ratio": d, "Hs_k": 1000, "tid_x": 5}
        assert X.evaluate(out, env) == (h // d) * 1000 + 5


def test_expansion_without_corrections_is_not_a_division():
    """Without the two compare-and-correct steps the estimate is off by one for some inputs:
    nothing is replaced and the reason says so."""
    out, proofs, left = exact_divisions(llvm_udiv(H, D, corrections=0), RANGES)
    assert proofs == [] and left and "not udiv" in left[0]


def test_one_correction_step_suffices_on_the_bounded_domain():
    """Over head_id < 256 and ratio <= 256 the Newton step leaves the estimate at most one
    below the quotient, so one correction is exact there (checked exhaustively, every rcp
    within 1 ULP); the proof is about the bounded domain, not all 32-bit inputs."""
    out, proofs, left = exact_divisions(llvm_udiv(H, D, corrections=1), RANGES)
    assert left == [] and len(proofs) == 1


def test_large_domain_is_not_checked():
    out, proofs, left = exact_divisions(llvm_udiv(H, D), {"ratio": (0, 1 << 16), "head_id": (0, 1 << 16)})
    assert proofs == [] and "not checked" in left[0]


BAS, HD = Sym("BAs", 32), Sym("head_dim", 32)
WIDE = {"BAs": (0, (1 << 32) - 1), "head_dim": (72, 120)}


def test_wide_dividend_is_proved_per_divisor():
    """gen-a16-pddv kernels divide Q's 32-bit batch stride by the head dim (BAs / head_dim):
    2**32 dividends are too many to enumerate, so each of the 49 divisors (and each rcp within
    1 ULP) is proved for every dividend over the exact integer encoding."""
    out, proofs, left = exact_divisions(llvm_udiv(BAS, HD), WIDE)
    assert left == [] and len(proofs) == 1
    assert (proofs[0].dividend, proofs[0].divisor) == ("BAs", "head_dim")
    assert proofs[0].points == 49 * 3
    for x, d in ((0, 72), ((1 << 32) - 1, 72), ((1 << 32) - 1, 120), (123456789, 97)):
        assert X.evaluate(out, {"BAs": x, "head_dim": d}) == x // d


def test_wide_dividend_without_corrections_is_not_a_division():
    out, proofs, left = exact_divisions(llvm_udiv(BAS, HD, corrections=0), WIDE)
    assert proofs == [] and left and "not udiv" in left[0]


def test_a_division_guard_the_conditions_rule_out_is_dropped():
    """The ``d == 0`` guard that keeps a proved division's binary32 term goes where the
    predicate shows d != 0 (the GQA ratio under the traits layer), and stays elsewhere."""
    from addrsim.prove.idioms import drop_zero_guards
    d, x = Sym("d", 32), Sym("x", 32)
    flt = X.fop("u32_from_f32", X.fop("f32_rcp", X.fop("f32_from_u32", d)))
    e = X.add(X.ite(X.eq(d, Const(0, 32)), flt, X.udiv(x, d)), Const(1, 32))
    assert X.digest(drop_zero_guards(e, lambda _: True)) == X.digest(X.add(X.udiv(x, d), Const(1, 32)))
    assert drop_zero_guards(e, lambda _: False) is e


def test_a_stored_division_answer_is_the_proof_again_and_only_for_the_same_term_and_ranges(monkeypatch, tmp_path):
    """Each term's answer is kept in the query cache by its digest and its symbols' ranges: read
    back, it gives the same replacement and proof without checking the points again; a term
    without its corrections, or the same term over wider ranges, is decided by itself."""
    import addrsim.prove.idioms as I
    from addrsim.prove.store import open_store
    addr = X.add(X.mul(llvm_udiv(H, D), Sym("Hs_k", 32)), Sym("tid_x", 32, "lane"))
    first = exact_divisions(addr, RANGES, store=open_store(tmp_path))
    store = open_store(tmp_path)                      # another process: read from the file
    assert store.rejected == 0 and any(k[0] == "division" for k in store)
    real = I._try_division
    monkeypatch.setattr(I, "_try_division", lambda *a: (_ for _ in ()).throw(AssertionError("checked again")))
    again = exact_divisions(addr, RANGES, store=store)
    assert again[0] is first[0] or X.digest(again[0]) == X.digest(first[0])
    assert again[1] == first[1] and again[2] == first[2]
    calls = []
    monkeypatch.setattr(I, "_try_division", lambda *a: calls.append(1) or real(*a))
    wrong = exact_divisions(llvm_udiv(H, D, corrections=0), RANGES, store=store)
    assert wrong[1] == [] and calls
    calls.clear()
    assert exact_divisions(addr, {"ratio": (0, 1 << 16), "head_id": (0, 1 << 16)}, store=store)[1] == [] and calls
