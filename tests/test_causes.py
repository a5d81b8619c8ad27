"""Findings by root cause (addrsim.report.causes), the shape-only wrap boundary
(addrsim.prove.wraps) and the text report built on them, on hand-made reports.

Specification: checks that fail through one wrap site are one root cause, listing each
check; its smallest shape is the least in the order batch, nhead_q, seqlen_q; a host cast
is one root cause per argument whatever the layout; a wrong formula on LSE and D is one
root cause with fix patterns A/B; the text report prints one block per root cause and a
summary line, and checks left undecided for the same reason share one line.
"""
import io

import pytest
import sympy

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Sym
from addrsim.prove.wraps import GQA_EXACT, _formula, last_workgroup, wrap_sites
from addrsim.report.causes import formula_boundary, root_causes, summary_line
from addrsim.report.text import print_table

SHAPE = {"batch": 2, "nhead_q": 9, "nhead_k": 1, "seqlen_q": 986944, "seqlen_k": 986944, "hdim_q": 128,
         "hdim_v": 128}


def _site(pc, instruction="s_add_u32 s55, s61, s62", boundary="seqlen_q*(batch - 1) >= 2**24", matters=True,
          kind="instruction", argument=""):
    return {"kind": kind, "pc": pc, "instruction": instruction, "argument": argument, "width": 32,
            "machine": 0, "exact": 1 << 32, "matters": matters, "formula": "256*seqlen_q*batch_id",
            "boundary": "seqlen_q*batch_id >= 2**24", "shape_boundary": boundary, "text": "..."}


def _cex(buffer, layout, cause="overflow", shape=None, overflow=(), reachable=True, prop="address",
         difference="", minimal=True):
    x = {"shape": dict(shape or SHAPE), "coords": {"batch_id": 1, "head_id": 0}, "kernargs": {"BAs": 0},
         "address": {"extracted": 0, "expected": 4 << 30}, "lane": 0, "access_pc": 0x3bf0,
         "minimal": minimal, "memory_bytes": 1 << 30}
    return {"buffer": buffer, "layout": layout, "property": prop, "verdict": "counterexample", "cause": cause,
            "overflow": list(overflow), "counterexample": x, "extracted": "", "expected": "",
            "difference": difference, "reason": "", "time_s": 1.0,
            "routing": {"reachable": reachable, "host": "h", "entry_points": [], "masked_by": ["batch <= 1"]}}


def _other(buffer, layout, verdict, reason, prop="bounds"):
    return {"buffer": buffer, "layout": layout, "property": prop, "verdict": verdict, "reason": reason,
            "counterexample": None, "time_s": 0.5, "extracted": "", "expected": "", "difference": ""}


def _kernel(checks, limits=()):
    return {"file": "/k/bwd.co", "kernel": "_Zk", "arch": "gfx942", "host": "h", "checks": checks,
            "host_limits": list(limits)}


def test_checks_through_one_wrap_site_are_one_root_cause_with_the_least_shape():
    small = dict(SHAPE, batch=1, nhead_q=17)
    k = _kernel([_cex("q", "bhsd", overflow=[_site(0x2b4c)]),
                 _cex("do", "bshd", overflow=[_site(0x2b4c, boundary="256*batch*nhead_q*seqlen_q >= 2**32")],
                      shape=small)])
    [r] = root_causes(k)
    assert r["kind"] == "wrap" and r["where"]["pc"] == 0x2b4c
    assert r["title"] == "32-bit wrap at 0x2b4c: s_add_u32 s55, s61, s62"
    assert r["checks"] == ["q/bhsd", "do/bshd"]
    assert r["boundary"] == {"bhsd": "seqlen_q*(batch - 1) >= 2**24", "bshd": "256*batch*nhead_q*seqlen_q >= 2**32"}
    assert r["smallest"]["check"] == "do/bshd" and r["smallest"]["shape"]["batch"] == 1
    assert r["reach"] == "reachable" and "s_addc_u32" in r["fix"]


def test_of_equal_shapes_the_smallest_is_one_proven_minimal():
    """K's and V's SBHD bounds checks wrap at the same i24 site with the same shape; K's did not
    prove it minimal, V's did: the root cause's smallest is V's, minimal."""
    k = _kernel([_cex("k", "sbhd", overflow=[_site(0x2b78)], minimal=False),
                 _cex("v", "sbhd", overflow=[_site(0x2b78)])])
    [r] = root_causes(k)
    assert r["smallest"]["check"] == "v/sbhd" and r["smallest"]["minimal"] is True


def test_the_first_site_that_matters_decides_and_distinct_sites_are_distinct_causes():
    k = _kernel([_cex("q", "bhsd", overflow=[_site(0x10, matters=False), _site(0x2b4c)]),
                 _cex("lse", "bhsd", overflow=[_site(0x2b54, "s_mul_i32 s62, s4, s53")])])
    rs = root_causes(k)
    assert [r["where"]["pc"] for r in rs] == [0x2b4c, 0x2b54]
    assert "s_mul_hi_u32" in rs[1]["fix"]


def test_host_cast_is_one_root_cause_per_argument():
    lim = {"argument": "BAs", "layout": "bhsd", "boundary": "nhead_q*seqlen_q >= 2**24",
           "shape": dict(SHAPE, batch=1, nhead_q=16), "memory_bytes": 1 << 34}
    k = _kernel([], [lim, dict(lim, layout="bshd")])
    [r] = root_causes(k)
    assert r["kind"] == "host cast" and r["checks"] == [] and r["reach"] == "host"
    assert r["boundary"] == {"bhsd": "nhead_q*seqlen_q >= 2**24", "bshd": "nhead_q*seqlen_q >= 2**24"}
    assert r["title"] == "the host's u32 cast of kernel argument BAs"


def test_wrong_formula_on_lse_and_d_is_one_cause_with_patterns_a_and_b():
    k = _kernel([_cex("lse", "sbhd", cause="formula", difference="4*batch_id*nhead_q - 4*batch_id + LSE",
                      reachable=False),
                 _cex("d", "sbhd", cause="formula", difference="4*batch_id*nhead_q - 4*batch_id + D",
                      reachable=False)])
    [r] = root_causes(k)
    assert r["kind"] == "formula" and r["checks"] == ["lse/sbhd", "d/sbhd"]
    assert r["reach"] == "latent" and "pattern A" in r["fix"] and "pattern B" in r["fix"]


def test_overflow_without_a_located_site_is_its_own_wrap_cause():
    k = _kernel([_cex("dq", "sbhd", overflow=[]), _cex("dq", "bshd", overflow=[])])
    rs = root_causes(k)
    assert [r["checks"] for r in rs] == [["dq/sbhd"], ["dq/bshd"]]
    assert all(r["kind"] == "wrap" and "not located" in r["title"] for r in rs)


def test_summary_line_counts_causes_latent_and_other_verdicts():
    k = _kernel([_cex("q", "bhsd", overflow=[_site(0x2b4c)]), _cex("do", "bhsd", overflow=[_site(0x2b4c)]),
                 _cex("lse", "sbhd", cause="formula", reachable=False),
                 _other("k", "bshd", "unknown", "check budget spent"), {**_other("q", "sbhd", "proved", None)}])
    assert summary_line(k) == ("3 counterexample(s) from 2 root cause(s) (1 wrap, 1 formula); 1 of them latent; "
                               "1 proved; 1 unknown")


def test_text_report_prints_one_block_per_root_cause_and_groups_reasons():
    k = _kernel([_cex("q", "bhsd", overflow=[_site(0x2b4c)]), _cex("do", "bhsd", overflow=[_site(0x2b4c)]),
                 _other("q", "bhsd", "unsupported", "bounds of later iterations are not checked; 28 accesses"),
                 _other("do", "bhsd", "unsupported", "bounds of later iterations are not checked; 7 accesses")])
    buf = io.StringIO()
    print_table({"kernels": [k]}, buf)
    text = buf.getvalue()
    assert text.count("ROOT CAUSE") == 1
    assert "ROOT CAUSE 1: 32-bit wrap at 0x2b4c: s_add_u32 s55, s61, s62" in text
    assert "    breaks: q/bhsd, do/bhsd\n" in text
    assert "    boundary (bhsd): seqlen_q*(batch - 1) >= 2**24\n" in text
    assert "unsupported (q/bhsd bounds, do/bhsd bounds): bounds of later iterations are not checked\n" in text
    assert text.rstrip().endswith("summary: 2 counterexample(s) from 1 root cause(s) (1 wrap); 2 unsupported")
    assert "kernel arguments:" not in text          # per-check details only with details=True
    buf = io.StringIO()
    print_table({"kernels": [k]}, buf, details=True)
    assert buf.getvalue().count("kernel arguments:") == 2


# ---------------------------------------------------------------------------- the shape boundary

def _shape(name):
    return Sym(name, 64, "shape")


def test_shape_boundary_puts_the_ids_at_the_last_workgroup():
    """256*batch_id*nhead_q*seqlen_q wraps for some workgroup exactly when it wraps for the
    last batch (batch_id = batch - 1)."""
    b_id = X.zext(Sym("batch_id", 32, "id"), 64)
    e = X.mul(X.mul(X.mul(b_id, _shape("nhead_q")), _shape("seqlen_q")), Const(256, 64))
    last = last_workgroup({"batch_id": _shape("batch")}, "tid_x")
    f = _formula(e, 32, last)
    assert f["boundary"] == "batch_id*nhead_q*seqlen_q >= 2**24"
    assert f["shape_boundary"] == "nhead_q*seqlen_q*(batch - 1) >= 2**24"


def test_shape_boundary_is_not_given_when_the_value_can_fall_as_an_id_grows():
    h = X.zext(Sym("head_id", 32, "id"), 64)
    e = X.sub(X.mul(_shape("seqlen_q"), Const(1 << 20, 64)), X.mul(h, Const(256, 64)))
    f = _formula(e, 32, last_workgroup({"head_id": _shape("nhead_q")}, "tid_x"))
    assert "boundary" in f and "shape_boundary" not in f


def test_shape_boundary_reads_the_last_key_head_under_an_integer_gqa_ratio():
    """floor(head_id / (nhead_q / nhead_k)) at head_id = nhead_q - 1 is nhead_k - 1 when
    nhead_q is a multiple of nhead_k."""
    h = X.zext(Sym("head_id", 32, "id"), 64)
    kv = X.udiv(h, X.udiv(_shape("nhead_q"), _shape("nhead_k")))
    e = X.mul(X.mul(kv, _shape("seqlen_k")), Const(256, 64))
    last = last_workgroup({"head_id": _shape("nhead_q")}, "tid_x", gqa_exact=True)
    assert GQA_EXACT in last
    assert _formula(e, 32, last)["shape_boundary"] == "seqlen_k*(nhead_k - 1) >= 2**24"
    plain = _formula(e, 32, last_workgroup({"head_id": _shape("nhead_q")}, "tid_x"))["shape_boundary"]
    assert "floor" in plain


def test_shape_boundary_is_exact_at_sample_points():
    """The shape boundary holds exactly where the value at the last workgroup reaches 2**32
    (checked against evaluation at points on both sides)."""
    b_id = X.zext(Sym("batch_id", 32, "id"), 64)
    e = X.mul(X.add(X.mul(b_id, _shape("nhead_q")), _shape("nhead_q")), Const(1 << 24, 64))
    f = _formula(e, 32, last_workgroup({"batch_id": _shape("batch")}, "tid_x"))
    text = f["shape_boundary"]
    lhs, rhs = text.split(" >= ")
    for batch, nh in [(1, 255), (1, 256), (2, 128), (4, 63), (4, 64)]:
        value = X.evaluate(e, {"batch_id": batch - 1, "nhead_q": nh})
        holds = sympy.sympify(lhs).subs({"batch": batch, "nhead_q": nh}) >= sympy.sympify(rhs)
        assert bool(holds) == (value >= 1 << 32), (batch, nh)


def test_a_signed_24_bit_operand_past_2_23_is_the_wrap_site_with_its_boundary():
    """v_mul_i32_i24 reads bits 23:0 of the SBHD row stride Seqs as signed (the README kernel's
    dQ SBHD offset at 0x2c5c): Seqs = 256*batch*nhead_q reads negative from 2**23 on, so the
    wrap is the operand's, at batch*nhead_q >= 2**15, and the site names the instruction."""
    seqs = Sym("Seqs", 32, "arg")
    lane = Sym("tid_x", 32, "lane")
    half = X.lshr(X.and_(lane, Const(63, 32)), Const(5, 32))
    op = X.sext(X.extract(seqs, 23, 0), 32)
    row = X.mul(op, X.sext(X.extract(half, 23, 0), 32))
    address = X.add(X.zext(Sym("dQ", 64, "ptr"), 64), X.zext(X.shl(row, Const(2, 32)), 64))
    contract = {"Seqs": X.extract(X.mul(X.mul(_shape("batch"), _shape("nhead_q")), Const(256, 64)), 31, 0)}
    origin = {id(row): (row, 0x2c5c, "v_mul_i32_i24_e32 v6, s70, v28")}
    env = {"batch": 129, "nhead_q": 255, "tid_x": 32, "dQ": 1 << 40}
    [site] = [w for w in wrap_sites(address, contract, env, origin, last_workgroup({}, "tid_x")) if w.matters]
    assert (site.pc, site.width, site.signed) == (0x2c5c, 24, True)
    assert site.boundary == "batch*nhead_q >= 2**15"
    assert "does not fit in 24 bits as a signed operand" in site.describe()
    below = dict(env, batch=128)          # 256*128*255 < 2**23: no wrap
    assert not [w for w in wrap_sites(address, contract, below, origin) if w.matters]


def test_a_32_bit_difference_that_borrows_is_a_wrap_site_below_zero():
    a, b = Sym("a", 32, "arg"), Sym("b", 32, "arg")
    d = X.sub(a, b)
    address = X.add(X.zext(Sym("P", 64, "ptr"), 64), X.zext(d, 64))
    [site] = wrap_sites(address, {}, {"a": 1, "b": 2, "P": 0}, {id(d): (d, 0x10, "s_sub_u32 s0, s1, s2")})
    assert site.pc == 0x10 and site.exact == -1 and site.boundary == "a - b < 0"


# ---------------------------------------------------------------------------- readable formulas

def test_long_formulas_fold_at_whole_terms_with_their_length():
    from addrsim.report.text import _short, _terms
    assert _terms("a + b*(c - d) - e") == ["a", "+ b*(c - d)", "- e"]
    text = "a*b + c*(d + e) - f + " + " + ".join(f"x{i}*y" for i in range(100))
    folded = _short(text, 60)
    assert folded.startswith("a*b + c*(d + e) - f + x0*y") and folded.endswith(
        f"more term(s), {len(text)} characters; full text in --json)")
    assert _short("-4*x + y", 60) == "-4*x + y"


def test_a_comparison_of_a_value_with_itself_reads_as_its_truth_value():
    """``ult(Q, Q)`` (a carry of a sum whose other operand is 0 at (0, 0)) is 0 in the display."""
    from addrsim.backends.sympy_text import to_sympy
    q = Sym("Q", 32, "arg")
    four_b = X.mul(Sym("batch_id", 32, "id"), Const(4, 32))
    assert to_sympy(X.ult(q, q)) == 0 and to_sympy(X.ule(q, q)) == 1
    assert to_sympy(X.add(X.zext(X.ult(four_b, four_b), 32), q)) == sympy.Symbol("Q", integer=True, nonnegative=True)
    assert str(to_sympy(X.ult(q, four_b))) == "ult(Q, 4*batch_id)"


def test_the_floor_of_a_multiple_of_a_bit_operation_is_read_whole():
    """Lane terms such as ``floor(and(tid_x, 960)/64)`` are integers: 64 times one, floored, is
    itself, so lane terms that cancel do cancel."""
    from addrsim.backends.sympy_text import to_sympy
    lane = Sym("tid_x", 32, "lane")
    f = X.lshr(X.and_(lane, Const(960, 32)), Const(6, 32))
    e = X.sub(X.lshr(X.mul(X.add(X.mul(f, Const(16, 32)), Sym("k", 32, "arg")), Const(256, 32)), Const(2, 32)),
              X.mul(f, Const(1024, 32)))      # floor(256*(16*f + k)/4) - 1024*f
    assert str(sympy.expand(to_sympy(e))) == "64*k"


def test_json_gives_the_offset_in_shape_variables():
    from addrsim.prove.verdict import Check, Verdict
    from addrsim.report.json import check_json
    b, n, h = (sympy.Symbol(v, integer=True, nonnegative=True) for v in ("batch_id", "nhead_q", "head_id"))
    c = Check("q", "sbhd", Verdict.PROVED)
    c.shape_offset_sym = 256 * b * n + 256 * h
    assert check_json(c)["extracted_shape"] == "256*(batch_id*nhead_q + head_id)"
    assert "extracted_shape" not in check_json(Check("q", "sbhd", Verdict.PROVED))


GRID = {"batch_id": "batch", "head_id": "nhead_q", "tid_x": "256"}


def _grid_domain():
    return {"assumptions": [{"layer": "grid", "text": f"{i} < {u}", "source": "model"} for i, u in GRID.items()]}


def test_a_wrong_formula_has_its_boundary_in_shape_variables_only():
    c = _cex("lse", "sbhd", cause="formula", difference="-4*batch_id*nhead_q*seqlen_q + 4*batch_id*nhead_q")
    c["domain"] = _grid_domain()
    [r] = root_causes(_kernel([c]))
    assert r["boundary"] == {"sbhd": "batch >= 2 and seqlen_q >= 2"}


@pytest.mark.parametrize("diff", ["-4*batch_id*nhead_q*seqlen_q + 4*batch_id*nhead_q", "4*head_id*(seqlen_q - 3)**2",
                                  "4*batch_id", "8*tid_x*(nhead_q - 2)*batch_id", "nhead_q*seqlen_q - 4"])
def test_formula_boundary_holds_exactly_where_some_workgroup_differs(diff):
    """Defining property, by brute force over small shapes: the boundary holds iff some
    (batch_id, head_id, lane) of the shape has a nonzero difference."""
    import itertools
    import sympy
    text = formula_boundary(diff, GRID)
    e = sympy.sympify(diff)
    for batch, nhead_q, seqlen_q in itertools.product(range(1, 4), range(1, 4), range(1, 5)):
        shape = {"batch": batch, "nhead_q": nhead_q, "seqlen_q": seqlen_q}
        some = any(e.subs(dict(shape, batch_id=b, head_id=h, tid_x=t)) != 0
                   for b in range(batch) for h in range(nhead_q) for t in (0, 1, 255))
        holds = text == "every shape" or all(
            sympy.sympify(part.replace("!=", "-").replace(">=", "-")).subs(shape) != 0 if "!=" in part
            else sympy.sympify(part.split(">=")[0]).subs(shape) >= int(part.split(">=")[1])
            for part in text.split(" and "))
        assert holds == some, (diff, text, shape)


def test_formula_boundary_claims_nothing_where_ids_mix_with_shapes():
    assert formula_boundary("4*(batch_id + head_id)", GRID) is None
    assert formula_boundary("4*batch_id*nhead_q - 4*batch_id + P", GRID) is None
    assert formula_boundary("4*kv_tile", GRID) is None          # no range for kv_tile


def test_a_bounds_counterexample_in_bounds_without_wraps_joins_its_wrap_root_cause():
    """q/sbhd bounds of the README kernel: offset 0xff000000 outside the allocation only because
    v_mul_i32_i24 reads Seqs negative: one root cause with dq/sbhd's address wrap at 0x2c5c."""
    site = _site(0x2c5c, instruction="v_mul_i32_i24_e32 v6, s70, v28", boundary="batch*nhead_q >= 2**15")
    wrapped = _cex("q", "sbhd", cause="allocation", prop="bounds", overflow=[site])
    plain = _cex("k", "sbhd", cause="allocation", prop="bounds")
    rs = root_causes(_kernel([_cex("dq", "sbhd", overflow=[site]), wrapped, plain]))
    assert [(r["kind"], r["checks"]) for r in rs] == [("wrap", ["dq/sbhd", "q/sbhd bounds"]),
                                                      ("bounds", ["k/sbhd bounds"])]
    assert rs[0]["boundary"] == {"sbhd": "batch*nhead_q >= 2**15"}


def test_text_names_the_obligation_of_a_routing_left_undecided():
    c = _cex("dq", "sbhd", overflow=[_site(0x2c5c)])
    c["routing"] = {"reachable": None, "host": "h", "masked_by": [], "entry_points": [
        {"entry": "fmha_v3_bwd", "verdict": "unknown", "reachable": None, "masked_by": [], "shape": None,
         "reason": "check budget spent", "smt2": "/o/k.dq.sbhd.address.bv.routed-fmha_v3_bwd.smt2"}]}
    buf = io.StringIO()
    print_table({"kernels": [_kernel([c])]}, buf)
    text = buf.getvalue()
    assert "dq/sbhd through fmha_v3_bwd (unknown): /o/k.dq.sbhd.address.bv.routed-fmha_v3_bwd.smt2" in text
    assert "not decided (the routed check is unknown: check budget spent)" in text


def test_a_formula_root_cause_is_named_by_its_no_wrap_difference_in_shape_terms(tmp_path):
    """examples/lsed_bas_shortcut.s keeps its offsets in 64-bit carry chains: the difference in
    kernel-argument terms carries ult/mulhu terms and the LSE pointer; the root cause reads the
    no-wrap difference in shape variables, and LSE and D are one cause."""
    from addrsim.api import verify
    from test_examples import MODEL, build
    rep = verify(build("lsed_bas_shortcut", tmp_path), buffers=["lse", "d"], model_files=[MODEL],
                 layouts=["sbhd"], properties=["address"])
    k = rep["kernels"][0]
    assert all("ult" not in c["difference_shape"] and "Lse" not in c["difference_shape"] for c in k["checks"])
    [r] = [r for r in root_causes(k) if r["kind"] == "formula"]
    assert r["checks"] == ["lse/sbhd", "d/sbhd"]
    assert r["title"].endswith("extracted - expected = -4*batch_id*nhead_q*(seqlen_q - 1)")
    assert r["boundary"] == {"sbhd": "batch >= 2 and seqlen_q >= 2"}


def test_pattern_a_is_offered_only_where_the_abi_carries_its_arguments():
    """Issue 40: pattern A loads nhead_q and Hs_lsed; a kernel whose argument ABI has neither
    (the wheel's 2025 a16 kernels) is offered pattern B, with what A would need."""
    from addrsim.report.causes import fix_formula
    checks = [{"buffer": "lse"}]
    assert fix_formula(checks, ["Lse", "nhead_q", "Hs_lsed", "BAs_q"]).startswith("pattern A")
    text = fix_formula(checks, ["Lse", "BAs", "Seqs"])
    assert text.startswith("pattern B") and text.endswith("lacks: nhead_q, Hs_lsed")
    assert fix_formula([{"buffer": "q"}], ["Q"]) == ""


def test_root_causes_in_triage_order():
    """Issue 40: the kernel's findings before the host's limits, then the smallest memory, then
    reachable before latent: a latent 1 KiB formula before reachable 5 and 24 GiB wraps; at
    equal memory the reachable one first."""
    big, small = _cex("q", "bhsd", overflow=[_site(0x2b4c)]), _cex("k", "bhsd", overflow=[_site(0x2c00)])
    big["counterexample"]["memory_bytes"], small["counterexample"]["memory_bytes"] = 24 << 30, 5 << 30
    lat = _cex("lse", "sbhd", cause="formula", reachable=False)
    lat["counterexample"]["memory_bytes"] = 1024
    rc = root_causes(_kernel([lat, big, small]))
    assert [(r["reach"], r["checks"]) for r in rc] == [("latent", ["lse/sbhd"]), ("reachable", ["k/bhsd"]),
                                                      ("reachable", ["q/bhsd"])]
    assert [r["id"] for r in rc] == [1, 2, 3]
    lat["counterexample"]["memory_bytes"] = 5 << 30
    assert [r["checks"] for r in root_causes(_kernel([lat, big, small]))][:2] == [["k/bhsd"], ["lse/sbhd"]]


def test_scan_folds_a_root_cause_its_sibling_kernels_share():
    """Issue 40: four sibling kernels with the same wrap print it once, the four kernels
    listed, with each layout's boundary; a cause only one of them has is its own block."""
    from addrsim.commands.scan import Corpus, findings_text
    kernels = []
    for n, name in enumerate(("rtne", "rtna", "rtz", "fp16")):
        checks = [_cex("q", "bhsd", overflow=[_site(0x2b4c)]), _cex("q", "sbhd", overflow=[_site(0x2b4c)])]
        if n == 3:
            checks.append(_cex("lse", "sbhd", cause="formula", reachable=False))
        k = _kernel(checks)
        k["file"] = f"/x/bwd_hd128_{name}.co"
        kernels.append(k)
    text = "\n".join(findings_text(kernels, Corpus()))
    assert text.count("32-bit wrap at 0x2b4c") == 1 and "in 4 kernel(s): gfx942/bwd_hd128_rtne.co" in text
    assert "boundary (bhsd): seqlen_q*(batch - 1) >= 2**24" in text
    assert "in 1 kernel(s): gfx942/bwd_hd128_fp16.co" in text and "root causes (2, each once" in text


def test_scan_folds_a_shared_root_cause_whose_instruction_sits_elsewhere_in_a_sibling():
    """A fresh-user trial (issue 40): fp16's code sits 8 bytes after bf16's, so its copy of the
    wrap at 0x2b4c is at 0x2b54; the same cause (instruction, checks, boundary) is one block,
    naming the other address and its kernel."""
    from addrsim.commands.scan import Corpus, findings_text
    kernels = []
    for name, pc in (("bf16_rtne", 0x2b4c), ("bf16_rtz", 0x2b4c), ("fp16", 0x2b54)):
        k = _kernel([_cex("q", "bhsd", overflow=[_site(pc)])])
        k["file"] = f"/x/bwd_hd128_{name}.co"
        kernels.append(k)
    text = "\n".join(findings_text(kernels, Corpus()))
    assert "root causes (1, each once" in text and "in 3 kernel(s)" in text
    assert "32-bit wrap at 0x2b4c: s_add_u32 s55, s61, s62 (0x2b54 in gfx942/bwd_hd128_fp16.co)" in text


@pytest.mark.parametrize("instruction, wide", [
    ("s_mul_i32 s60, s2, s60", "s_mul_hi_u32 sHI, s2, s60 before s_mul_i32 s60, s2, s60 (which overwrites s60)"),
    ("s_mul_i32 s7, s2, s60", "s_mul_i32 s7, s2, s60 then s_mul_hi_u32 sHI, s2, s60"),
    ("s_lshl_b32 s4, s5, 8", "s_lshl_b64 s[4:5], s[5:6], 8 (the high word of s[5:6] zero)"),
    ("v_mul_lo_u32 v3, s5, v2", "v_mad_u64_u32 v[3:4], s[N:N+1], s5, v2, 0 (full 32-bit operands, 64-bit result)"),
    ("v_mad_u32_u24 v1, v2, s3, v4", "v_mad_u64_u32 v[1:2], s[N:N+1], v2, s3, v4 (full 32-bit operands, 64-bit result)"),
    ("v_lshlrev_b32_e32 v4, 2, v5", "v_lshlrev_b64 v[4:5], 2, v[5:6] (the high word of v[5:6] zero)"),
    ("s_mov_b32 s1, s2", ""),
])
def test_a_wrap_fix_names_the_64_bit_form_of_its_instruction(instruction, wide):
    """Issue 40 item 5: the fix of a wrap names the 64-bit form of the instruction that wraps,
    with its own operands (the README kernel's dK/dV wrap is ``s_mul_i32 s60, s2, s60`` at 0x2c34:
    its high half must be taken before s60 is overwritten)."""
    from addrsim.report.causes import _wrap_fix, wide_form
    assert wide_form(instruction) == wide
    if wide:
        assert wide in _wrap_fix(instruction)


def test_a_bounds_finding_that_follows_from_a_formula_cause_is_folded_into_it():
    """Issue 40: the README kernel's SBHD LSE shortcut makes lse/sbhd wrong (formula) and,
    at the same access and shape, its bounds check read another workgroup's slice (layout):
    one root cause listing both, not two; a bounds finding at another access stays apart."""
    small = dict(SHAPE, batch=2, nhead_q=1, seqlen_q=64, seqlen_k=64)
    addr = _cex("lse", "sbhd", cause="formula", shape=small, difference="-4*batch_id*nhead_q*(seqlen_q - 1)",
                reachable=False)
    addr["difference_shape"] = "-4*batch_id*nhead_q*(seqlen_q - 1)"
    follows = _cex("lse", "sbhd", cause="layout", shape=small, prop="bounds", reachable=None)
    follows["reason"] = "access at 0x3bf0: reads outside the workgroup's own (batch, head) slice of lse"
    apart = _cex("d", "sbhd", cause="layout", shape=small, prop="bounds", reachable=None)
    apart["reason"] = "access at 0x3c00: reads outside the workgroup's own (batch, head) slice of d"
    apart["counterexample"]["access_pc"] = 0x3c00
    causes = root_causes(_kernel([addr, follows, apart]))
    assert sorted((r["kind"], r["checks"]) for r in causes) == [("formula", ["lse/sbhd", "lse/sbhd bounds"]),
                                                                ("layout", ["d/sbhd bounds"])]
    [f] = [r for r in causes if r["kind"] == "formula"]
    assert f["consequences"] == ["lse/sbhd bounds"] and f["reach"] == "latent" and len(f["findings"]) == 2
    out = io.StringIO()
    print_table({"kernels": [_kernel([addr, follows])]}, out)
    assert "follows from it: lse/sbhd bounds" in out.getvalue() and out.getvalue().count("ROOT CAUSE") == 1


def test_a_wrap_is_reachable_only_through_a_routed_counterexample_of_its_own_wrap():
    """Issue 40: a check the host reaches through another wrap (its routed counterexample goes
    through 0x2c34) does not make the kernel's wrap at 0x2c08 reachable: the cause's reach is
    undecided and the text names the other wrap; through its own wrap it is reachable."""
    def routed(pcs):
        c = _cex("dk", "sbhd", prop="bounds", overflow=[_site(0x2c08, instruction="v_mul_i32_i24_e32 v5, s46, v28")])
        c["routing"]["entry_points"] = [{"entry": "fmha_v3_bwd", "verdict": "counterexample", "reachable": True,
                                         "masked_by": [], "shape": dict(SHAPE, batch=1), "reason": "",
                                         "wrap_pcs": pcs}]
        return _kernel([c])
    [other] = root_causes(routed([0x2c34]))
    assert other["reach"] == "routing unknown"
    out = io.StringIO()
    print_table({"kernels": [routed([0x2c34])]}, out)
    assert "not decided for this wrap (the host reaches dk/sbhd bounds through another wrap: 0x2c34" in out.getvalue()
    assert "REACHABLE" not in out.getvalue()
    assert root_causes(routed([0x2c08]))[0]["reach"] == "reachable"
    assert root_causes(routed(None))[0]["reach"] == "reachable"        # an older report: no wrap_pcs, as before


def test_a_work_item_past_wave_0_is_named_with_its_wave_and_lane():
    """A fresh-user trial (issue 40): "lane=64" read as a lane a wave does not have."""
    from addrsim.report.text import lane_text
    assert lane_text(5) == "lane=5" and lane_text(64) == "tid_x=64 (wave 1, lane 0)"
    assert lane_text(200) == "tid_x=200 (wave 3, lane 8)"


def test_a_cause_whose_checks_route_differently_says_so():
    """A fresh-user trial (issue 40): root cause 2 of the README kernel showed only its
    smallest check's routing (dq/sbhd bounds, not decided) while the table said dq/sbhd latent."""
    bounds = _cex("dq", "sbhd", prop="bounds", overflow=[_site(0x2c5c)], reachable=None)
    addr = _cex("dq", "sbhd", overflow=[_site(0x2c5c)], reachable=False, shape=dict(SHAPE, batch=3))
    out = io.StringIO()
    print_table({"kernels": [_kernel([bounds, addr])]}, out)
    assert "routing of its other checks: dq/sbhd latent" in out.getvalue()
