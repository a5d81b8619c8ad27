"""The solver layer (addrsim.backends.z3_run, addrsim.backends.bitwuzla_run): budgets are
resource units or counted callbacks, the same answer and the same cost every time, and each
Z3 check runs in a context of its own."""
import pytest
import z3

from addrsim.backends import bitwuzla_run
from addrsim.backends.z3_run import Isolated, decided

FACTOR = """(declare-const x (_ BitVec 64))(declare-const y (_ BitVec 64))
(assert (bvugt x #x0000000000000001))(assert (bvugt y #x0000000000000001))
(assert (bvult x #x0000000100000000))(assert (bvult y #x0000000100000000))
(assert (= (bvmul x y) #x00000002DFDC1C35))
"""


def _factor_z3():
    x, y = z3.BitVecs("x y", 32)          # 0x7FFD4C5 = 9973 * 13457
    return [z3.UGT(x, 1), z3.UGT(y, 1), z3.ULT(x, 1 << 16), z3.ULT(y, 1 << 16), x * y == 0x7FFD4C5], x, y


def test_z3_answer_and_cost_do_not_depend_on_earlier_work():
    fs, x, y = _factor_z3()
    r1, used1 = decided(fs, 10 ** 8)
    junk = Isolated()                       # unrelated work in between, in the global context too
    a, b = z3.BitVecs("a b", 32)
    junk.add(a * b == 7, z3.UGT(a, 1))
    junk.check(10 ** 6)
    _ = [z3.BitVec(f"t{i}", 64) * i for i in range(200)]
    r2, used2 = decided(fs, 10 ** 8)
    assert (r1, used1) == (r2, used2) and r1 == z3.sat


def test_z3_out_of_resource_units_is_unknown_and_model_values_read_back():
    fs, x, y = _factor_z3()
    assert decided(fs, 10)[0] == z3.unknown
    iso = Isolated()
    iso.add(*fs)
    assert iso.check(10 ** 8)[0] == z3.sat
    assert iso.value(x) * iso.value(y) == 0x7FFD4C5 and iso.value(x) > 1 and iso.value(y) > 1


def test_bitwuzla_decides_the_same_text_with_a_counted_budget():
    ans, model, calls, wall = bitwuzla_run.check(FACTOR, 10 ** 6)
    assert ans == "sat" and not wall and model["x"] * model["y"] == 0x2DFDC1C35
    again = bitwuzla_run.check(FACTOR, 10 ** 6)
    assert again[2] == calls                                  # the same count of callbacks each time
    assert bitwuzla_run.check(FACTOR, 1)[0] == "unknown"      # one call is not enough
    unsat = FACTOR.replace("#x00000002DFDC1C35", "#x0000000000000007")   # 7 is prime
    assert bitwuzla_run.check(unsat, 10 ** 6)[0] == "unsat"


def test_bitwuzla_reads_z3s_smt2_with_functions_and_quoted_names():
    x, y = z3.BitVecs("batch s!x", 64)
    f = z3.Function("sel_seqstart", z3.BitVecSort(64), z3.BitVecSort(32))
    iso = Isolated()
    iso.add(z3.ULT(x, 100), y == x * 3, f(x) == 5)
    ans, model, _, _ = bitwuzla_run.check(iso.smt2(), 10 ** 5)
    assert ans == "sat" and model["s!x"] == 3 * model["batch"]


def test_bad_text_is_unknown_not_an_exception():
    assert bitwuzla_run.check("(assert (= x", 100)[0] == "unknown"


def _factor_frames(product: int):
    x, y = z3.BitVecs("x y", 64)
    iso = Isolated()
    iso.add(z3.UGT(x, 1), z3.UGT(y, 1), z3.ULT(x, 1 << 32), z3.ULT(y, 1 << 32))
    iso.push()
    iso.add(x * y == product)
    return iso


def test_a_session_parses_its_base_once_and_answers_each_pushed_frame():
    """One Bitwuzla instance per query: the base (frame 0) stays asserted, each check pushes
    the other frames (their declarations of base constants left out) and pops them."""
    sess = bitwuzla_run.Session()
    iso = _factor_frames(0x2DFDC1C35)
    assert len(iso.smt2_frames()) == 2
    ans, model, calls, wall = sess.check(iso.smt2_frames(), 10 ** 6)
    assert ans == "sat" and model["x"] * model["y"] == 0x2DFDC1C35 and calls > 0 and not wall
    first = sess._b
    iso.pop()
    iso.push()
    iso.add(z3.BitVecs("x y", 64)[0] * z3.BitVecs("x y", 64)[1] == 7)      # 7 is prime
    assert sess.check(iso.smt2_frames(), 10 ** 6)[0] == "unsat"
    assert sess._b is first                                   # the same instance: the base was not parsed again
    iso.pop()
    assert sess.check(iso.smt2_frames(), 10 ** 6)[0] == "sat"  # the popped frame is gone
    assert sess.check(_factor_frames(7).smt2_frames(), 10 ** 6)[0] == "unsat"
    assert sess._b is first                                   # the same base text: the same instance
    other = Isolated()
    other.add(z3.ULT(z3.BitVec("x", 64), 4))
    assert sess.check(other.smt2_frames(), 10 ** 6)[0] == "sat"
    assert sess._b is not first                               # another base: another instance


def test_a_session_survives_a_frame_it_cannot_parse():
    sess = bitwuzla_run.Session()
    iso = _factor_frames(0x2DFDC1C35)
    frames = iso.smt2_frames()
    assert sess.check([frames[0], "(assert (= x"], 100)[0] == "unknown"
    assert sess.check(frames, 10 ** 6)[0] == "sat"           # started afresh, not left pushed


def test_a_session_takes_constants_declared_in_pushed_frames_again():
    """The named array reads of a query (Query._named_reads) are declared in a pushed frame:
    declared again after a pop, and read back in each model."""
    sess = bitwuzla_run.Session()
    x = z3.BitVec("x", 8)
    iso = Isolated()
    iso.add(z3.ULT(x, 16))
    for k in (1, 2):
        iso.push()
        r = z3.BitVec("rd", 8)
        iso.add(r == x + k, r == 5)
        ans, model, _, _ = sess.check(iso.smt2_frames(), 10 ** 5)
        assert ans == "sat" and model == {"x": 5 - k, "rd": 5}
        iso.pop()


def test_a_cone_sub_query_is_decided_once_per_check():
    """Loop obligations of one check share their cone sub-query (the goal under only the
    conditions that share a symbol with it, Query._cone_proves): the first pays for it, a
    later one with the same goal and cone, whatever its other conditions, reuses the answer
    and spends nothing (bwd_hd128_bf16_a32_rtna's Q SBHD loop: 4.9 Mru per obligation,
    which ran its check past the scan's 10 Mru; now proved)."""
    from addrsim.ir import expr as X
    from addrsim.ir.expr import Const, Sym
    from addrsim.prove.query import Query
    x, y, z = Sym("x", 32, "shape"), Sym("y", 32, "shape"), Sym("z", 32, "shape")
    cone = [X.ult(x, Const(1 << 20, 32))]
    other = [X.ult(X.mul(y, z), X.add(y, Const(7, 32))), X.ult(Const(3, 32), z)]
    # (x + 1) * 12 is a multiple of 4 in 32 bits: true, but not one polynomial identity
    claim = X.eq(X.urem(X.mul(X.add(x, Const(1, 32)), Const(12, 32)), Const(4, 32)), Const(0, 32))
    cones: dict = {}
    first = Query(cone + other, claim, {}, 10 ** 7, cones=cones)
    assert not first.identity and first.solve()[0] == "proved"
    assert len(cones) == 1 and list(cones.values()) == [True] and first.used > 0
    second = Query(cone + other[:1], claim, {}, 10 ** 7, cones=cones)
    assert second.solve()[0] == "proved" and second.used == 0
    alone = Query(cone + other[:1], claim, {}, 10 ** 7)          # without the shared answers
    assert alone.solve()[0] == "proved" and alone.used > 0


def test_a_cone_is_decided_by_every_solver_first_only_for_loops_and_minimisation_boxes(monkeypatch):
    """An access's claim over the whole domain mostly fails (4222 of the wheel's 5742 checks):
    its cone goes to the integer stage first, and to every solver only once the whole query is
    left undecided (the bit-vector solvers on the cones of gfx942 a32_rtna_psskddv proved 1 of
    14 for 37.5 Mru).  A loop obligation (``cones`` given: its goal has cancelled to pointer
    terms) and a minimisation box ask every solver first (hd64_a16_rtna's Q SBHD loop ran out
    of its check budget otherwise)."""
    from addrsim.ir import expr as X
    from addrsim.ir.expr import Const, Sym
    from addrsim.prove.query import Query
    x, y, z = Sym("x", 32, "shape"), Sym("y", 32, "shape"), Sym("z", 32, "shape")
    conds = [X.ult(x, Const(1 << 20, 32)), X.ult(X.mul(y, z), X.add(y, Const(7, 32))), X.ult(Const(3, 32), z)]
    claim = X.eq(X.urem(X.mul(X.add(x, Const(1, 32)), Const(12, 32)), Const(4, 32)), Const(0, 32))
    seen = []
    real = Query._cone_proves

    def spy(self, bounds, ru, iru, every):
        seen.append(every)
        return real(self, bounds, ru, iru, every)
    monkeypatch.setattr(Query, "_cone_proves", spy)
    for q, first in ((Query(conds, claim, {}, 10 ** 7), False),
                     (Query(conds, claim, {}, 10 ** 7, cones={}), True)):
        seen.clear()
        assert q.solve()[0] == "proved" and seen[0] is first
    seen.clear()
    assert Query(conds, claim, {}, 10 ** 7).solve_within({"x": (0, 1000)}, 10 ** 6, 10 ** 6)[0] == "proved"
    assert seen[0] is True


def test_bitwuzla_models_carry_the_array_contents_the_query_reads():
    """Group mode: the row offset of batch b is seqstart_q[b] (an int32 array read through
    a kernel argument), and 256 bytes a row wrap a u32 once seqstart_q[b] >= 2**24.
    Bitwuzla reports only bit-vector constants, so the model must carry the array entries
    the counterexample reads (offset 4*batch_id), else it cannot be checked or replayed."""
    from addrsim.ir import expr as X
    from addrsim.ir.expr import Const, Sym
    from addrsim.prove.query import Query, violates
    arr, bid = Sym("seqstart_q", 48, "array"), Sym("batch_id", 32, "id")
    start = X.select(arr, X.mul(X.zext(bid, 64), Const(4, 64)))
    claim = X.eq(X.zext(X.mul(start, Const(256, 32)), 64), X.mul(X.zext(start, 64), Const(256, 64)))
    conds = [X.ult(bid, Const(8, 32))]
    q = Query(conds, claim, {"batch_id": (0, 7)}, 10**6, "bv")
    ans, m, spent, _ = q.bitwuzla_check(q._bv(), 10**5)
    assert ans == "sat" and spent > 0
    row = m["seqstart_q[]"][4 * m["batch_id"]]
    assert row * 256 >= 1 << 32
    assert violates(conds, claim, m)
    assert "addrsim_rd0_off" not in q._bv().smt2()        # the read names live in a popped scope
    assert q._bzla is None                                # a whole query is asked of a fresh instance
    boxed = [q.bitwuzla_check(q._bv(), 10**5, session=True) for _ in range(2)]   # a box's question
    assert all(a == "sat" and violates(conds, claim, m) for a, m, _, _ in boxed)
    assert q._bzla is not None and q._bzla[0] is q._bv()  # both asked of the query's one session


def test_a_text_only_level_prints_as_a_pushed_one_and_never_reaches_z3():
    """A wrap site's question is pushed for Bitwuzla's text alone (push_text): its text is the
    text a real push gives, frame by frame, and Z3's solver never holds it (a Z3 push
    internalises everything below it, for nothing, when Z3 will not check)."""
    x, y = z3.BitVecs("x y", 64)
    base, box, site = [z3.ULE(x, 100), y == x * 3], [z3.UGE(x, 7), z3.ULE(x, 9)], z3.UGE(y, 1 << 32)
    real, text = Isolated(), Isolated()
    for s in (real, text):
        s.add(*base)
    real.push()
    real.add(*box)
    real.add(site)
    text.push_text()
    text.add(*box)
    text.add(site)
    assert text.smt2() == real.smt2() and text.smt2_frames() == real.smt2_frames()
    assert len(text.s.assertions()) == 1 and len(real.s.assertions()) == 3
    with pytest.raises(AssertionError):
        text.check(1000)
    text.pop_text()
    assert text.check(10 ** 6)[0] == z3.sat and len(text.smt2_frames()) == 1
