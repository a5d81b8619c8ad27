"""Wrap sites: where, on a counterexample, a machine result leaves the exact (``int`` mode) one.

Owns :class:`WrapSite` and :func:`wrap_sites`.  May import addrsim.ir and addrsim.backends.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from addrsim.backends.ideal import ideal_evaluate, kept_wraps
from addrsim.ir import expr as X
from addrsim.ir.expr import Const, Expr, Op


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
    shape_boundary: str = ""  # the boundary in shape variables only (lane 0 of the last workgroup)
    signed: bool = False      # a signed operand (``v_mul_i32_i24`` reads 24 bits as signed): wraps at 2**(width-1)

    def describe(self) -> str:
        where = (f"the host's u32 cast of kernel argument {self.name}" if self.kind == "argument"
                 else f"{self.text} at {self.pc:#x}" if self.pc is not None
                 else f"a {self.width}-bit operation built outside any one instruction (a merged path or a "
                      f"replaced division idiom)")
        s = "" if self.matters else "(does not change the address here) "
        s += (f"{where}: exact value {self.exact} does not fit in {self.width} bits"
              f"{' as a signed operand' if self.signed else ''} (machine value {self.machine})")
        if self.boundary:
            s += f"; wraps when {self.boundary}"
        return s


def wrap_sites(address: Expr, arg_exprs: Dict[str, Expr], env: Dict[str, int],
               origin: Dict[int, tuple], last: Optional[Dict[str, Expr]] = None) -> List[WrapSite]:
    """Wrap sites in the cone of ``address`` (the extracted address, in kernel-argument
    terms) at the concrete point ``env`` (shape, grid ids, lane, pointer arguments, arrays).

    ``arg_exprs`` maps kernel-argument names to their contract expressions in shape terms
    (a ``u32`` cast is ``extract(e, 31, 0)``): the machine value of an argument is the cast
    one, the exact value the uncast one.  ``origin`` maps ``id(node)`` to ``(node, pc,
    text)`` of the instruction that produced it (recorded by the symbolic machine); nodes
    built inside one instruction's semantics take the nearest producing ancestor.  ``last``
    (optional, :func:`last_workgroup`): each site's boundary is also given in shape variables.

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
                                      **_formula(inner, s.width, last)))
    owner = _owners(address, origin)
    m_memo: dict = {}
    i_memo: dict = {}
    try:
        X.evaluate(address, menv, m_memo)
        ideal_evaluate(address, ienv, keep, i_memo)
    except KeyError:
        return sites
    for n in X.walk(address):
        if not isinstance(n, Op) or id(n) in keep or n.op not in SITE_OPS:
            continue
        mv, iv = m_memo.get(id(n)), i_memo.get(id(n))
        if mv is None or iv is None or mv == iv or _fits(n, iv):
            continue
        if any(m_memo.get(id(a)) != i_memo.get(id(a)) for a in n.args if not isinstance(a, Const)):
            continue   # an operand already wrapped: not where the wrap starts
        pc, text = owner.get(id(n), (None, ""))
        signed = n.op == "sext"
        value = n.args[0] if signed else n      # a sign extension wraps its operand
        width = value.width
        sub = X.substitute(value, {k: v for k, v in arg_exprs.items() if k in X.symbols(value)})
        site_keys.append(("node", id(n)))
        sites.append(WrapSite("instruction", width, mv, iv, pc=pc, text=text, signed=signed,
                              **_formula(sub, width - signed, last, negative=iv < 0)))
    try:
        exact_addr = i_memo[id(address)]
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


SITE_OPS = ("add", "sub", "mul", "shl", "extract", "sext")
"""The operations a wrap can start at: 32-bit sums, differences, products, shifts, truncations,
and sign extensions of an operand read as signed (``v_mul_i32_i24``/``v_mad_i32_i24`` read
bits 23:0 of each operand as a signed 24-bit value: ``addrsim/isa/alu.py`` ``_i24``, as LLVM's
AMDGPU backend selects it for ``ashr(shl(x, 8), 8)`` operands, ``test/CodeGen/AMDGPU/mul_int24.ll``)."""


def _fits(n: Op, exact: int) -> bool:
    """Does the exact value of ``n`` fit where the machine keeps it: ``[0, 2**width)``, or for
    a sign extension the signed range of its operand's width?"""
    if n.op == "sext":
        half = 1 << (n.args[0].width - 1)
        return -half <= exact < half
    return 0 <= exact < (1 << n.width)


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


def _formula(e: Expr, width: int, last: Optional[Dict[str, Expr]] = None, negative: bool = False) -> dict:
    """The exact value of ``e`` as sympy text (``formula``), the boundary ``value >= 2**width``
    with the constant factor divided out ("nhead_q*seqlen_q >= 2**24", ``boundary``), and,
    given ``last`` (grid id or lane name -> its value at the last workgroup, lane 0: see
    :func:`last_workgroup`), the same boundary in shape variables only (``shape_boundary``).
    The shape boundary is given only when the value does not decrease as a grid id grows
    (every term of the expanded value has a positive coefficient): it is then exactly the
    shapes at which lane 0 of some workgroup wraps here.  Display only: {} when sympy cannot
    read ``e`` or it has more than 400 nodes.  ``negative``: the exact value is below 0 here
    (a difference that borrows): the boundary is ``value < 0``, with no shape boundary."""
    try:
        import sympy
        from addrsim.backends.sympy_text import to_sympy
        if sum(1 for _ in X.walk(e)) > 400:
            return {}
        f = sympy.factor_terms(sympy.expand(to_sympy(e)))
        out = {"formula": str(f), "boundary": f"{f} < 0" if negative else _boundary(f, width)}
        if last and not negative:
            at = {sympy.Symbol(k, integer=True, nonnegative=True): to_sympy(v) for k, v in last.items()
                  if k != GQA_EXACT}
            terms = sympy.Add.make_args(sympy.expand(f))
            if any(x in f.free_symbols for x in at) and all(t.as_coeff_Mul()[0] > 0 for t in terms):
                g = _gqa_last(sympy.expand(f.subs(at)), last)
                if not (g.free_symbols & set(at)) and g.free_symbols:
                    out["shape_boundary"] = _boundary(g, width)
        return out
    except Exception:   # display only
        return {}


GQA_EXACT = "nhead_q % nhead_k == 0"
"""The key ``last`` holds (value 1) when the domain has an integer GQA ratio (:func:`_gqa_last`)."""


def _gqa_last(g, last: Dict[str, Expr]):
    """``g`` (sympy) with a lane mask ``and(0, m)`` at lane 0 read as 0 and the last key head
    ``floor((nhead_q - 1)/floor(nhead_q/nhead_k))`` written ``nhead_k - 1``, which it is
    wherever nhead_q is a multiple of nhead_k (``last`` holds GQA_EXACT), and factored."""
    import sympy
    g = g.replace(lambda e: getattr(e.func, "__name__", "") == "and" and any(a == 0 for a in e.args),
                  lambda e: sympy.Integer(0))      # a lane mask at lane 0
    if GQA_EXACT in last:
        nq, nk = (sympy.Symbol(v, integer=True, nonnegative=True) for v in ("nhead_q", "nhead_k"))
        key = (nq - 1) / sympy.floor(nq / nk)
        g = sympy.expand(g.replace(lambda e: isinstance(e, sympy.floor) and sympy.expand(e.args[0] - key) == 0,
                                   lambda e: nk - 1))
    return sympy.factor_terms(g)


def _boundary(f, width: int) -> str:
    """``f >= 2**width`` with a positive constant factor of ``f`` divided out."""
    import sympy
    lim = sympy.Integer(2) ** width
    coeff, rest = f.as_coeff_Mul()
    if coeff > 0 and (rest.is_Mul or rest.is_Symbol):
        q = sympy.ceiling(lim / coeff)
        k = sympy.log(q, 2)
        rhs = f"2**{k}" if k.is_Integer else str(q)
        return f"{rest} >= {rhs}"
    return f"{f} >= 2**{width}"


def last_workgroup(grid_count: Dict[str, Expr], lane: str, gqa_exact: bool = False) -> Dict[str, Expr]:
    """Grid id name -> its last value (the axis's workgroup count minus 1, 64-bit, in shape
    terms from the model's ``grid.<axis>.count``), and the lane at 0: where a site's value
    is largest for a shape when it grows with the ids (:func:`_formula`).  ``gqa_exact``:
    the domain makes nhead_q a multiple of nhead_k (the family's traits)."""
    out: Dict[str, Expr] = {k: X.sub(c, Const(1, c.width)) for k, c in grid_count.items()}
    out[lane] = Const(0, 32)
    if gqa_exact:
        out[GQA_EXACT] = Const(1, 1)
    return out
