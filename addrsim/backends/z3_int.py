"""The Z3 integer backend: an exact integer encoding of the bit-vector semantics.

Owns :class:`IntEncoder` and :data:`INT` (operator -> encoding), checked against
:data:`addrsim.ir.ops.OPS` at import.  May import addrsim.ir only.

Every ``w``-bit operation whose result could leave [0, 2**w) is wrapped in ``mod 2**w``;
interval analysis over the domain bounds drops the ``mod`` where no wrap is possible, which is
what makes nonlinear address identities provable (DOMAIN.md section 6).  An ``and`` with a
constant mask of contiguous bits j..k-1 (a lane's wave, ``tid_x & 0x3c0``) is exact:
``x mod 2**k - x mod 2**j``.  Bit operations without an exact integer form (``and``/``or``/``xor`` with arbitrary operands, variable
shifts, ``mulhs``, binary32) become fresh bounded integers and the encoding is marked
``abstracted``: then "unsat" is still a proof, but a model must be checked on the bit-vector
side before it is believed.

A sum or difference read only as a signed value (:func:`signed_reads`: by ``slt``/``sle``, by
another sum or difference of its width, or as the arm of an ``ite`` that selects it only when
it is non-negative) is encoded by its exact value, without ``mod``, wherever its intervals or
facts keep it inside [-2**(w-1), 2**(w-1)): every such reader gives the same result on the
exact value as on its machine value (its residue mod 2**w).  A causal bottom-right kernel's
``seqlen_k - seqlen_q`` and ``kv_tile*T - (seqlen_k - seqlen_q)`` are such values.
"""
from __future__ import annotations

from typing import Dict, Tuple

import z3

from addrsim.ir import expr as X
from addrsim.ir import poly as P
from addrsim.ir.expr import Const, Expr, Op, Sym
from addrsim.ir.ops import FLOAT_OPS, PREDICATES, require_backend
from addrsim.backends.positivity import certify


class IntEncoder:
    """Exact integer encoding of IR nodes, given integer ranges of the symbols.

    ``ranges`` maps symbol names to inclusive (lo, hi); unlisted symbols range over
    [0, 2**width).  With ``ideal=True`` the encoding is of ``int`` mode instead
    (:mod:`addrsim.backends.ideal`): no node wraps except those in ``keep``
    (:func:`addrsim.backends.ideal.kept_wraps`), constants added or subtracted are sign-extended
    immediates, and signed comparisons compare the exact values.  Nodes in ``nowrap`` were
    proved not to leave their range under the query's conditions (range obligations, DOMAIN.md
    section 6) and are encoded without ``mod``; ``wrapped`` lists the nodes that got one.  After encoding, ``side`` holds the constraints on fresh variables and
    ``abstracted`` lists the operations that were over-approximated.

    ``facts_from`` (bit-vector mode only): conditions that hold wherever the encoding is used
    (the query's domain and path).  What they say about the atoms (dominance such as
    ``batch_id < batch``, monomial bounds from the device-memory and exact-argument layers,
    divisibility; :class:`addrsim.ir.poly.Facts`) is learnt first, with plain intervals only;
    then a node whose interval may leave its width but whose exact polynomial is bounded by
    the facts inside it gets no ``mod`` (no-wrap without a solver).  Sound for proofs: in every
    model of the conditions each node still takes its machine value."""

    def __init__(self, ranges: Dict[str, Tuple[int, int]], ideal: bool = False, keep=frozenset(),
                 nowrap=frozenset(), facts_from=None, masks: bool = True, signed_ok=frozenset()):
        self.ranges = ranges
        self.signed_ok = signed_ok    # ids of nodes read only as signed values (signed_reads), or a
                                      # function that returns them (called when first needed)
        self.signed_exact = set()     # ids of those encoded by a possibly negative exact value
        self.masks = masks            # an and with a contiguous mask encoded exactly (else a fresh integer)
        self.exact_masks = 0          # how many were
        self.ideal = ideal            # int mode (addrsim.backends.ideal): no wraps except in ``keep``
        self.keep = keep
        self.nowrap = nowrap          # ids of nodes proved (separately) to stay in range
        self.wrapped = []             # (node, unwrapped term, width) of every ``mod`` emitted
        self.exact = set()            # ids of nodes shown inside their width (intervals, facts)
        self._cur = None
        self.vars: Dict[str, z3.ArithRef] = {}
        self.side = []
        self.abstracted = []
        self.memo: Dict[int, Tuple[z3.ArithRef, int, int]] = {}
        self.arrays: Dict[str, z3.FuncDeclRef] = {}
        self._fresh = 0
        self.facts = P.Facts() if facts_from is not None and not ideal else None
        self.polys: Dict[int, P.Poly] = {}       # id(node) -> exact polynomial of its encoded value
        self._dmemo: dict = {}
        self._urem: Dict[object, tuple] = {}      # atom key of a urem node -> (dividend key, divisor key)
        self._udiv: Dict[object, tuple] = {}      # the same for udiv nodes
        self._floors: Dict[object, tuple] = {}    # atom key of floor(x / d), d a constant -> (poly of x, d)
        self.signed: Dict[int, P.Poly] = {}      # id(node) -> exact signed value of a wrapped node
        self._urem_by: Dict[object, tuple] = {}   # atom key of a urem by a constant -> (dividend key, constant)
        self.nowrap_by_facts = 0                  # nodes kept without mod thanks to the facts
        self.cert_used = 0                        # resource units of positivity certificates
        self._certify = True
        self.nodes: Dict[object, Expr] = {}      # atom key -> a node it stands for
        self._learning = False
        if self.facts is not None:
            self._learning = True
            for c in facts_from:
                self._learn(c)
            self._learning = False
            self.facts.propagate()

    def var(self, name: str, width: int):
        """The integer variable of symbol ``name`` (created with its range)."""
        v = self.vars.get(name)
        if v is None:
            v = self.vars[name] = z3.Int(name)
            lo, hi = self.ranges.get(name, (0, X.mask(width)))
            self.side += [v >= lo, v <= hi]
        return v

    def fresh(self, width: int, why: str, hi: int = None):
        """A fresh integer in [0, hi] (default: all of ``width`` bits) standing for an
        operation without an exact integer form; marks the encoding ``abstracted``."""
        self._fresh += 1
        hi = X.mask(width) if hi is None else hi
        v = z3.Int(f"abs{self._fresh}")
        self.side += [v >= 0, v <= hi]
        self.abstracted.append(why)
        return v, 0, hi

    def enc(self, e: Expr) -> z3.ArithRef:
        """The term of ``e``, read as its machine value.  Raises AssertionError when ``e`` is
        a node encoded by its signed value (``signed_ok`` not computed over these roots)."""
        t = self._go(e)[0]
        if id(e) in self.signed_exact:
            raise AssertionError("a node read only as a signed value is a root of the encoding")
        return t

    def holds(self, c: Expr) -> z3.BoolRef:
        return self.enc(c) == 1

    def interval(self, e: Expr) -> Tuple[int, int]:
        r = self._go(e)
        return r[1], r[2]

    # ------------------------------------------------------------------ polynomials and facts

    def key(self, n: Expr):
        """The atom key of ``n``: its name for a symbol, its structural digest otherwise."""
        return n.name if isinstance(n, Sym) else ("n", X.digest(n, self._dmemo))

    def poly(self, n: Expr):
        """The exact polynomial of ``n``'s encoded value (over atoms), after encoding it."""
        if isinstance(n, Const):
            return P.const(n.value)
        return self.polys.get(id(n))

    def _learn(self, c: Expr) -> None:
        """Facts from one condition (encoded with plain intervals: they hold in its models):
        conjunctions, comparisons and negated comparisons (``xor(c, 1)``: not ``a <= b`` is
        ``b < a``), and a disjunction all of whose terms but one are false at every point
        (:meth:`_never`: group mode's array facts, "if offset a <= offset b then entry a <=
        entry b", where the offsets are ``4*batch_id`` and ``4*batch_id + 4``)."""
        if not isinstance(c, Op):
            return
        if c.op == "and" and c.width == 1:
            for a in c.args:
                self._learn(a)
            return
        if c.op == "or" and c.width == 1:
            live = [a for a in c.args if not self._never(a)]
            if len(live) == 1:
                self._learn(live[0])
            return
        if c.op == "xor" and c.width == 1 and any(isinstance(a, Const) and a.value == 1 for a in c.args):
            inner = c.args[1] if isinstance(c.args[0], Const) else c.args[0]
            if isinstance(inner, Op) and inner.op in _FLIP:
                self._learn_cmp(_FLIP[inner.op], inner.args[1], inner.args[0])
            return
        if c.op in ("ult", "ule", "eq", "slt", "sle"):
            self._go(c)
            self._learn_cmp(c.op, c.args[0], c.args[1])

    def _never(self, c: Expr) -> bool:
        """Is the 1-bit ``c`` false at every point, by exact polynomials alone?  An unsigned
        comparison or equality whose sides differ by a constant that makes it false; a
        conjunction with such a term; the negation of one that is true.  False: not shown."""
        return self._always(c) is False

    def _always(self, c: Expr):
        """True or False when the 1-bit ``c`` has that value at every point, by exact
        polynomials (a constant difference of its sides); None when not shown."""
        if not isinstance(c, Op) or c.width != 1:
            return None
        if c.op == "and":
            got = [self._always(a) for a in c.args]
            return False if False in got else (True if all(g is True for g in got) else None)
        if c.op == "xor" and isinstance(c.args[1], Const) and c.args[1].value == 1:
            got = self._always(c.args[0])
            return None if got is None else not got
        if c.op not in ("eq", "ult", "ule"):
            return None
        self._go(c.args[0])
        self._go(c.args[1])
        if id(c.args[0]) in self.signed_exact or id(c.args[1]) in self.signed_exact:
            return None           # an exact negative value is not the machine value compared
        pa, pb = self.poly(c.args[0]), self.poly(c.args[1])
        d = P.add(pb, pa, -1) if pa is not None and pb is not None else None
        if d is None or set(d) - {()}:
            return None
        k = d.get((), 0)          # b - a
        return {"eq": k == 0, "ult": k > 0, "ule": k >= 0}[c.op]

    def _learn_cmp(self, op: str, x: Expr, y: Expr) -> None:
        """Facts from ``x op y`` (``ult``, ``ule``, ``eq``, ``slt``, ``sle``).  A bound on a
        minimum, ``x < min(u, v)`` (an ``ite`` that selects the smaller by the comparison's own
        signedness), is a bound on both (``x < u`` and ``x < v``); likewise ``max(u, v) < y``."""
        for side, other, first in ((y, x, False), (x, y, True)):
            arms = _min_max(side, op, want_min=not first)
            for arm in arms or ():
                if first:
                    self._learn_cmp(op, arm, other)
                else:
                    self._learn_cmp(op, other, arm)
        self._go(x)
        self._go(y)
        F = self.facts
        if op in ("slt", "sle"):
            pa, pb = self._signed_poly(x), self._signed_poly(y)
            d = P.add(pb, pa, -1) if pa is not None and pb is not None else None
            F.assume_nonneg(P.add(d, P.const(-1)) if d is not None and op == "slt" else d)
            return
        pa, pb = self.poly(x), self.poly(y)
        if pa is None or pb is None:
            return
        d = P.add(pb, pa, -1)
        if d is not None:
            F.assume_nonneg(P.add(d, P.const(-1)) if op == "ult" else d)
            if op == "eq":
                F.assume_nonneg(P.scale(d, -1))
        a, b = P.single_atom(pa), P.single_atom(pb)
        if a is not None and b is not None:
            F.dominate(a, b, -1 if op == "ult" else 0)
            if op == "eq":
                F.dominate(b, a, 0)
                F.equate(a, b)
        if set(pb) <= {()}:
            k = pb.get((), 0)
            if op in ("ule", "eq") or k > 0:
                F.upper(pa, k - (op == "ult"))
            if op == "eq" and k == 0 and a in self._urem:
                F.divides.add(self._urem[a])
            if op == "eq" and k == 0 and a in self._urem_by:
                F.multiple_of(*self._urem_by[a])

    def _signed_poly(self, n: Expr):
        """The exact polynomial of ``n`` read as a signed (two's complement) value, when
        known: a constant; a node whose value is below 2**(w-1); a sum or difference whose
        exact value lies in [-2**(w-1), 2**(w-1)) (``signed``, recorded when it wraps)."""
        if isinstance(n, Const):
            return P.const(X.to_signed(n.value, n.width))
        self._go(n)
        if id(n) in self.signed:
            return self.signed[id(n)]
        p = self.poly(n)
        if p is None or self.memo[id(n)][2] >= 1 << (n.width - 1):
            return None
        return p

    def implied(self, c: Expr, certificates: bool = True) -> bool:
        """Does the 1-bit condition ``c`` hold in every model of the learnt conditions, by
        polynomial arithmetic alone (no nonlinear solver)?  ``eq`` when both sides have the
        same exact polynomial over atoms (a wrapped node is an atom: equal atoms are equal
        values); ``ule``/``ult`` when the bounds of their difference say so, or a certificate
        of products of facts does (:func:`addrsim.backends.positivity.certify`, its units in
        ``cert_used``; not with ``certificates`` False); ``and``, ``or`` and negation (``xor``
        with 1) of such.  Encodes ``c`` first.  False means "not shown", never "false"."""
        if self.facts is None:
            return False
        self._go(c)                 # the claim's own nodes' facts first
        self._close_facts()
        self._certify = certificates
        return self._decided(c, True)

    def _decided(self, c: Expr, want: bool) -> bool:
        """Is the 1-bit ``c`` shown to be ``want`` in every model?"""
        if isinstance(c, Const):
            return c.value == int(want)
        if not isinstance(c, Op):
            return False
        if c.width == 1 and c.op in ("and", "or"):
            every = (c.op == "and") == want           # a true "and", a false "or"
            return (all if every else any)(self._decided(a, want) for a in c.args)
        if c.width == 1 and c.op == "xor" and any(isinstance(a, Const) for a in c.args):
            k, x = (c.args[0], c.args[1]) if isinstance(c.args[0], Const) else (c.args[1], c.args[0])
            return self._decided(x, want != bool(k.value))
        if c.width == 1 and c.op == "not":
            return self._decided(c.args[0], not want)
        if c.width == 1 and c.op == "ite":      # a V# check that a zero stride skips
            cond, a, b = c.args
            if self._decided(cond, True):
                return self._decided(a, want)
            if self._decided(cond, False):
                return self._decided(b, want)
            return self._decided(a, want) and self._decided(b, want)
        r = self._go(c)
        k = _interval_truth(self, c)
        if k is None and c.width == 1 and r[1] == r[2]:
            k = r[1]
        if k is not None:                       # decided by intervals
            return k == int(want)
        if c.op not in ("eq", "ule", "ult", "sle", "slt"):
            return False
        if c.op in ("sle", "slt"):
            pa, pb = self._signed_poly(c.args[0]), self._signed_poly(c.args[1])
        else:
            pa, pb = self.poly(c.args[0]), self.poly(c.args[1])
        if pa is None or pb is None:
            return False
        if c.op == "eq":
            if want:
                return pa == pb or self._same_normal(pa, pb)
            d = P.add(pb, pa, -1)
            lo, hi = self.facts.bound(d) if d is not None else (0, 0)
            return lo >= 1 or hi <= -1
        strict = c.op in ("ult", "slt")
        if want:     # a <= b (a < b): b - a >= 0 (1)
            d, need = P.add(pb, pa, -1), 1 if strict else 0
        else:        # not a <= b: a - b >= 1; not a < b: a - b >= 0
            d, need = P.add(pa, pb, -1), 0 if strict else 1
        if d is None:
            return False
        if not self._certify:
            return self.facts.bound(d)[0] >= need
        return self._certified(d, need, MAX_SPLITS)

    def _same_normal(self, pa: P.Poly, pb: P.Poly) -> bool:
        """Are ``pa`` and ``pb`` equal in every model by their normal forms
        (:func:`addrsim.ir.poly.normal`: the GQA ratio's dividend as divisor times quotient,
        multiples of a constant, floors split at their divisor)?"""
        quotients = {v: k for k, v in self._udiv.items()}
        na = P.normal(pa, self.facts, self._floors, quotients)
        return na is not None and na == P.normal(pb, self.facts, self._floors, quotients)

    def _certified(self, d: P.Poly, need: int, splits: int) -> bool:
        """``d >= need`` by a certificate, or, failing that, in both cases of an ``ite`` atom
        of ``d`` whose condition is a comparison (the kernels' ``rows_left > 1 ? 4096 : 0``
        soffsets): the condition learnt as a fact and the atom replaced by its arm, then the
        negation and the other arm (at most ``splits`` atoms split)."""
        ok, used = certify(self.facts, d, need)
        self.cert_used += used
        if ok or splits <= 0:
            return ok
        for key in sorted({k for m in d for k, _ in m}, key=repr):
            n = self.nodes.get(key)
            if not (isinstance(n, Op) and n.op == "ite" and isinstance(n.args[0], Op)
                    and n.args[0].op in _FLIP):
                continue
            cases = ((n.args[0], n.args[1]), (X.bnot(n.args[0]), n.args[2]))
            return all(self._in_case(cond, d, key, arm, need, splits - 1) for cond, arm in cases)
        return False

    def _in_case(self, cond: Expr, d: P.Poly, key, arm: Expr, need: int, splits: int) -> bool:
        """``d >= need`` where ``cond`` holds and the atom ``key`` (an ite) is ``arm``."""
        p = self.poly(arm)        # encoded with the ite, under every model's facts (none of this case's)
        d2 = P.substitute(d, key, p) if p is not None else None
        if d2 is None:
            return False
        saved = self.facts
        self.facts = saved.copy()
        try:
            self._learn(cond)
            self.facts.propagate()
            return self._certified(d2, need, splits)
        finally:
            self.facts = saved

    def _close_facts(self) -> None:
        """Quotients of an exact division are exact: ``d * udiv(c, d) == c`` when the
        conditions say ``c mod d == 0`` (learnt in any order); then the atoms' intervals are
        tightened from the facts (:meth:`addrsim.ir.poly.Facts.propagate`)."""
        F = self.facts
        for q in list(self._udiv):
            _nested_quotient(self, q)
        for q, (kc, kd) in self._udiv.items():
            if (kc, kd) in F.divides:
                p = P.add(P.atom(kc), P.mul(P.atom(kd), P.atom(q)), -1)
                F.assume_nonneg(p)
                F.assume_nonneg(P.scale(p, -1))
        F.propagate()

    def _fits(self, t, lo, hi, w, poly):
        """(t, lo, hi) without ``mod`` when the facts bound ``poly`` inside ``w`` bits, else None."""
        if self.facts is None or self._learning or poly is None:
            return None
        plo, phi = self.facts.bound_by_facts(poly, 0, (1 << w) - 1)
        if plo < 0 or phi >= 1 << w:
            return None
        self.nowrap_by_facts += 1
        self.polys[id(self._cur)] = poly
        lo, hi = max(lo, plo), min(hi, phi)
        self.side += [t >= lo, t <= hi]       # redundant bounds: they guide nonlinear search
        return t, lo, hi

    def _wrap(self, t, lo, hi, w, force=False, poly=None):
        m = 1 << w
        if not force and self.ideal and id(self._cur) not in self.keep:
            return t, lo, hi          # int mode: this node does not wrap
        if lo >= 0 and hi < m:
            if poly is not None and self._cur is not None:
                self.polys[id(self._cur)] = poly
            if not force:
                self.exact.add(id(self._cur))
            return t, lo, hi
        fits = self._fits(t, lo, hi, w, poly)
        if fits is not None:
            if not force:
                self.exact.add(id(self._cur))
            return fits
        if not force and id(self._cur) in self.nowrap:
            self.side += [t >= 0, t < m]             # proved separately not to wrap
            if poly is not None and self._cur is not None:
                self.polys[id(self._cur)] = poly     # so its value is its exact polynomial
            return t, max(lo, 0), min(hi, m - 1)
        if not force and self._cur is not None:
            self.wrapped.append((self._cur, t, w))
        if poly is not None and self._cur is not None and self.facts is not None:
            plo, phi = self.facts.bound(poly)
            if plo >= 0:     # a non-negative value reduced mod 2**w is at most itself
                self.facts.assume_nonneg(P.add(poly, P.atom(self.key(self._cur)), -1))
            elif plo >= -(m >> 1) and phi < m >> 1:
                self.signed[id(self._cur)] = poly      # its signed reading is exact
        return t % m, 0, m - 1

    def _go(self, n: Expr):
        k = id(n)
        if k in self.memo:
            return self.memo[k]
        w = n.width
        if isinstance(n, Const):
            r = (z3.IntVal(n.value), n.value, n.value)
        elif isinstance(n, Sym):
            lo, hi = self.ranges.get(n.name, (0, X.mask(w)))
            r = (self.var(n.name, w), lo, hi)
        else:
            prev, self._cur = self._cur, n
            r = self._op(n, w)
            self._cur = prev
        if self.facts is not None:
            self._atom(n, r)
        self.memo[k] = r
        return r

    def _atom(self, n: Expr, r) -> None:
        """Register ``n`` as an atom (its interval) unless it has an exact polynomial."""
        if isinstance(n, Const) or id(n) in self.polys:
            return
        key = self.key(n)
        lo, hi = self.facts.interval.get(key, (r[1], r[2]))
        self.facts.set_interval(key, max(lo, r[1]), min(hi, r[2]))
        self.polys[id(n)] = P.atom(key)
        self.nodes.setdefault(key, n)

    def _op(self, n: Op, w: int):
        op = n.op
        if op in ("ite", "sel"):
            r = INT[op](self, n, None, w)
            if self.signed_exact:
                self._check_signed_readers(n)
            return r
        A = [self._go(a) for a in n.args]
        exact = self.ideal and id(n) not in self.keep
        if exact and op in ("add", "sub"):
            # sign-extended immediates: adding 0xffffffc0 subtracts 64 (addrsim.backends.ideal)
            A = [(z3.IntVal(v), v, v) if v is not None else x
                 for x, v in zip(A, (_signed(c) for c in n.args))]
        if exact and op in _IDEAL:
            return _IDEAL[op](self, n, A, w)
        r = INT[op](self, n, A, w)
        if self.signed_exact:
            self._check_signed_readers(n)
        return r

    def _check_signed_readers(self, n: Op) -> None:
        """Raise AssertionError when ``n`` reads a node encoded by its signed value other
        than as :func:`signed_reads` allows (``signed_ok`` computed over other roots)."""
        for i, a in enumerate(n.args):
            if id(a) in self.signed_exact and not _reads_signed(n, i, a):
                raise AssertionError(f"{n.op} reads a node encoded by its signed value")


MAX_SPLITS = 3
"""ite atoms a certificate may split into their two cases (2**3 certificates at most)."""

_FLIP = {"ult": "ule", "ule": "ult", "slt": "sle", "sle": "slt"}     # not a < b is b <= a
_SIGNED = {"slt": True, "sle": True, "ult": False, "ule": False}


def _min_max(e: Expr, op: str, want_min: bool):
    """The two arms of ``e`` when it is ``ite(u < v, u, v)`` (a minimum; ``ite(u < v, v, u)``
    a maximum) in the signedness of ``op``, else None."""
    if op not in _SIGNED or not (isinstance(e, Op) and e.op == "ite"):
        return None
    c, u, v = e.args
    if not (isinstance(c, Op) and c.op in _SIGNED and _SIGNED[c.op] == _SIGNED[op]):
        return None
    if c.args[0] is u and c.args[1] is v or X.digest(c.args[0]) == X.digest(u) and X.digest(c.args[1]) == X.digest(v):
        return (u, v) if want_min else None
    if c.args[0] is v and c.args[1] is u or X.digest(c.args[0]) == X.digest(v) and X.digest(c.args[1]) == X.digest(u):
        return (u, v) if not want_min else None
    return None


def _signed(c: Expr):
    """A constant operand read as a sign-extended immediate; None for other nodes."""
    if isinstance(c, Const) and c.width > 1:
        return X.to_signed(c.value, c.width)
    return None


# Each encoding: f(encoder, node, [(term, lo, hi) of each operand], width) -> (term, lo, hi).

def _sel(enc, n, A, w):
    # an int32 array element read by the kernel: an uninterpreted function of the byte offset,
    # non-negative (sequence starts; aiter's mha.py AV:266-269 checks the int32 dtype)
    off = enc._go(n.args[1])[0]
    f = enc.arrays.get(n.args[0].name)
    if f is None:
        f = enc.arrays[n.args[0].name] = z3.Function("sel_" + n.args[0].name, z3.IntSort(), z3.IntSort())
    t = f(off)
    enc.side += [t >= 0, t < (1 << 31)]
    p = enc.poly(n.args[1]) if enc.facts is not None else None
    if p is not None:
        # one atom per element: reads whose offsets have the same exact polynomial (the
        # claim's folded ``4*batch_id`` and the conditions' unfolded one) share their facts
        key = ("sel", n.args[0].name, tuple(sorted(p.items(), key=repr)))
        lo, hi = enc.facts.interval.get(key, (0, (1 << 31) - 1))
        enc.facts.set_interval(key, max(lo, 0), min(hi, (1 << 31) - 1))
        enc.polys[id(n)] = P.atom(key)
        enc.nodes.setdefault(key, n)
    return t, 0, (1 << 31) - 1


def _polys(enc, n):
    """The operands' polynomials (None when any is untracked or facts are off)."""
    if enc.facts is None:
        return None
    ps = [enc.poly(a) for a in n.args]
    return None if any(p is None for p in ps) else ps


def _add(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    ps = _polys(enc, n)
    return _signed_or_wrap(enc, n, a + b, al + bl, ah + bh, w, ps and P.add(*ps))


def _sub(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    ps = _polys(enc, n)
    return _signed_or_wrap(enc, n, a - b, al - bh, ah - bl, w, ps and P.add(ps[0], ps[1], -1))


def _signed_or_wrap(enc, n, t, lo, hi, w, poly):
    """The exact value ``t`` of a sum or difference that is read only as a signed value
    (``enc.signed_ok``, :func:`signed_reads`) when its interval, or the facts' bound of its
    polynomial, lies in [-2**(w-1), 2**(w-1)) but not in [0, 2**w); otherwise the usual
    encoding (``_wrap``: exact inside [0, 2**w), else ``mod``)."""
    half = 1 << (w - 1)
    if lo >= 0 or enc.ideal or id(n) in enc.nowrap:
        return enc._wrap(t, lo, hi, w, poly=poly)
    if callable(enc.signed_ok):
        enc.signed_ok = enc.signed_ok()
    if id(n) not in enc.signed_ok:
        return enc._wrap(t, lo, hi, w, poly=poly)
    if poly is not None and enc.facts is not None and not enc._learning:
        plo, phi = enc.facts.bound_by_facts(poly, 0, half - 1)
        if plo >= 0 or not (-half <= max(lo, plo) and min(hi, phi) < half):
            return enc._wrap(t, lo, hi, w, poly=poly)
        if (plo, phi) != (lo, hi):
            lo, hi = max(lo, plo), min(hi, phi)
            enc.side += [t >= lo, t <= hi]
    if not (-half <= lo and hi < half):
        return enc._wrap(t, lo, hi, w, poly=poly)
    if poly is not None:
        enc.polys[id(n)] = poly
    enc.exact.add(id(n))
    enc.signed_exact.add(id(n))
    return t, lo, hi


def _mul(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    if isinstance(n.args[1], Const):
        t = a * n.args[1].value
    elif isinstance(n.args[0], Const):
        t = n.args[0].value * b
    else:
        t = a * b
    ps = _polys(enc, n)
    return enc._wrap(t, al * bl, ah * bh, w, poly=ps and P.mul(*ps))


def _mulhu(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    return a * b / (1 << w), (al * bl) >> w, (ah * bh) >> w


def _not(enc, n, A, w):
    a, al, ah = A[0]
    return X.mask(w) - a, X.mask(w) - ah, X.mask(w) - al


def _not_ideal(enc, n, A, w):
    a, al, ah = enc._wrap(*A[0], w, force=True)
    return X.mask(w) - a, X.mask(w) - ah, X.mask(w) - al


def _sext(enc, n, A, w):
    a, al, ah = A[0]
    wa = n.args[0].width
    if ah < (1 << (wa - 1)):
        ps = _polys(enc, n)
        if ps:
            enc.polys[id(n)] = ps[0]          # the sign bit is clear: the value is the operand's
        return a, al, ah
    return z3.If(a >= (1 << (wa - 1)), a + (1 << w) - (1 << wa), a), 0, X.mask(w)


def _extract(enc, n, A, w):
    lo_b = n.params[1]
    a, al, ah = A[0]
    t = a / (1 << lo_b) if lo_b else a
    ps = _polys(enc, n)
    if not lo_b:
        return enc._wrap(t, al >> lo_b, ah >> lo_b, w, poly=ps and ps[0])
    high = _high_part(enc, ps[0], lo_b) if ps else None
    if high is None:
        return enc._wrap(t, al >> lo_b, ah >> lo_b, w)
    hlo, hhi = enc.facts.bound(high)
    r = enc._wrap(t, max(al >> lo_b, hlo), min(ah >> lo_b, hhi), w, poly=high)
    if id(n) not in enc.polys:
        # wrapped: the value is ``high mod 2**w``, one atom for every node of that polynomial
        # (a V#'s stride field read from two copies of an advanced base: the same atom)
        key = ("mod", w, tuple(sorted(high.items(), key=repr)))
        enc.facts.set_interval(key, r[1], r[2])
        enc.polys[id(n)] = P.atom(key)
    return r


def _high_part(enc, p, lo_b: int):
    """``floor(p / 2**lo_b)`` as a polynomial when the facts show that the terms of ``p``
    whose coefficients 2**lo_b does not divide (and the low part of its constant) lie in
    [0, 2**lo_b): then the division is exact on the other terms.  None otherwise."""
    if enc.facts is None or enc._learning:
        return None
    d = 1 << lo_b
    high, rest = {}, {}
    for m, c in p.items():
        if m == ():
            if c // d:
                high[m] = c // d
            if c % d:
                rest[m] = c % d
        elif c % d == 0:
            high[m] = c // d
        else:
            rest[m] = c
    rlo, rhi = enc.facts.bound(rest) if rest else (0, 0)
    return high if 0 <= rlo and rhi < d else None


def _zext(enc, n, A, w):
    ps = _polys(enc, n)
    if ps:
        enc.polys[id(n)] = ps[0]
    return A[0]


def _concat(enc, n, A, w):
    (h, hl, hh), (l, ll, lh) = A
    wl = n.args[1].width
    ps = _polys(enc, n)
    if ps:
        p = P.add(P.scale(ps[0], 1 << wl), ps[1])
        if p is not None:
            enc.polys[id(n)] = p
    return h * (1 << wl) + l, hl * (1 << wl) + ll, hh * (1 << wl) + lh


def _lshr(enc, n, A, w):
    if not isinstance(n.args[1], Const):
        return enc.fresh(w, "lshr node")
    a, al, ah = A[0]
    s = n.args[1].value
    if s >= w:
        return z3.IntVal(0), 0, 0              # the whole value shifted out
    if s:
        x = enc.poly(n.args[0]) if enc.facts is not None else None
        _quotient_defined(enc, n, x, P.const(1 << s))
        if x is not None:
            enc._floors[enc.key(n)] = (x, 1 << s)
    return (a / (1 << s) if s else a), al >> s, ah >> s


def _quotient_defined(enc, n, x, d) -> None:
    """The facts that define ``q = floor(x / d)`` (``n``'s atom; ``x``, ``d`` polynomials,
    d >= 1): ``d*q <= x`` and ``x <= d*q + d - 1`` (for the certificates,
    :mod:`addrsim.backends.positivity`)."""
    if enc.facts is None or x is None or d is None:
        return
    dq = P.mul(d, P.atom(enc.key(n)))
    if dq is None:
        return
    enc.facts.assume_nonneg(P.add(x, dq, -1))
    d1 = P.add(d, P.const(-1))
    hi = P.add(dq, d1) if d1 is not None else None
    if hi is not None:
        enc.facts.assume_nonneg(P.add(hi, x, -1))


def _shl(enc, n, A, w):
    if not isinstance(n.args[1], Const):
        return enc.fresh(w, "shl node")
    a, al, ah = A[0]
    s = n.args[1].value
    if s >= w:
        return z3.IntVal(0), 0, 0              # the whole value shifted out
    ps = _polys(enc, n)
    return enc._wrap(a * (1 << s), al << s, ah << s, w, poly=ps and P.scale(ps[0], 1 << s))


def _and(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    if w == 1:
        return a * b, al * bl, ah * bh
    for (x, xl, xh), c in ((A[0], n.args[1]), (A[1], n.args[0])):
        if isinstance(c, Const):
            m = c.value
            if m & (m + 1) == 0:  # low mask 2^k - 1
                xp = enc.poly(n.args[0] if c is n.args[1] else n.args[1]) if enc.facts is not None else None
                return enc._wrap(x, xl, xh, m.bit_length(), force=True, poly=xp)
            low = (~m) & X.mask(w)
            if low & (low + 1) == 0 and m == X.mask(w) & ~low:  # clears the low bits
                return x - x % (low + 1), 0, xh
            j = (m & -m).bit_length() - 1
            if enc.masks and m and ((m >> j) & ((m >> j) + 1)) == 0:   # bits j..top-1: x mod 2**top - x mod 2**j
                enc.exact_masks += 1
                _below_operands(enc, n)
                return x % (1 << m.bit_length()) - x % (1 << j), 0, min(m, max(xh, 0))
    hi = X.mask(w)
    for (x, xl, xh), c in ((A[0], n.args[1]), (A[1], n.args[0])):
        if isinstance(c, Const):
            hi = min(hi, c.value, max(xh, 0))      # x & c <= c and x & c <= x
    _below_operands(enc, n)
    return enc.fresh(w, f"and of {n.args[0]!r} and {n.args[1]!r}", hi)


def _below_operands(enc, n):
    """The facts learn that the ``and`` node ``n`` is at most each of its non-constant operands."""
    if enc.facts is not None:
        for a in n.args:
            pa = enc.poly(a)
            if pa is not None and not isinstance(a, Const):
                enc.facts.assume_nonneg(P.add(pa, P.atom(enc.key(n)), -1))   # x & y <= x


def _or_xor(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    if w == 1:
        return (a + b - a * b if n.op == "or" else z3.If(a != b, 1, 0)), 0, 1
    za, zb = n.args
    if X.maxbits(za) <= X.lowzeros(zb) or X.maxbits(zb) <= X.lowzeros(za):
        return a + b, al + bl, ah + bh          # disjoint bits: or and xor are a sum
    # both operands below 2**k: so is their or / xor (a lane's swizzled column, tid_x bits)
    top = (1 << max(ah, bh, 0).bit_length()) - 1 if min(al, bl) >= 0 else X.mask(w)
    return enc.fresh(w, f"{n.op} of {za!r} and {zb!r}", hi=min(top, X.mask(w)))


def _ite(enc, n, A, w):
    c, cl, ch = enc._go(n.args[0])
    k = _interval_truth(enc, n.args[0])
    if k is not None:   # the condition is decided by intervals (a divisor that is never 0)
        arm = n.args[1] if k else n.args[2]
        r = enc._go(arm)
        p = enc.poly(arm) if enc.facts is not None else None
        if p is not None:
            enc.polys[id(n)] = p
        return r
    a, al, ah = enc._go(n.args[1])
    b, bl, bh = enc._go(n.args[2])
    if al < 0 and _nonneg_when_selected(n, 1):
        al = 0
    if bl < 0 and _nonneg_when_selected(n, 2):
        bl = 0
    return z3.If(c == 1, a, b), min(al, bl), max(ah, bh)


def _nonneg_when_selected(n: Op, arm: int) -> bool:
    """Does the condition of ``ite`` node ``n`` select its ``arm`` (1: when true, 2: when
    false) only where that arm is non-negative as a signed value?  ``ite(0 <=s x, x, _)``,
    ``ite(-1 <s x, x, _)``, ``ite(x <s 0, _, x)``, ``ite(x <=s -1, _, x)`` (a clamp at zero: a
    causal bottom-right kernel's first row)."""
    c, x = n.args[0], n.args[arm]
    if not (isinstance(c, Op) and c.op in ("slt", "sle")):
        return False
    u, v = c.args
    same = lambda e: e is x or X.digest(e) == X.digest(x)
    k = _signed(u) if arm == 1 else _signed(v)
    if arm == 1:        # k <= x or k < x
        return same(v) and k is not None and (k >= 0 if c.op == "sle" else k >= -1)
    return same(u) and k is not None and (k >= 0 if c.op == "slt" else k >= -1)   # not (x < k): x >= k


def signed_reads(exprs) -> frozenset:
    """Ids of the ``add``/``sub`` nodes of ``exprs`` (bit-vector IR) that every reader reads
    as a signed value: an operand of ``slt``/``sle``; an operand of an ``add``/``sub`` of the
    same width (whose own value is taken mod 2**w, or is itself such a node); the arm of an
    ``ite`` that selects it only when non-negative (:func:`_nonneg_when_selected`).  A node
    that is itself one of ``exprs`` (a root, read as it is) is never one.  For such a node the
    exact value and the machine value give every reader the same result wherever the exact
    value lies in [-2**(w-1), 2**(w-1)) (two's complement, AMD ISA guide section 4.3: the
    32-bit integer ops wrap mod 2**32)."""
    readers: Dict[int, list] = {}
    nodes = {}
    roots = set()
    for e in exprs:
        roots.add(id(e))
        for n in X.walk(e):
            if isinstance(n, Op):
                nodes[id(n)] = n
                for i, a in enumerate(n.args):
                    readers.setdefault(id(a), []).append((n, i))
    out = set()
    for k, n in nodes.items():
        if n.op not in ("add", "sub") or k in roots or n.width < 2:
            continue
        if all(_reads_signed(p, i, n) for p, i in readers.get(k, ())):
            out.add(k)
    return frozenset(out)


def _reads_signed(p: Op, i: int, n: Op) -> bool:
    """Does ``p`` read its operand ``i`` (the node ``n``) as a signed value (see
    :func:`signed_reads`)?"""
    if p.op in ("slt", "sle"):
        return True
    if p.op in ("add", "sub"):
        return p.width == n.width
    if p.op == "ite" and i in (1, 2):
        return _nonneg_when_selected(p, i)
    return False


def _interval_truth(enc, c: Expr):
    """1 or 0 when the operands' intervals decide the comparison ``c`` (bit-vector mode),
    else None.  Used by ``ite`` and :meth:`IntEncoder._decided`; the comparison itself keeps
    its encoding."""
    if enc.ideal or not (isinstance(c, Op) and c.op in ("eq", "ult", "ule", "slt", "sle")):
        return None
    (_, al, ah), (_, bl, bh) = enc._go(c.args[0]), enc._go(c.args[1])
    if min(al, bl) < 0:
        return None
    return _decided_by_intervals(c.op, al, ah, bl, bh, c.args[0].width)


def _decided_by_intervals(op, al, ah, bl, bh, wa):
    """1 or 0 when the operands' intervals decide the comparison, else None (signed
    comparisons only where both are below 2**(wa-1), i.e. read the same signed)."""
    if op in ("slt", "sle") and max(ah, bh) >= 1 << (wa - 1):
        return None
    if op == "eq":
        return 1 if al == ah == bl == bh else (0 if ah < bl or bh < al else None)
    strict = op in ("ult", "slt")
    if (ah < bl) if strict else (ah <= bl):
        return 1
    if (bh <= al) if strict else (bh < al):
        return 0
    return None


def _pred(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    op = n.op
    if n.args[0] is n.args[1]:
        # x < x is 0 and x <= x, x == x are 1 (a carry-out of x + 0 the fold left: the
        # unfolded offsets of the array facts, ``concat(ult(4*b, 4*b), 4*b)``)
        v = 0 if op in ("ult", "slt") else 1
        if enc.facts is not None:
            enc.polys[id(n)] = P.const(v)
        return z3.IntVal(v), v, v
    exact = enc.ideal and id(n) not in enc.keep
    if op in ("slt", "sle") and not exact:
        wa = n.args[0].width
        a = z3.If(a >= (1 << (wa - 1)), a - (1 << wa), a)
        b = z3.If(b >= (1 << (wa - 1)), b - (1 << wa), b)
    c = {"eq": a == b, "ult": a < b, "ule": a <= b, "slt": a < b, "sle": a <= b}[op]
    return z3.If(c, 1, 0), 0, 1


def _udiv(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    if bl > 0:
        exact = _exact_quotient(enc, n, al // max(bh, 1), ah // bl)
        if exact is not None:
            return exact
        if enc.facts is not None:
            _quotient_defined(enc, n, enc.poly(n.args[0]), enc.poly(n.args[1]))
            if isinstance(n.args[1], Const) and enc.poly(n.args[0]) is not None:
                enc._floors[enc.key(n)] = (enc.poly(n.args[0]), n.args[1].value)
        lo = al // max(bh, 1)
        if enc.facts is not None:
            lo = max(lo, _quotient_facts(enc, n, al, bl))
        return a / b, lo, ah // bl
    # divisor may be 0: SMT-LIB semantics (udiv by 0 is all ones)
    return z3.If(b == 0, X.mask(w), a / b), 0, X.mask(w)


def _exact_quotient(enc, n, lo: int, hi: int):
    """``udiv(a, b)`` whose exact polynomials divide (:func:`addrsim.ir.poly.exact_quotient`:
    ``(2*nhead_q*hdim_q) / hdim_q`` in a pddv kernel's SBHD LSE base, where ``hdim_q`` is a
    shape variable) encoded as the quotient polynomial itself, no division left for the
    solver; its polynomial is recorded exact.  None when they do not divide (or without
    facts).  The caller knows ``b >= 1``."""
    if enc.facts is None:
        return None
    q = P.exact_quotient(enc.poly(n.args[0]) or {}, enc.poly(n.args[1]) or {})
    if not q:
        return None
    term = z3.IntVal(0)
    for m, c in q.items():
        t = z3.IntVal(c)
        for k, e in m:
            node = enc.nodes.get(k)
            atom = enc.vars.get(k) if isinstance(k, str) else (enc.memo[id(node)][0] if node is not None
                                                                 and id(node) in enc.memo else None)
            if atom is None:
                return None
            for _ in range(e):
                t = t * atom
        term = term + t
    enc.polys[id(n)] = q
    return term, lo, hi


def _quotient_facts(enc, n, al, bl) -> int:
    """What divisibility facts say of ``n = udiv(c, d)``: with ``c mod d == 0`` and c, d >= 1
    the quotient is at least 1; and ``udiv(a, udiv(c, d)) <= d - 1`` when ``a <= c - 1`` (the
    KV head of a query head under an integer GQA ratio, DOMAIN.md section 1).  Returns the
    quotient's lower bound (0 when nothing is known)."""
    F = enc.facts
    kc, kd = (P.single_atom(enc.poly(x)) for x in n.args)
    if kc is not None and kd is not None:
        enc._udiv[enc.key(n)] = (kc, kd)
    lo = 1 if (kc, kd) in F.divides and al >= 1 and bl >= 1 else 0
    _nested_quotient(enc, enc.key(n))
    return lo


def _nested_quotient(enc, q) -> None:
    """``q = udiv(a, udiv(c, d)) <= d - 1`` when ``c mod d == 0``, c, d >= 1 and ``a <= c - 1``
    (the KV head of a query head under an integer GQA ratio, DOMAIN.md section 1); also tried
    once every condition is learnt (:meth:`IntEncoder._close_facts`)."""
    F = enc.facts
    kc, kd = enc._udiv.get(q, (None, None))
    c2, d2 = enc._udiv.get(kd, (None, None))
    if (kc is not None and (c2, d2) in F.divides and F.iv(c2)[0] >= 1 and F.iv(d2)[0] >= 1
            and any(b == c2 and k <= -1 for b, k in F.below.get(kc, ()))
            and (d2, -1) not in F.below.get(q, ())):
        F.dominate(q, d2, -1)     # c2, d2 >= 1: the divisor c2/d2 is at least 1


def _urem(enc, n, A, w):
    (a, al, ah), (b, bl, bh) = A
    if enc.facts is not None:
        kc, kd = (P.single_atom(enc.poly(x)) for x in n.args)
        if kc is not None and kd is not None:
            enc._urem[enc.key(n)] = (kc, kd)
        if kc is not None and isinstance(n.args[1], Const):
            enc._urem_by[enc.key(n)] = (kc, n.args[1].value)
        pa, pd = enc.poly(n.args[0]), enc.poly(n.args[1])
        r = P.atom(enc.key(n))
        if pa is not None:
            enc.facts.assume_nonneg(P.add(pa, r, -1))                 # a mod d <= a
        d1 = P.add(pd, P.const(-1)) if pd is not None and bl > 0 else None
        if d1 is not None:
            enc.facts.assume_nonneg(P.add(d1, r, -1))                 # a mod d <= d - 1
    if bl > 0:
        return a % b, 0, min(ah, bh - 1)
    return z3.If(b == 0, a, a % b), 0, ah      # urem by 0 is the dividend


def _fresh(enc, n, A, w):
    return enc.fresh(w, f"{n.op} node")


INT = {
    "add": _add, "sub": _sub, "mul": _mul, "mulhu": _mulhu, "mulhs": _fresh,
    "and": _and, "or": _or_xor, "xor": _or_xor, "not": _not,
    "shl": _shl, "lshr": _lshr, "ashr": _fresh,
    "zext": _zext, "sext": _sext, "extract": _extract, "concat": _concat,
    "ite": _ite, **{p: _pred for p in PREDICATES}, "udiv": _udiv, "urem": _urem,
    "sel": _sel, **{op: _fresh for op in FLOAT_OPS},
}
require_backend("Z3 integer (addrsim.backends.z3_int)", INT)

# int mode (``ideal=True``, addrsim.backends.ideal): the exact value of a sign extension is its
# operand, and a complement is read on the operand's ``w``-bit value
_IDEAL = {"sext": lambda enc, n, A, w: A[0], "not": _not_ideal}
