"""Branch feasibility (addrsim.engine.explore): the explorer's answers come from a solver kept
at the last path's levels and from assignments that satisfied earlier questions; each must be
what a fresh solver answers for the whole path, or the explored paths (and every verdict after
them) would change."""
import random

import pytest

from addrsim.backends.z3_run import Isolated
from addrsim.engine.explore import PathSolver, Witnesses, feasible
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Op, Sym

from test_ops import gen


def _paths(seed, n=40):
    """Paths as an explorer asks them: each a parent's conditions plus one (random 1-bit
    trees over x8/x32/y32/the array, and the two sides of one condition)."""
    rnd = random.Random(seed)
    asked = [[]]
    for _ in range(n):
        parent = rnd.choice(asked[-6:])
        c = gen(rnd, 1, rnd.randrange(1, 4))
        for side in (c, X.bnot(c)):
            asked.append(parent + [side])
    return asked[1:]


@pytest.mark.parametrize("witnesses", [True, False])
def test_the_path_solver_answers_what_a_fresh_solver_answers(witnesses):
    for seed in range(6):
        ps = PathSolver(witnesses)
        for conds in _paths(seed):
            assert ps.feasible(conds) == feasible(Isolated(), conds), (seed, [str(c) for c in conds])
        assert (ps.seen.answered > 0) == witnesses


def test_a_witness_answers_only_where_every_condition_evaluates_to_one():
    x, y = Sym("x32", 32), Sym("y32", 32)
    seen = Witnesses()
    seen.add({"x32": 5, "y32": 9})
    assert seen.satisfy([X.ult(x, y), X.eq(x, Const(5, 32))])
    assert not seen.satisfy([X.ult(x, y), X.eq(x, Const(6, 32))])
    assert not seen.satisfy([X.ult(y, x)])
    # a symbol the model does not name is 0 there: still an assignment of every symbol
    assert seen.satisfy([X.eq(Sym("z8", 8), Const(0, 8))])
    assert not seen.satisfy([X.eq(Sym("z8", 8), Const(1, 8))])
    assert (seen.asked, seen.answered) == (5, 2)


def test_a_model_of_an_array_read_is_kept_for_later_questions():
    """A group kernel's branches read seqstart arrays: the solver's model of ``sel`` (the
    array's contents) is part of the assignment, so later paths through the same reads are
    answered without the solver."""
    arr, x = Sym("seqstart", 64, "ptr"), Sym("x32", 32)
    read = Op("sel", (arr, X.zext(x, 64)), 32)
    path = [X.eq(read, Const(77, 32)), X.ult(Const(3, 32), x)]
    ps = PathSolver()
    assert ps.feasible(path)
    assert ps.seen.answered == 0
    assert ps.feasible(path + [X.ult(read, Const(100, 32))])
    assert ps.seen.answered == 1
    assert not ps.feasible(path + [X.ult(read, Const(50, 32))])


def test_an_unsatisfiable_side_is_never_answered_by_a_witness():
    x = Sym("x32", 32)
    ps = PathSolver()
    assert ps.feasible([X.ult(x, Const(10, 32))])
    assert ps.feasible([X.ult(x, Const(10, 32)), X.eq(x, Const(3, 32))])
    assert not ps.feasible([X.ult(x, Const(10, 32)), X.ult(Const(20, 32), x)])
    assert not ps.feasible([X.ult(x, Const(10, 32)), Const(0, 1)])
