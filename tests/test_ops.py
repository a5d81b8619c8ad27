"""The operator registry (addrsim.ir.ops): every backend agrees with each operator's exact meaning.

Random expressions over every operator of the registry, built raw (plain Op nodes, no
simplification), are evaluated by the exact meaning; the same trees rebuilt through the
simplifying constructors, and translated by each backend, must give the same value.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest
import z3
from hypothesis import given, settings, strategies as st

from addrsim.backends import exact, ideal, pyfunc, sympy_text, vector, z3_bv, z3_int
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Op, Sym
from addrsim.ir.ops import OPS, BackendGap, require_backend

WIDTHS = (1, 8, 32, 33, 64)
ARRAY = Sym("arr", 64, "ptr")


def _value(rnd, w):
    return rnd.choice([0, 1, 2, X.mask(w), 1 << (w - 1), (1 << (w - 1)) - 1, rnd.getrandbits(w), rnd.getrandbits(w)]) & X.mask(w)


def _leaf(rnd, w):
    if rnd.random() < 0.4:
        return Const(_value(rnd, w), w)
    return Sym(f"{rnd.choice('xyz')}{w}", w)


def _ops_for(w):
    out = [n for n, s in OPS.items() if s.shape in ("same", "ite")]
    out += [n for n, s in OPS.items() if s.shape == "shift"] if w > 1 else []
    out += ["zext", "sext", "concat"] if w > 1 else []
    out += ["extract"]
    out += [n for n, s in OPS.items() if s.shape == "pred"] if w == 1 else []
    out += [n for n, s in OPS.items() if s.shape in ("f32", "memory")] if w == 32 else []
    return out


def gen(rnd, w, depth):
    """A raw (unsimplified) expression of width ``w``."""
    if depth == 0 or rnd.random() < 0.25:
        return _leaf(rnd, w)
    op = rnd.choice(_ops_for(w))
    shape = OPS[op].shape
    sub = lambda ww: gen(rnd, ww, depth - 1)  # noqa: E731
    if shape in ("same", "shift", "f32"):
        return Op(op, tuple(sub(w) for _ in range(OPS[op].arity)), w)
    if shape == "ite":
        return Op(op, (sub(1), sub(w), sub(w)), w)
    if shape == "pred":
        ww = rnd.choice(WIDTHS)
        return Op(op, (sub(ww), sub(ww)), 1)
    if shape == "widen":
        return Op(op, (sub(rnd.randrange(1, w)),), w)
    if shape == "concat":
        k = rnd.randrange(1, w)
        return Op(op, (sub(w - k), sub(k)), w)
    if shape == "extract":
        wa = rnd.choice([x for x in WIDTHS if x >= w])
        lo = rnd.randrange(0, wa - w + 1)
        return Op(op, (sub(wa),), w, (lo + w - 1, lo))
    if shape == "memory":
        return Op(op, (ARRAY, Op("zext", (sub(32),), 64)), 32)
    raise AssertionError(shape)


def reference(e, env, memo=None):
    """The exact meaning of every node of a raw tree (OPS only: no constructor involved)."""
    memo = {} if memo is None else memo
    if id(e) in memo:
        return memo[id(e)]
    if isinstance(e, Const):
        v = e.value
    elif isinstance(e, Sym):
        v = env[e.name]
    elif e.op == "sel":
        v = env["arr[]"].get(reference(e.args[1], env, memo), 0)
    else:
        v = OPS[e.op].meaning([reference(a, env, memo) for a in e.args], [a.width for a in e.args], e.params, e.width)
    memo[id(e)] = v
    return v


def rebuilt(e, memo=None):
    """The same tree through the simplifying constructors."""
    memo = {} if memo is None else memo
    if not isinstance(e, Op):
        return e
    if id(e) not in memo:
        memo[id(e)] = X.CONSTRUCT[e.op](e, tuple(rebuilt(a, memo) for a in e.args))
    return memo[id(e)]


def case(seed):
    rnd = random.Random(seed)
    w = rnd.choice(WIDTHS)
    e = gen(rnd, w, rnd.randrange(1, 5))
    env = {f"{c}{ww}": _value(rnd, ww) for c in "xyz" for ww in range(1, 65)}
    env["arr[]"] = {k: rnd.getrandbits(32) for k in (0, 1, 2, 4, 8)}
    return e, env


SEEDS = st.integers(0, 2 ** 48)
N = int(os.environ.get("ADDRSIM_OPS_EXAMPLES", "0")) or None     # more examples on demand


def examples(n):
    """``n`` deterministic examples (ADDRSIM_OPS_EXAMPLES raises it, with fresh seeds)."""
    return settings(max_examples=N or n, deadline=None, derandomize=N is None)


@examples(300)
@given(SEEDS)
def test_constructors_keep_the_meaning(seed):
    e, env = case(seed)
    assert X.evaluate(rebuilt(e), env) == X.evaluate(e, env) == reference(e, env)


def _bv_value(e, env):
    t = z3_bv.to_bv(e)
    subs = [(z3.BitVec(s.name, s.width), z3.BitVecVal(env[s.name], s.width)) for s in X.symbols(e).values()
            if s is not ARRAY]
    f = z3.Function("sel_arr", z3.BitVecSort(64), z3.BitVecSort(32))
    solver = z3.Solver()
    solver.add(*[f(z3.BitVecVal(k, 64)) == v for k, v in env["arr[]"].items()])
    solver.add(z3.ForAll([z3.BitVec("o", 64)], z3.Or(*[z3.BitVec("o", 64) == k for k in env["arr[]"]],
                                                     f(z3.BitVec("o", 64)) == 0)))
    out = z3.BitVec("out", e.width)
    solver.add(out == z3.substitute(t, *subs) if subs else out == t)
    return solver, out


def _floats(e):
    return any(isinstance(n, Op) and n.op in X.FLOAT_OPS for n in X.walk(e))


@examples(150)
@given(SEEDS)
def test_z3_bitvector_backend(seed):
    e, env = case(seed)
    want = reference(e, env)
    solver, out = _bv_value(e, env)
    if _floats(e):       # uninterpreted: the exact value must be possible
        solver.add(out == want)
        assert solver.check() == z3.sat
    else:
        solver.add(out != want)
        assert solver.check() == z3.unsat


@examples(150)
@given(SEEDS)
def test_z3_integer_backend(seed):
    e, env = case(seed)
    if any(isinstance(n, Op) and n.op == "sel" for n in X.walk(e)):
        e = X.substitute(e, {})       # arrays: covered by the bit-vector test
        if any(isinstance(n, Op) and n.op == "sel" for n in X.walk(e)):
            return
    want = reference(e, env)
    enc = z3_int.IntEncoder({s: (env[s], env[s]) for s in X.symbols(e)})
    t = enc.enc(e)
    s = z3.Solver()
    s.add(*enc.side)
    s.push()
    s.add(t == want)
    assert s.check() == z3.sat                 # exact (or over-approximated) value possible
    s.pop()
    if not enc.abstracted:
        s.add(t != want)
        assert s.check() == z3.unsat           # and the only one when nothing was abstracted


@examples(300)
@given(SEEDS)
def test_vector_backend(seed):
    e, env = case(seed)
    venv = {k: np.array([v], dtype=np.uint64) for k, v in env.items() if not k.endswith("[]") and int(k[1:]) <= 64}
    try:
        got = vector.vec(e, venv, {}, [0])
    except vector.NoVec:
        with pytest.raises(vector.NoVec):       # the compiled form refuses the same expressions
            vector.Program([e]).run(venv)
        return
    assert int(np.asarray(got).reshape(-1)[0]) == reference(e, env)
    compiled, = vector.Program([e, e]).run(venv)[:1]     # a node shared by two outputs: evaluated once
    assert int(np.asarray(compiled).reshape(-1)[0]) == reference(e, env)


@examples(300)
@given(SEEDS)
def test_straight_line_python_backend(seed):
    """pyfunc's compiled function gives the exact meaning, as the claim after conditions that
    hold (a node shared by a condition and the claim computed once), None after one that
    fails, and evaluate's answer where its eager form reads an array the model lacks."""
    e, env = case(seed)
    want = reference(e, env)
    holds = Op("eq", (e, Const(want, e.width)), 1)
    assert pyfunc.Checker([holds, e]).value(env) == want
    assert pyfunc.Checker([Op("not", (holds,), 1), e]).value(env) is None
    bare = {k: v for k, v in env.items() if not k.endswith("[]")}
    try:
        lazy = X.evaluate(e, bare)
    except KeyError:
        lazy = None                     # the claim itself reads the array: no value
    assert pyfunc.Checker([e]).value(bare) == lazy


def test_straight_line_python_is_lazy_where_evaluate_is():
    """An array read only in the arm an ite does not take: evaluate needs no array, nor does
    the compiled check (its eager form raises, and it answers by evaluate)."""
    x = Sym("x32", 32)
    read = Op("sel", (ARRAY, Op("zext", (x,), 64)), 32)
    e = Op("ite", (Op("eq", (x, Const(0, 32)), 1), Const(7, 32), read), 32)
    assert pyfunc.Checker([e]).value({"x32": 0}) == 7
    assert pyfunc.Checker([e]).value({"x32": 4}) is None
    assert pyfunc.Checker([e]).value({"x32": 4, "arr[]": {4: 9}}) == 9
    assert pyfunc.Checker([e]).value({}) == 7           # a symbol the model lacks reads 0


def _agrees(e, env, memo_i, memo_m):
    """Every node of ``e`` has its int-mode value equal to its machine value."""
    return all(memo_i.get(id(n)) == memo_m.get(id(n)) for n in X.walk(e) if isinstance(n, Op))


@examples(300)
@given(SEEDS)
def test_int_mode_and_sympy_agree_with_the_machine_where_nothing_wraps(seed):
    """int mode (backends.ideal) and the sympy reading leave the machine meaning only where
    a value wraps: on an expression where no node wraps, all three agree."""
    e, env = case(seed)
    if any(isinstance(n, Op) and n.op in ("sel", "sext", "slt", "sle", "ashr", "mulhs") for n in X.walk(e)):
        return                              # read on signed values: no unsigned integer reading
    e = rebuilt(e)
    mi, mm = {}, {}
    iv = ideal.ideal_eval(e, env, set(), mi)
    mv = X.evaluate(e, env, mm)
    if not _agrees(e, env, mi, mm):
        return
    assert iv == mv
    if all(n.op in exact.EXACT for n in X.walk(e) if isinstance(n, Op)):
        try:
            assert exact.value(e, env) == mv          # the exact backend over ints, where nothing wraps
        except ZeroDivisionError:
            pass                                      # x // 0: no unbounded-integer value
    try:
        r = sympy_text.to_sympy(e).subs({k: v for k, v in env.items() if not k.endswith("[]")})
    except ZeroDivisionError:
        return                              # Mod(x, 0): the display reading has no value there
    if r.is_Integer:
        assert int(r) == mv


def test_every_backend_covers_the_registry():
    for table in (z3_bv.BV, z3_int.INT, ideal.IDEAL, sympy_text.SYMPY, sympy_text.NOWRAP, X.CONSTRUCT):
        require_backend("test", table)
    require_backend("test", vector.VECTOR, vector.UNSUPPORTED)
    require_backend("test", exact.EXACT, exact.UNSUPPORTED)
    require_backend("test", pyfunc.PYTHON)


def test_a_gap_is_an_error():
    table = dict(z3_bv.BV)
    del table["sel"]
    with pytest.raises(BackendGap, match="missing \\['sel'\\]"):
        require_backend("toy", table)
    with pytest.raises(BackendGap, match="unknown \\['fma'\\]"):
        require_backend("toy", dict(z3_bv.BV, fma=None))


def test_extract_of_a_shared_dag_stays_a_dag_and_means_the_same():
    """Bits 15..8 of x_16, where x_{i+1} = (x_i & y) ^ (x_i | z): the expression is a DAG of 3
    nodes a level (x_i is shared), a tree of 2**16 leaves.  Pushing the extract through the
    bitwise operators visits each (node, bits) once, so the result is a DAG of a few nodes a
    level (a bf16 packing loop of gfx942 a32_rtne_psskddv grew a scan worker past 20 GB), and
    it evaluates as the plain extract does."""
    from addrsim.ir.expr import evaluate
    y, z, x = X.Sym("y", 32, "shape"), X.Sym("z", 32, "shape"), X.Sym("x", 32, "shape")
    e = x
    for _ in range(16):
        e = X.xor(X.and_(e, y), X.or_(e, z))
    got = X.extract(e, 15, 8)
    assert sum(1 for _ in X.walk(got)) < 10 * 16
    env = {"x": 0x12345678, "y": 0x0F0F00FF, "z": 0x00F0F000}
    assert evaluate(got, env) == (evaluate(e, env) >> 8) & 0xFF
