"""proofs/: every claim of every pattern module gets its expected verdict, every counterexample
replays in plain Python (both sides differ, the precondition that was dropped is really
violated, the shape is the expected minimal one), and altered statements are no longer proved
(mutation tests: the suite can fail)."""
import dataclasses
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:            # proofs/ is a directory of the repository, not an installed package
    sys.path.insert(0, ROOT)
from proofs import all_claims, pattern_a_abi as A, pattern_b_sbhd_test as B
from proofs import pattern_c_dq_from_lsed as C, pattern_d_dq_batch_term as D
from proofs._claims import Claim, Dom, check, eq, parse_expr, replay

CLAIMS = all_claims()
TIMEOUT_MS = 20_000


_RESULTS = {}


def _result(claim: Claim):
    """check() once per claim of CLAIMS (the parametrized test and the mutation tests share it)."""
    if any(claim is c for c in CLAIMS):
        if claim.name not in _RESULTS:
            _RESULTS[claim.name] = check(claim, timeout_ms=TIMEOUT_MS)
        return _RESULTS[claim.name]
    return check(claim, timeout_ms=TIMEOUT_MS)


def _proved(claim: Claim) -> bool:
    return _result(claim).verdict == "proved"


def test_claims_well_formed():
    names = [c.name for c in CLAIMS]
    assert len(names) == len(set(names)), "claim names must be unique"
    assert {c.pattern for c in CLAIMS} == {"A", "B", "C", "D"}
    for c in CLAIMS:
        assert c.expect in ("proved", "counterexample"), c.name
        assert c.statement and c.source, c.name
        if c.expect == "counterexample":
            assert c.expect_shape, f"{c.name}: a counterexample claim names its minimal shape"


@pytest.mark.slow
@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.name)
def test_claim(claim):
    r = _result(claim)
    assert r.verdict == claim.expect, (r.verdict, r.reason, r.model)
    if r.verdict == "proved":
        # the precondition is satisfiable: a witness where it holds and both sides agree
        lhs, rhs, dom, pre = replay(claim, r.model)
        assert dom and pre and lhs == rhs
        return
    lhs, rhs, dom, pre = replay(claim, r.model)
    assert dom, "the model lies inside the domain"
    assert pre, "the model satisfies the precondition the claim keeps"
    assert lhs != rhs and (lhs, rhs) == (r.lhs, r.rhs)
    if claim.dropped is not None:
        assert not claim.dropped(dict(r.model)), "the counterexample violates the dropped precondition"
    assert r.minimal
    assert {k: r.model[k] for k in claim.expect_shape} == dict(claim.expect_shape)


def test_unknown_is_never_proved():
    """A solver timeout gives "unknown" (x^3 + y^3 = z^3 has no positive solution, but Z3 cannot
    show it in a millisecond)."""
    big = Dom(1, 2 ** 40)
    cube = lambda x: x * x * x
    c = Claim("fermat3", "T", "x^3 + y^3 == z^3 is false", {"x": big, "y": big, "z": big},
              lhs=lambda v: eq(cube(v["x"]) + cube(v["y"]), cube(v["z"])), rhs=lambda v: False, source="test")
    assert check(c, timeout_ms=1).verdict == "unknown"


def test_vacuous_precondition_is_not_proved():
    c = _claim(A, "A.32bit")
    assert check(dataclasses.replace(c, precondition=lambda v: A.all_(A.p_arg_fits(v), v["batch"] > 4096))).verdict == "vacuous"


# Both sides of some counterexamples recomputed here from the model, with formulas written
# independently of proofs/ (bytes).
def _u32(x):
    return x & 0xFFFFFFFF


INDEPENDENT = {
    # pattern A in s_mul_i32 vs exact, unpadded LSE rows
    "A.32bit.wraps-unpadded": lambda m: (
        _u32(_u32(_u32(m["batch_id"] * m["nhead_q"]) * m["seqlen_q"] * 4) + _u32(m["head_id"] * m["seqlen_q"] * 4)),
        (m["batch_id"] * m["nhead_q"] + m["head_id"]) * m["seqlen_q"] * 4),
    # SBHD, bf16, hdim 128: BAs = nhead*256, Seqs = batch*nhead*256; shortcut (batch_id*BAs) >> 6
    "D.a32.nobranch.sbhd": lambda m: (m["batch_id"] * m["nhead_q"] * 256 * 2,
                                      m["batch_id"] * m["nhead_q"] * m["seqlen_q"] * 128 * 4),
    # BHSD, hdim 128: u32(BAs) = u32(nhead*seqlen*256) < 256 -> SBHD branch with nhead 0
    "B.u32.term.bhsd.wraps": lambda m: (
        (m["batch_id"] * (_u32(m["nhead_q"] * m["seqlen_q"] * 256) // 256) * m["seqlen_q"] * 4)
        if _u32(m["nhead_q"] * m["seqlen_q"] * 256) < 256 else _u32(m["batch_id"] * _u32(m["nhead_q"] * m["seqlen_q"] * 256)) >> 6,
        m["batch_id"] * m["nhead_q"] * m["seqlen_q"] * 4),
    # 16-bit accumulator, pitch 128: Hdim*LseD_base vs (b*h + hd)*ceil16(s)*128*2
    "C.a16.naive": lambda m: (128 * (m["batch_id"] * m["nhead_q"] + m["head_id"]) * m["seqlen_q"] * 4,
                              (m["batch_id"] * m["nhead_q"] + m["head_id"]) * (-(-m["seqlen_q"] // 16) * 16) * 128 * 2),
    # head-major [h, b, s, d] view, hdim 128: the shortcut sees BAs = seqlen*256
    "B.term.hbsd_head_major": lambda m: ((m["batch_id"] * m["seqlen_q"] * 256) >> 6,
                                         m["batch_id"] * m["nhead_q"] * m["seqlen_q"] * 4),
}


@pytest.mark.parametrize("name", sorted(INDEPENDENT))
def test_counterexample_recomputed_independently(name):
    (c,) = [c for c in CLAIMS if c.name == name]
    r = _result(c)
    assert r.verdict == "counterexample"
    kernel, correct = INDEPENDENT[name](r.model)
    assert (kernel, correct) == (r.lhs, r.rhs) and kernel != correct


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "batch.real", "f(batch)", "batch ** 2",
                                  "-batch", "batch if batch else 0", "nhead_q*(seqlen_q", "1.5*batch", "unknown_name"])
def test_stride_parser_rejects(text):
    with pytest.raises((ValueError, SyntaxError)):
        parse_expr(text, ["batch", "nhead_q", "seqlen_q"])


def test_stride_parser_accepts():
    f = parse_expr("nhead_q*(seqlen_q + 64) / 2", ["nhead_q", "seqlen_q"])
    assert f({"nhead_q": 3, "seqlen_q": 2}) == 99


def _claim(mod, name):
    (c,) = [c for c in mod.CLAIMS if c.name == name]
    return c


# ---- mutation tests: an altered statement is no longer proved

def test_mutation_a_drop_no_wrap_precondition():
    c = _claim(A, "A.32bit")
    assert _proved(c)
    assert not _proved(dataclasses.replace(c, precondition=A.p_arg_fits))


def test_mutation_a_head_term_from_seqlen():
    """The head term written as head_id*seqlen_q*4 (a layout shortcut) instead of head_id*Hs_lsed."""
    c = _claim(A, "A.formula.exact")
    assert not _proved(dataclasses.replace(
        c, lhs=lambda v: v["batch_id"] * v["nhead_q"] * A.hs_lsed(v) + v["head_id"] * v["seqlen_q"] * 4))


def test_mutation_a_64bit_done_in_32():
    c = _claim(A, "A.64bit")
    assert not _proved(dataclasses.replace(c, lhs=A.abi_32))


def test_mutation_b_shift_5():
    """(batch_id*BAs) >> 5 instead of >> 6 (hdim 128): no longer proved for BHSD."""
    assert _proved(_claim(B, "B.term.bhsd"))
    assert not _proved(B.term_claim(B.FILE["bhsd"], shift=5, cases=B.hdim_cases((128,))))


def test_mutation_b_drop_branch():
    """The shortcut alone (no `BAs < Seqs` branch): no longer proved for SBHD."""
    assert _proved(_claim(B, "B.term.sbhd"))
    assert not _proved(B.term_claim(B.FILE["sbhd"], branch=False))


def test_mutation_b_detect_le():
    """`BAs <= Seqs` instead of `BAs < Seqs`: SBHD with batch 1 is detected too."""
    assert not _proved(B.detect_claim(B.FILE["sbhd"], cmp="le"))


def test_mutation_b_drop_no_wrap_precondition():
    c = _claim(B, "B.u32.term.bhsd.no-wrap")
    assert _proved(c)
    assert not _proved(dataclasses.replace(c, precondition=lambda v: True))


def test_mutation_b_sbhd_term_from_head_stride():
    """Rebuilding nhead_q as Seqs/(hdim*e) (wrong stride) instead of BAs/(hdim*e)."""
    lay = B.FILE["sbhd"]
    c = _claim(B, "B.term.sbhd")

    def wrong(v):
        st = B.strides(lay, v)
        return B.ite(B.detect(st), B.sbhd_term(v, st["Seqs"]), B.shortcut(v, st["BAs"]))
    assert not _proved(dataclasses.replace(c, lhs=wrong))


def test_mutation_c_acc4_for_16bit_accumulator():
    """The 16-bit accumulator's offset computed with 4-byte elements: (Hdim*LseD_base)>>1 no longer matches."""
    c = _claim(C, "C.a16.half")
    assert _proved(c)
    assert not _proved(dataclasses.replace(c, rhs=lambda v: C.off_a16(v, acc=4)))


def test_mutation_c_drop_seqlen16():
    c = _claim(C, "C.a16.half")
    assert not _proved(dataclasses.replace(c, precondition=C.p_unpadded))


def test_mutation_c_a32_drop_hdim_precondition():
    c = _claim(C, "C.a32.exact")
    assert _proved(c)
    assert not _proved(dataclasses.replace(c, precondition=C.p_unpadded))


def test_mutation_c_a16_no_halving():
    """Hdim*LseD_base used as the 16-bit offset without the >> 1."""
    c = _claim(C, "C.a16.half")
    assert not _proved(dataclasses.replace(c, lhs=lambda v: C.hdim_times_base(v, "dpad")))


def test_mutation_c_a16_u32_weaker_precondition():
    """Only the true offsets fit 32 bits: the doubled intermediate may still wrap."""
    c = _claim(C, "C.a16.u32")
    assert _proved(c)
    assert not _proved(dataclasses.replace(
        c, precondition=lambda v: C.all_(C.p_unpadded(v), C.p_seq16(v), C.p_a16_no_wrap(v))))


def test_mutation_d_drop_branch():
    assert _proved(_claim(D, "D.a32.branch.sbhd"))
    assert not _proved(D.a32_claim(D.FILE["sbhd"], branch=False))


def test_mutation_d_wrong_acc():
    """The batch term scaled for a 2-byte accumulator while the accumulator is fp32."""
    c = _claim(D, "D.a32.branch.bhsd")
    lay = D.FILE["bhsd"]
    assert not _proved(dataclasses.replace(
        c, lhs=lambda v: D.dq_term(lay, v, qhdim=v["hdim"], khdim=v["hdim"], acc=2)))


def test_mutation_d_a16_drop_hdim_precondition():
    c = _claim(D, "D.a16.branch.sbhd")
    assert _proved(c)
    assert not _proved(dataclasses.replace(c, precondition=D.p_seq16))
