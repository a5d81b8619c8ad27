"""Offsets in the engineer's terms (issue 40, item 3): a comparison the domain's ranges decide
over the integers is folded before display, one they do not decide stays; "same offset" is the
solver's answer in hardware arithmetic, not a comparison of printed forms."""
from addrsim.backends.sympy_text import to_sympy_nowrap
from addrsim.ir import expr as X
from addrsim.prove.simplify import same_offset, under_domain

N = X.Sym("nhead_q", 32, "shape")
S = X.Sym("seqlen_q", 32, "shape")
B = X.Sym("batch_id", 32, "grid")
RANGES = {"nhead_q": (1, 128), "seqlen_q": (1, 1 << 20), "batch_id": (0, 4095)}


def test_a_guard_never_true_in_the_domain_is_folded_and_its_text_has_no_piecewise():
    """ite(256*nhead_q*seqlen_q < 256, a, b): nhead_q and seqlen_q are at least 1, so over the
    integers the guard is false and the offset is b; without the fold the text is a Piecewise."""
    prod = X.mul(X.mul(X.const(256, 32), N), S)
    e = X.ite(X.ult(prod, X.const(256, 32)), X.mul(B, N), X.mul(B, S))
    assert "Piecewise" in str(to_sympy_nowrap(e))
    got = under_domain(e, RANGES)
    assert str(to_sympy_nowrap(got)) == "batch_id*seqlen_q"


def test_a_guard_the_domain_does_not_decide_stays():
    e = X.ite(X.ult(S, X.const(64, 32)), X.mul(B, N), X.mul(B, S))
    assert "Piecewise" in str(to_sympy_nowrap(under_domain(e, RANGES)))


def test_same_offset_is_decided_in_the_domain_not_by_the_printed_form():
    """(batch_id*seqlen_q*4) and ((batch_id*seqlen_q) << 2): the same bytes; batch_id*seqlen_q*4
    and batch_id*(seqlen_q - 1)*4: not the same (seqlen_q >= 1, batch_id may be 1)."""
    conds = [X.ule(X.const(1, 32), S), X.ule(S, X.const(1 << 20, 32)), X.ule(B, X.const(4095, 32))]
    a = X.mul(X.mul(B, S), X.const(4, 32))
    b = X.shl(X.mul(B, S), X.const(2, 32))
    c = X.mul(X.mul(B, X.sub(S, X.const(1, 32))), X.const(4, 32))
    assert same_offset(a, b, conds, RANGES) is True
    assert same_offset(a, c, conds, RANGES) is False


def test_a_guard_between_two_shape_terms_is_decided_by_its_difference():
    """ite(256*nhead_q*seqlen_q < 256*nhead_q, ...): over the integers the difference is
    256*nhead_q*(seqlen_q - 1) >= 0 (seqlen_q >= 1), so the guard is false (a user's patch that
    detects the layout with a compare-and-select, in BSHD)."""
    k256 = X.const(256, 32)
    e = X.ite(X.ult(X.mul(X.mul(k256, N), S), X.mul(k256, N)), X.mul(B, N), X.mul(B, S))
    assert str(to_sympy_nowrap(under_domain(e, RANGES))) == "batch_id*seqlen_q"


def test_arms_that_agree_where_the_domain_takes_them_are_merged():
    """The README kernel's LSE under pattern B, in SBHD: batch <= 1 ? 4*batch_id*nhead_q :
    4*batch_id*nhead_q*seqlen_q.  batch_id < batch, so with batch 1 both arms are 0: the
    offset is the second arm everywhere.  Arms that differ where the guard holds (batch_id + 1)
    keep the Piecewise, and so does a guard with no domain to decide it."""
    from addrsim.prove.simplify import merged_arms
    bt = X.Sym("batch", 32, "shape")
    conds = [X.ult(B, bt), X.ule(X.const(1, 32), bt), X.ule(bt, X.const(4096, 32))]
    ranges = dict(RANGES, batch=(1, 4096))
    four = X.const(4, 32)
    short, full = X.mul(X.mul(four, B), N), X.mul(X.mul(X.mul(four, B), N), S)
    guard = X.ule(bt, X.const(1, 32))
    assert str(to_sympy_nowrap(merged_arms(X.ite(guard, short, full), conds, ranges))) == "4*batch_id*nhead_q*seqlen_q"
    assert str(to_sympy_nowrap(merged_arms(X.ite(X.not_(guard), full, short), conds, ranges))) == \
        "4*batch_id*nhead_q*seqlen_q"
    wrong = X.ite(guard, X.add(short, X.const(1, 32)), full)
    assert "Piecewise" in str(to_sympy_nowrap(merged_arms(wrong, conds, ranges)))
    assert "Piecewise" in str(to_sympy_nowrap(merged_arms(X.ite(guard, short, full), [], ranges)))


def test_a_piecewise_condition_reads_as_the_relation_it_names():
    """ult(a, b) as a Piecewise condition reads a < b, its negation (xor with 1) a >= b: no
    Eq(xor(ult(...), 1), 1) in text."""
    e = X.ite(X.xor(X.ult(N, S), X.const(1, 1)), B, X.mul(B, S))
    text = str(to_sympy_nowrap(e))
    assert "nhead_q >= seqlen_q" in text and "xor" not in text and "Eq(" not in text
