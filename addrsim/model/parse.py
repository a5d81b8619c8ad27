"""A safe parser for the arithmetic written in model files.

Model files hold expressions such as ``"u32(batch_stride_q * elem)"`` or
``"seqlen_k % 64 == 0"``.  They are parsed with :func:`ast.parse` in ``eval`` mode and then
*walked*; nothing is ever evaluated as Python.  Only integer constants, known names, ``+ - *
/ // % << >> &``, unary minus, comparisons, ``and``/``or``/``not`` and the functions ``u32``
(the host's cast to a 32-bit unsigned integer), ``min``, ``max`` and indexing of a declared
int32 array (``seqstart_q[batch_id]``: ``names["seqstart_q[]"]`` holds the array symbol) are
accepted.  The result is
an IR expression (:mod:`addrsim.ir.expr`) of width 64 (width 1 for conditions); ``/`` is exact
integer division (the model must make it exact, e.g. with ``nhead_q % nhead_k == 0``).
"""
from __future__ import annotations

import ast
import warnings
from typing import Callable, Dict

from addrsim.backends import exact
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr

W = 64
EXACT_CASTS = "u32()"   # a key of ``names``: when present, u32(x) is x (the exact value before the host's cast)
MAX_DEPTH = 100     # nesting of the syntax tree; deeper would exhaust Python's recursion limit


class ModelExprError(ValueError):
    """An expression that is not valid model arithmetic (the message says why).  ``unknown``
    is the name that no model defines, when that is the reason (else None)."""

    def __init__(self, msg: str, unknown: str = None):
        super().__init__(msg)
        self.unknown = unknown


def parse(text: str, names: Dict[str, Callable[[], Expr]] | Dict[str, Expr]) -> Expr:
    """Parse ``text`` into a 64-bit IR expression (1-bit for a condition).

    ``names`` maps each allowed name to its IR value (or a zero-argument function giving it).
    Raises ModelExprError for syntax errors, unknown names and disallowed constructs."""
    if not isinstance(text, (str, int)):
        raise ModelExprError(f"expected an expression string, got {type(text).__name__}")
    if isinstance(text, int):
        return Const(text, W)
    if len(text) > 2000:
        raise ModelExprError("expression longer than 2000 characters")
    try:
        with warnings.catch_warnings():      # e.g. SyntaxWarning "invalid decimal literal" on stderr
            warnings.simplefilter("ignore")
            tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ModelExprError(f"syntax error in {text!r}: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:   # null bytes (Python < 3.12), too deep for the parser
        raise ModelExprError(f"cannot parse {text[:80]!r}: {type(e).__name__}") from None
    if _depth(tree.body) > MAX_DEPTH:
        raise ModelExprError(f"expression nested deeper than {MAX_DEPTH} levels: {text[:80]!r}...")
    return _conv(tree.body, names, text)


def _depth(node) -> int:
    """Depth of the syntax tree, without recursion."""
    deepest, todo = 0, [(node, 1)]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        todo.extend((c, d + 1) for c in ast.iter_child_nodes(n))
    return deepest


def _name(n, names, text):
    if n not in names:
        raise ModelExprError(f"unknown name {n!r} in {text!r}", unknown=n)
    v = names[n]
    v = v() if callable(v) else v
    if v.width != W:
        v = X.zext(v, W)
    return v


def _bool(e: Expr) -> Expr:
    return e if e.width == 1 else X.bnot(X.eq(e, Const(0, e.width)))


def _conv(node, names, text) -> Expr:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        if node.value < 0 or node.value >= 1 << 63:
            raise ModelExprError(f"constant {node.value} out of range in {text!r}")
        return Const(node.value, W)
    if isinstance(node, ast.Name):
        return _name(node.id, names, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _conv(node.operand, names, text)
        if v.width != W:
            raise ModelExprError(f"arithmetic on a condition in {text!r}")
        return X.sub(Const(0, W), v)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return X.bnot(_bool(_conv(node.operand, names, text)))
    if isinstance(node, ast.BinOp):
        a, b = _conv(node.left, names, text), _conv(node.right, names, text)
        if a.width != W or b.width != W:
            raise ModelExprError(f"arithmetic on a condition in {text!r}")
        ops = {ast.Add: X.add, ast.Sub: X.sub, ast.Mult: X.mul, ast.Div: X.udiv, ast.FloorDiv: X.udiv,
               ast.Mod: X.urem, ast.LShift: X.shl, ast.RShift: X.lshr, ast.BitAnd: X.and_}
        f = ops.get(type(node.op))
        if f is None:
            raise ModelExprError(f"operator {type(node.op).__name__} not allowed in {text!r}")
        return f(a, b)
    if isinstance(node, ast.Compare):
        out = None
        left = _conv(node.left, names, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _conv(comp, names, text)
            if right.width != left.width:
                raise ModelExprError(f"comparison of a condition with a number in {text!r}")
            cmp = {ast.Eq: lambda a, b: X.eq(a, b), ast.NotEq: lambda a, b: X.bnot(X.eq(a, b)),
                   ast.Lt: X.ult, ast.LtE: X.ule, ast.Gt: lambda a, b: X.ult(b, a),
                   ast.GtE: lambda a, b: X.ule(b, a)}.get(type(op))
            if cmp is None:
                raise ModelExprError(f"comparison {type(op).__name__} not allowed in {text!r}")
            c = cmp(left, right)
            out = c if out is None else X.band(out, c)
            left = right
        return out
    if isinstance(node, ast.BoolOp):
        vals = [_bool(_conv(v, names, text)) for v in node.values]
        out = vals[0]
        for v in vals[1:]:
            out = X.band(out, v) if isinstance(node.op, ast.And) else X.bor(out, v)
        return out
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        arr = names.get(node.value.id + "[]")
        if arr is None:
            raise ModelExprError(f"{node.value.id!r} is not an array in {text!r}")
        idx = _conv(node.slice, names, text)
        if idx.width != W:
            raise ModelExprError(f"array index is a condition in {text!r}")
        return X.zext(X.select(arr, X.mul(idx, Const(4, W))), W)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        fn = node.func.id
        args = [_conv(a, names, text) for a in node.args]
        if any(a.width != W for a in args):
            raise ModelExprError(f"function {fn}() of a condition in {text!r}")
        if fn == "u32" and len(args) == 1:
            if EXACT_CASTS in names:
                return args[0]
            return X.zext(X.extract(args[0], 31, 0), W)
        if fn in ("min", "max") and len(args) == 2:
            a, b = args
            return X.ite(X.ult(a, b), a, b) if fn == "min" else X.ite(X.ult(a, b), b, a)
        raise ModelExprError(f"function {fn}() with {len(args)} arguments not allowed in {text!r}")
    raise ModelExprError(f"construct {type(node).__name__} not allowed in {text!r}")


# ------------------------------------------------------------------ the stride profile

#: the syntax a stride expression may use (models/layouts.yaml, proofs/_layouts.py): non-negative
#: integer constants, names, + - * / // and parentheses
_STRIDE_NODES = (ast.Expression, ast.BinOp, ast.Constant, ast.Name, ast.Load, ast.Add, ast.Sub, ast.Mult,
                 ast.Div, ast.FloorDiv)


def compile_stride(text, names) -> Callable[[dict], object]:
    """A stride expression (``"nhead_q*(seqlen_q + 64)"``) over the shape variables ``names``
    as a function of an environment (name -> int, or name -> Z3 integer term): the exact
    integer value, ``/`` and ``//`` integer division.  Parsed by :func:`parse` (never
    evaluated as Python) under the stride profile; raises ModelExprError for anything else
    (unary minus, calls, comparisons, floats, unknown names)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return lambda env, c=text: c
    if not isinstance(text, str) or len(text) > 500:
        raise ModelExprError(f"not a stride expression: {text!r}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ModelExprError(f"syntax error in {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _STRIDE_NODES) or (isinstance(node, ast.Constant) and type(node.value) is not int):
            raise ModelExprError(f"disallowed construct {type(node).__name__} in stride {text!r}")
    e = parse(text, {n: X.Sym(n, W, "shape") for n in names})
    return lambda env: exact.value(e, env)
