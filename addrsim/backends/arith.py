"""The two arithmetic modes, and where a machine result leaves the ideal one.

``bv`` is what the hardware computes: every IR operator truncates to its width (the MI300 /
CDNA4 ISA guides, chapters 4 and 6: SALU and VALU integer results are truncated to the
destination), and the host's ``u32(...)`` casts truncate the byte strides it passes.

``int`` is the same program over unbounded integers, the reading a kernel engineer has in
mind when writing ``batch_id * BAs >> 6``:

* ``add``, ``sub``, ``mul``, ``shl`` by a constant, and truncations (``extract`` of the low
  bits of a value, e.g. the host's ``u32`` cast) are exact: nothing wraps.
* Multiword arithmetic keeps its meaning.  A value split into 32-bit halves (a 48-bit pointer,
  the result of ``v_mad_u64_u32``) has exact halves: the low half is the value modulo 2**32
  and the high half the rest, so ``concat`` of the two is the whole value.  A 32-bit product
  whose high half is also computed (``s_mul_i32`` next to ``s_mul_hi_u32`` on the same
  operands) is a low half too.  Carries (``s_add_u32``'s SCC) are then 0, and the pair is the
  exact sum.
* An added or subtracted constant with its sign bit set is negative (``s_add_u32 s0, s0,
  -64`` is a subtraction), as the assembler's sign-extended immediates mean.
* Comparisons compare the exact values; bit operations the integers have no exact reading
  for (``xor``, variable shifts, ...) apply the hardware operator to the operands reduced to
  the node's width.

:func:`kept_wraps` finds the multiword low halves, :func:`ideal_eval` evaluates an expression
in ``int`` mode on concrete values (the reference the Z3 encoding of
:class:`addrsim.backends.smt.IntEncoder` with ``ideal=True`` is checked against), and
:func:`wrap_sites` finds, on a counterexample, the nodes whose machine result leaves the
exact one: the instruction that wraps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set, Tuple

from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op, Sym

ARITH_MODES = ("bv", "int")


def kept_wraps(exprs: Iterable[Expr]) -> Set[int]:
    """Ids of the nodes of ``exprs`` that are the low half of a multiword value and so keep
    their truncation in ``int`` mode: ``extract(e, k, 0)`` where the upper bits of ``e`` are
    also extracted, and ``mul(a, b)`` where ``mulhu(a, b)`` (same operands, structurally) also
    occurs."""
    split: Set[int] = set()
    hi_products: Set[Tuple[int, int]] = set()
    nodes: List[Op] = []
    hm: dict = {}
    for e in exprs:
        for n in X.walk(e):
            if not isinstance(n, Op):
                continue
            if n.op == "extract" and n.params[1] > 0:
                split.add(X.shash(n.args[0], hm))
            elif n.op == "mulhu":
                a, b = (X.shash(x, hm) for x in n.args)
                hi_products.update({(a, b), (b, a)})
            elif n.op in ("extract", "mul"):
                nodes.append(n)
    keep = set()
    for n in nodes:
        if n.op == "extract" and X.shash(n.args[0], hm) in split:
            keep.add(id(n))
        elif n.op == "mul" and (X.shash(n.args[0], hm), X.shash(n.args[1], hm)) in hi_products:
            keep.add(id(n))
    return keep


def signed_const(c: Expr) -> Optional[int]:
    """The value of a constant operand read as a sign-extended immediate, else None."""
    if isinstance(c, Const):
        return X.to_signed(c.value, c.width) if c.width > 1 else c.value
    return None


def ideal_eval(e: Expr, env: Dict[str, int], keep: Set[int], memo: Optional[dict] = None) -> int:
    """Value of ``e`` in ``int`` mode (see the module docstring) on concrete symbol values
    ``env`` (as for :func:`addrsim.ir.expr.evaluate`; arrays as ``name + "[]"``).  ``keep``
    from :func:`kept_wraps`.  Raises KeyError naming a symbol without a value."""
    memo = {} if memo is None else memo
    stack = [(e, False)]
    while stack:
        n, ready = stack.pop()
        k = id(n)
        if k in memo:
            continue
        if isinstance(n, Const):
            memo[k] = n.value
            continue
        if isinstance(n, Sym):
            memo[k] = env[n.name]      # not masked: an exact value may exceed the symbol's width
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if id(a) not in memo)
            continue
        memo[k] = _ideal_op(n, [memo[id(a)] for a in n.args], keep)
    return memo[id(e)]


def _ideal_op(n: Op, a: List[int], keep: Set[int]) -> int:
    op, w = n.op, n.width
    machine = lambda: X.CONCRETE_OPS[op]([v & X.mask(x.width) for v, x in zip(a, n.args)],  # noqa: E731
                                         [x.width for x in n.args], n.params, w)
    if id(n) in keep:
        return machine()
    if op in ("add", "sub"):
        b = signed_const(n.args[1])
        b = a[1] if b is None else b
        if op == "add":
            c = signed_const(n.args[0])
            return (a[0] if c is None else c) + b
        return a[0] - b
    if op == "mul":
        return a[0] * a[1]
    if op == "shl" and isinstance(n.args[1], Const):
        return a[0] << n.args[1].value
    if op == "lshr" and isinstance(n.args[1], Const):
        return a[0] >> n.args[1].value
    if op in ("zext", "sext"):
        return a[0]
    if op == "extract":
        hi, lo = n.params
        return a[0] >> lo if lo else a[0]
    if op == "concat":
        return (a[0] << n.args[1].width) + a[1]
    if op == "mulhu":
        return (a[0] * a[1]) >> w
    if op == "ite":
        return a[1] if a[0] else a[2]
    if op == "eq":
        return int(a[0] == a[1])
    if op in ("ult", "slt"):
        return int(a[0] < a[1])
    if op in ("ule", "sle"):
        return int(a[0] <= a[1])
    if op in ("udiv", "urem") and a[1] > 0:
        return a[0] // a[1] if op == "udiv" else a[0] % a[1]
    if op == "and" and w > 1:
        for x, c in ((a[0], n.args[1]), (a[1], n.args[0])):
            if isinstance(c, Const):
                m = c.value
                if m & (m + 1) == 0:
                    return x & m                       # low mask: exact reading x mod 2**k
                low = (~m) & X.mask(w)
                if low & (low + 1) == 0 and m == X.mask(w) & ~low:
                    return x - (x & low)               # clears the low bits: exact
    if op in ("or", "xor") and w > 1:
        za, zb = n.args
        if X.maxbits(za) <= X.lowzeros(zb) or X.maxbits(zb) <= X.lowzeros(za):
            return a[0] + a[1]                         # disjoint bits: a sum
    return machine()


def ideal_evaluate(e: Expr, env: Dict[str, int], keep: Set[int], memo: Optional[dict] = None) -> int:
    """:func:`ideal_eval` that also reads ``sel`` (array) nodes from ``env``."""
    memo = {} if memo is None else memo
    for n in X.walk(e):
        if isinstance(n, Op) and n.op == "sel":
            off = ideal_evaluate(n.args[1], env, keep, memo)
            memo[id(n)] = env[n.args[0].name + "[]"].get(off & X.mask(64), 0) & X.mask(32)
    return ideal_eval(e, env, keep, memo)


# ----------------------------------------------------------------------------- wrap sites

@dataclass
class WrapSite:
    """One place where the machine value leaves the exact one although its operands do not:
    ``kind`` "instruction" (``pc``, ``text``) or "argument" (the host's 32-bit cast of kernel
    argument ``name``).  Values are the node's machine and exact values (bytes where the node
    is an address or offset); ``width`` in bits; ``formula`` the exact value in shape terms
    (sympy text) and ``boundary`` the closed-form condition under which it wraps."""

    kind: str
    width: int
    machine: int
    exact: int
    matters: bool = True      # does this wrap alone change the address (exact elsewhere)?
    pc: Optional[int] = None
    text: str = ""
    name: str = ""
    formula: str = ""
    boundary: str = ""

    def describe(self) -> str:
        where = (f"the host's u32 cast of kernel argument {self.name}" if self.kind == "argument"
                 else f"{self.text} at {self.pc:#x}" if self.pc is not None
                 else f"a {self.width}-bit operation built outside any one instruction (a merged path or a "
                      f"replaced division idiom)")
        s = "" if self.matters else "(does not change the address here) "
        s += f"{where}: exact value {self.exact} does not fit in {self.width} bits (machine value {self.machine})"
        if self.boundary:
            s += f"; wraps when {self.boundary}"
        return s


def wrap_sites(address: Expr, arg_exprs: Dict[str, Expr], env: Dict[str, int],
               origin: Dict[int, tuple], shape_names: Optional[Dict[str, Expr]] = None) -> List[WrapSite]:
    """Wrap sites in the cone of ``address`` (the extracted address, in kernel-argument
    terms) at the concrete point ``env`` (shape, grid ids, lane, pointer arguments, arrays).

    ``arg_exprs`` maps kernel-argument names to their contract expressions in shape terms
    (a ``u32`` cast is ``extract(e, 31, 0)``): the machine value of an argument is the cast
    one, the exact value the uncast one.  ``origin`` maps ``id(node)`` to ``(node, pc,
    text)`` of the instruction that produced it (recorded by the symbolic machine); nodes
    built inside one instruction's semantics take the nearest producing ancestor.

    A site ``matters`` when the address computed exactly except at that one site (which
    takes its machine value) differs from the exact address.  Sorted: sites that matter
    first, then host casts, then by pc."""
    keep = kept_wraps([address] + list(arg_exprs.values()))
    menv = dict(env)
    ienv = dict(env)
    sites: List[WrapSite] = []
    site_keys: List[tuple] = []
    mm: dict = {}
    im: dict = {}
    syms = X.symbols(address)
    for name, s in syms.items():
        if s.kind == "arg" and name in arg_exprs:
            ce = arg_exprs[name]
            try:
                mv = X.evaluate(ce, env, mm)
                iv = ideal_evaluate(ce, env, keep, im)
            except KeyError:
                continue
            menv[name], ienv[name] = mv, iv
            if mv != iv:
                inner = ce.args[0] if isinstance(ce, Op) and ce.op == "extract" else ce
                site_keys.append(("arg", name))
                sites.append(WrapSite("argument", s.width, mv, iv, name=name,
                                      **_formula(inner, s.width, shape_names)))
    owner = _owners(address, origin)
    m_memo: dict = {}
    i_memo: dict = {}
    try:
        X.evaluate(address, menv, m_memo)
        ideal_evaluate(address, ienv, keep, i_memo)
    except KeyError:
        return sites
    for n in X.walk(address):
        if not isinstance(n, Op) or id(n) in keep or n.op not in ("add", "sub", "mul", "shl", "extract"):
            continue
        mv, iv = m_memo.get(id(n)), i_memo.get(id(n))
        if mv is None or iv is None or mv == iv or iv < (1 << n.width):
            continue
        if any(m_memo.get(id(a)) != i_memo.get(id(a)) for a in n.args if not isinstance(a, Const)):
            continue   # an operand already wrapped: not where the wrap starts
        pc, text = owner.get(id(n), (None, ""))
        sub = X.substitute(n, {k: v for k, v in arg_exprs.items() if k in X.symbols(n)})
        site_keys.append(("node", id(n)))
        sites.append(WrapSite("instruction", n.width, mv, iv, pc=pc, text=text,
                              **_formula(sub, n.width, shape_names)))
    try:
        exact_addr = i_memo[id(address)]
        nodes = {id(n): n for n in X.walk(address)}
        for site, key in zip(sites, site_keys):
            if key[0] == "arg":
                env2 = dict(ienv, **{key[1]: site.machine})
                site.matters = ideal_evaluate(address, env2, keep, {}) != exact_addr
            else:
                seeded = {key[1]: site.machine}
                site.matters = ideal_evaluate(address, ienv, keep, seeded) != exact_addr
    except KeyError:
        pass
    order = sorted(range(len(sites)), key=lambda i: (not sites[i].matters, sites[i].kind != "argument",
                                                     sites[i].pc if sites[i].pc is not None else 1 << 62))
    return [sites[i] for i in order]


def _owners(root: Expr, origin: Dict[int, tuple]) -> Dict[int, Tuple[int, str]]:
    """For each node under ``root``: (pc, text) of the instruction that produced it or its
    nearest producing ancestor."""
    out: Dict[int, Tuple[int, str]] = {}
    stack = [(root, None)]
    while stack:
        n, inherited = stack.pop()
        if id(n) in out:
            continue
        o = origin.get(id(n))
        mine = (o[1], o[2]) if o is not None and o[0] is n else inherited
        if mine is not None:
            out[id(n)] = mine
        if isinstance(n, Op):
            stack.extend((a, mine) for a in n.args)
    return out


def _formula(e: Expr, width: int, shape_names: Optional[Dict[str, Expr]]) -> dict:
    """The exact value of ``e`` as sympy text, and the boundary ``value >= 2**width`` with
    the constant factor divided out ("nhead_q*seqlen_q >= 2**24")."""
    try:
        import sympy
        from addrsim.backends.sympy_text import to_sympy
        if sum(1 for _ in X.walk(e)) > 400:
            return {}
        f = sympy.factor_terms(sympy.expand(to_sympy(e)))
        lim = sympy.Integer(2) ** width
        coeff, rest = f.as_coeff_Mul()
        if coeff > 0 and (rest.is_Mul or rest.is_Symbol):
            q = sympy.ceiling(lim / coeff)
            k = sympy.log(q, 2)
            rhs = f"2**{k}" if k.is_Integer else str(q)
            return {"formula": str(f), "boundary": f"{rest} >= {rhs}"}
        return {"formula": str(f), "boundary": f"{f} >= 2**{width}"}
    except Exception:   # display only
        return {}
