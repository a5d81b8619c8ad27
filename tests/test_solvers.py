"""The solver layer (addrsim.backends.z3_run, addrsim.backends.bitwuzla_run): budgets are
resource units or counted callbacks, the same answer and the same cost every time, and each
Z3 check runs in a context of its own."""
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
