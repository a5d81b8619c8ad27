"""Positivity certificates: HiGHS (floating point, rounded, checked exactly) against Z3's exact
linear program (what addrsim uses) on the same calls.  Needs ``pip install highspy``.

    python3 benchmarks/certificates.py PATH/TO/KERNEL.co [--buffer k --buffer dv] [--layout bshd]

Runs ``addrsim verify`` on the kernel with every call of ``backends.positivity.certify``
recorded (facts, polynomial, need), then decides each recorded call twice: as addrsim does
and with HiGHS (floating point, the weights rounded to rationals and checked exactly with the
integer margin: ``d`` has integer values, so a rest above ``need - 1`` shows ``d >= need``).
Prints the agreement table and the process time of each (ratios, never asserted).

Why addrsim does not use HiGHS (2026-12-05, benchmarks/results/speed_2026-12-05.txt): it agrees
with Z3 (481 of 482 programs, one more shown) at a ninth of the time, but a certificate then
costs fewer resource units, and the budget it leaves goes to Z3's nonlinear stages, which spend
fewer units per second: the README kernel's two undecided checks took 48-63 s instead of 20 s,
and every charge per iteration or per nonzero that kept them fast ran two decided checks out of
their budget.
"""
import argparse
import sys
import time
from fractions import Fraction
from typing import List, Optional, Tuple

import highspy
import numpy as np

from addrsim.api import verify
from addrsim.backends import positivity as pos
from addrsim.backends import z3_int
from addrsim.ir import poly as P

BIG = 1e12
"""Monomial bounds past this are left out of the floating-point program."""


def _highs_weights(d: P.Poly, prods: List[P.Poly], monos, rng, need: int,
                   iterations: int) -> Tuple[Optional[List[Fraction]], int]:
    """(weights ``lam_i`` rounded to rationals, or None where HiGHS finds none within
    ``iterations`` simplex iterations; the iterations taken).  The program: columns ``x_i >= 0`` (``lam_i`` times the product's largest
    coefficient: every column scaled to 1), and per monomial ``m`` of the rest its residual
    ``r_m = d_m - sum(lam_i * p_i[m])`` split ``rp_m - rn_m`` (both >= 0) whose interval
    lower bound ``lo*rp - hi*rn`` is summed with the constant to at least ``need - 1/2``;
    the objective is the sum of the weights (a small vertex)."""
    n, nonc = len(prods), [m for m in monos if m != ()]
    k = len(nonc)
    scale = [float(max(abs(c) for c in p.values())) for p in prods]
    inf = highspy.kHighsInf
    h = highspy._core._Highs()          # the bare class: its constructor prints no banner
    for opt, val in (("output_flag", False), ("threads", 1), ("simplex_iteration_limit", iterations),
                     ("presolve", "on"), ("random_seed", 0)):
        h.setOptionValue(opt, val)
    upper = [inf] * (n + k) + [0.0 if rng[m][1] > BIG else inf for m in nonc]
    h.addVars(n + 2 * k, np.zeros(n + 2 * k), np.array(upper))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.ones(n))
    lo_r, hi_r, start, idx, val = [], [], [], [], []
    for j, m in enumerate(nonc):              # rp_j - rn_j + sum(p_i[m] * x_i / s_i) == d_m
        start.append(len(idx))
        for i, p in enumerate(prods):
            if m in p:
                idx.append(i)
                val.append(float(p[m]) / scale[i])
        idx += [n + j, n + k + j]
        val += [1.0, -1.0]
        lo_r.append(float(d.get(m, 0)))
        hi_r.append(float(d.get(m, 0)))
    start.append(len(idx))                    # - sum(p_i[()] x_i / s_i) + sum(lo rp - hi rn) >= need - d_0 - 1/2
    for i, p in enumerate(prods):
        if () in p:
            idx.append(i)
            val.append(-float(p[()]) / scale[i])
    for j, m in enumerate(nonc):
        lo, hi = rng[m]
        if lo:
            idx.append(n + j)
            val.append(float(min(lo, BIG)))
        if hi <= BIG:
            idx.append(n + k + j)
            val.append(-float(hi))
    lo_r.append(float(need - d.get((), 0)) - 0.5)
    hi_r.append(inf)
    h.addRows(len(lo_r), np.array(lo_r), np.array(hi_r), len(idx), np.array(start, dtype=np.int32),
              np.array(idx, dtype=np.int32), np.array(val))
    h.run()
    its = int(h.getInfo().simplex_iteration_count)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None, its
    x = h.getSolution().col_value[:n]
    return [Fraction(v / s).limit_denominator(1 << 24) if v > 0 else Fraction(0) for v, s in zip(x, scale)], its



def highs(F, d, need):
    """The certificate by HiGHS, its rounded weights checked exactly."""
    if F.bound(d)[0] >= need:
        return True
    prods = pos.products(F, d)
    if not prods:
        return False
    monos = sorted(set(d).union(*prods), key=repr)
    rng = pos._ranges(F, monos)
    lam, _ = _highs_weights(d, prods, monos, rng, need, 2000)
    return lam is not None and pos._rest_lower(d, prods, lam, rng) > need - 1



def z3_alone(F, d, need):
    """addrsim's certificate: Z3's exact linear program."""
    return pos.certify(F, d, need)[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--buffer", action="append")
    p.add_argument("--layout", action="append")
    p.add_argument("--check", action="append")
    a = p.parse_args()
    calls = []
    real = pos.certify

    def recorded(F, d, need, rlimit=None):
        calls.append((F.copy(), dict(d), need))
        return real(F, d, need, rlimit)
    z3_int.certify = recorded
    verify(a.file, buffers=a.buffer, layouts=a.layout or ("bhsd", "bshd", "sbhd"), properties=a.check or ("address", "bounds"))
    table, t_h, t_z = {}, 0.0, 0.0
    for F, d, need in calls:
        t = time.process_time()
        h = highs(F, d, need)
        t_h += time.process_time() - t
        t = time.process_time()
        z = z3_alone(F, d, need)
        t_z += time.process_time() - t
        table[(h, z)] = table.get((h, z), 0) + 1
    print(f"{len(calls)} certificate calls of {a.file} ({', '.join(a.buffer or ['every buffer'])})")
    for (h, z), n in sorted(table.items()):
        print(f"  HiGHS {'shown' if h else 'not shown':9}  Z3 {'shown' if z else 'not shown':9}  {n}")
    print(f"process time: HiGHS path {t_h:.2f} s, Z3 {t_z:.2f} s, ratio {t_z / max(t_h, 1e-9):.1f}x")


if __name__ == "__main__":
    sys.exit(main())
