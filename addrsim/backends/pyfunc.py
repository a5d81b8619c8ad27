"""Straight-line Python for a condition list and a claim evaluated at many models.

Owns :data:`PYTHON` (operator -> Python expression text, checked against
:data:`addrsim.ir.ops.OPS` at import), :class:`Checker` and :data:`CHECKERS`.  May import
addrsim.ir only.

Minimisation asks "does this model satisfy the conditions and break the claim?" thousands of
times over one query (:func:`addrsim.prove.query.violates`: 7362 times over 657,433
top-level evaluations on gfx942 bwd_hd64_bf16_a32_rtna_pssk_group, 14.4 of 66 CPU s in
:func:`addrsim.ir.expr.evaluate`'s recursion, 2026-12-07).  A :class:`Checker` turns the
expressions' DAG into one Python function, each shared node computed once into a local, so
a model costs one call.

Values are exact unsigned integers, as :func:`addrsim.ir.expr.evaluate` gives them: each
template below is the registry's meaning written out (``tests/test_ops.py`` checks every
operator at random and boundary values); the others call the meaning itself.  The function
is eager where ``evaluate`` is lazy (both arms of an ``ite`` are computed), so it can raise
where ``evaluate`` would not (an array the model lacks, read only in the arm not taken):
:meth:`Checker.value` then answers by ``evaluate``, so its answer is always ``evaluate``'s.
No text of a model file reaches the generated source: symbol names are read from a tuple
by index, and the only literals are integers.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Sym, mask
from addrsim.ir.ops import OPS, require_backend
from addrsim.backends.vector import IdCache


def _m(w: int) -> str:
    return hex(mask(w))


#: operator -> f(args, arg widths, params, width) -> Python expression text; CALL: the
#: registry's meaning is called (rare operators: signed, division, binary32)
CALL = None
PYTHON = {
    "add": lambda a, ws, p, w: f"({a[0]} + {a[1]}) & {_m(w)}",
    "sub": lambda a, ws, p, w: f"({a[0]} - {a[1]}) & {_m(w)}",
    "mul": lambda a, ws, p, w: f"({a[0]} * {a[1]}) & {_m(w)}",
    "mulhu": lambda a, ws, p, w: f"(({a[0]} * {a[1]}) >> {w}) & {_m(w)}",
    "and": lambda a, ws, p, w: f"{a[0]} & {a[1]}",
    "or": lambda a, ws, p, w: f"{a[0]} | {a[1]}",
    "xor": lambda a, ws, p, w: f"{a[0]} ^ {a[1]}",
    "not": lambda a, ws, p, w: f"~{a[0]} & {_m(w)}",
    "shl": lambda a, ws, p, w: f"(({a[0]} << {a[1]}) & {_m(w)} if {a[1]} < {w} else 0)",
    "lshr": lambda a, ws, p, w: f"({a[0]} >> {a[1]} if {a[1]} < {w} else 0)",
    "zext": lambda a, ws, p, w: f"{a[0]}",
    "extract": lambda a, ws, p, w: f"({a[0]} >> {p[1]}) & {_m(w)}",
    "concat": lambda a, ws, p, w: f"({a[0]} << {ws[1]}) | {a[1]}",
    "ite": lambda a, ws, p, w: f"({a[1]} if {a[0]} else {a[2]})",
    "eq": lambda a, ws, p, w: f"(1 if {a[0]} == {a[1]} else 0)",
    "ult": lambda a, ws, p, w: f"(1 if {a[0]} < {a[1]} else 0)",
    "ule": lambda a, ws, p, w: f"(1 if {a[0]} <= {a[1]} else 0)",
    "sel": lambda a, ws, p, w: f"A[{a[0]}].get({a[1]}, 0) & 0xffffffff",   # a[0]: the array's index
    **{n: CALL for n in ("mulhs", "ashr", "sext", "slt", "sle", "udiv", "urem",
                         "f32_from_u32", "f32_rcp", "f32_mul", "u32_from_f32")},
}
require_backend("pyfunc", PYTHON)


class Checker:
    """The conditions ``conds`` and the claim ``claim`` compiled into one function of a model
    (symbol name -> int, each array under ``name[]`` as byte offset -> int32 word; a symbol
    the model lacks reads 0, as :func:`addrsim.prove.query.env_of` gives it)."""

    def __init__(self, exprs: Sequence[Expr]):
        self.exprs = tuple(exprs)           # kept: CHECKERS is keyed by their ids
        *self.conds, self.claim = self.exprs
        self._fn = _compile(self.conds, self.claim)

    def value(self, model: Dict[str, object]) -> Optional[int]:
        """The claim's value when every condition is 1 at ``model``, else None; None also
        when a symbol ``evaluate`` needs has no value (as :func:`addrsim.prove.query._claim_value`)."""
        try:
            return self._fn(model)
        except Exception:       # noqa: BLE001 -- the eager form read what the lazy one need not
            return _lazy(self.conds, self.claim, model)


CHECKERS = IdCache(Checker)
"""Checkers by the identity of their expressions (conditions, then the claim): a memo."""


def _lazy(conds, claim, model) -> Optional[int]:
    env = {k: v for k, v in model.items() if k.endswith("[]")}
    for e in list(conds) + [claim]:
        for s in X.symbols(e).values():
            env.setdefault(s.name, model.get(s.name, 0))
    memo: dict = {}
    try:
        return X.evaluate(claim, env, memo) if all(X.evaluate(c, env, memo) == 1 for c in conds) else None
    except KeyError:
        return None


def _compile(conds: Sequence[Expr], claim: Expr):
    names: List[str] = []
    arrays: List[str] = []
    meanings: list = []
    index: Dict[int, str] = {}
    body: List[str] = []
    emit = lambda e: _emit(e, index, body, names, arrays, meanings)  # noqa: E731
    for c in conds:
        body.append(f"    if {emit(c)} != 1: return None")
    body.append(f"    return {emit(claim)}")
    # a model without an array the expressions read raises here (Checker.value then asks evaluate)
    lines = ["def check(model):", "    g = model.get", "    A = [model[n] for n in ARRAYS]" if arrays else ""] + body
    scope = {"N": tuple(names), "ARRAYS": tuple(arrays), "M": tuple(meanings)}
    exec(compile("\n".join(lines), "<addrsim.backends.pyfunc>", "exec"), scope)   # noqa: S102 -- source built here from the IR
    return scope["check"]


def _emit(root: Expr, index: Dict[int, str], lines: List[str], names: List[str], arrays: List[str],
          meanings: list) -> str:
    """The local holding ``root``'s value, appending the statements of its nodes not yet
    computed (post-order, shared nodes once)."""
    stack = [(root, False)]
    while stack:
        e, ready = stack.pop()
        if id(e) in index:
            continue
        if isinstance(e, Const):
            index[id(e)] = str(e.value)
            continue
        if isinstance(e, Sym):
            names.append(e.name)
            lines.append(f"    t{len(index)} = g(N[{len(names) - 1}], 0) & {_m(e.width)}")
            index[id(e)] = f"t{len(index)}"
            continue
        args = e.args[1:] if e.op == "sel" else e.args        # sel: the array is read by name
        if not ready:
            stack.append((e, True))
            stack.extend((a, False) for a in reversed(args) if id(a) not in index)
            continue
        vals = [index[id(a)] for a in args]
        if e.op == "sel":
            arrays.append(e.args[0].name + "[]")
            text = PYTHON["sel"]([str(len(arrays) - 1)] + vals, None, e.params, e.width)
        elif PYTHON[e.op] is CALL:
            meanings.append(OPS[e.op].meaning)
            ws = tuple(a.width for a in e.args)
            text = f"M[{len(meanings) - 1}]([{', '.join(vals)}], {ws}, {tuple(e.params)}, {e.width})"
        else:
            text = PYTHON[e.op](vals, tuple(a.width for a in e.args), e.params, e.width)
        name = f"t{len(index)}"
        lines.append(f"    {name} = {text}")
        index[id(e)] = name
    return index[id(root)]
