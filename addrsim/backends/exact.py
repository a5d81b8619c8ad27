"""The exact-integer backend over any number type: Python ints or Z3 integer terms.

Owns :func:`value` and :data:`EXACT` (operator -> meaning over unbounded integers), with
:data:`UNSUPPORTED` (operator -> why there is none), checked against
:data:`addrsim.ir.ops.OPS` at import.  May import addrsim.ir only.

Used for the stride expressions of the models (:func:`addrsim.model.parse.compile_stride`),
which the checked proofs of proofs/ evaluate over Z3 integers: no operator wraps, division is
floor division (Z3's integer division for a positive divisor).
"""
from __future__ import annotations

from addrsim.ir.expr import Const, Expr, Sym
from addrsim.ir.ops import OPS, require_backend


def _div(a, b):
    return a // b if isinstance(a, int) and isinstance(b, int) else a / b


def _mod(a, b):
    return a % b


EXACT = {
    "add": lambda a: a[0] + a[1],
    "sub": lambda a: a[0] - a[1],
    "mul": lambda a: a[0] * a[1],
    "udiv": lambda a: _div(a[0], a[1]),
    "urem": lambda a: _mod(a[0], a[1]),
    "zext": lambda a: a[0],
}
UNSUPPORTED = {op: "no unbounded-integer reading over symbolic numbers" for op in OPS if op not in EXACT}
require_backend("exact integer over ints or Z3 terms (addrsim.backends.exact)", EXACT, UNSUPPORTED)


class NoExact(ValueError):
    """The expression has an operator without an unbounded-integer reading."""


def value(e: Expr, env):
    """The unbounded-integer value of ``e`` with symbols from ``env`` (name -> int or Z3
    integer term).  Raises NoExact for an operator in UNSUPPORTED, KeyError for a symbol
    without a value."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Sym):
        return env[e.name]
    if e.op in UNSUPPORTED:
        raise NoExact(f"operator {e.op}: {UNSUPPORTED[e.op]}")
    return EXACT[e.op]([value(x, env) for x in e.args])
