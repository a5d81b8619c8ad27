"""Positivity certificates: HiGHS (floating point, rounded, checked exactly) against Z3's exact
linear program on the same calls.

    python3 benchmarks/certificates.py PATH/TO/KERNEL.co [--buffer k --buffer dv] [--layout bshd]

Runs ``addrsim verify`` on the kernel with every call of ``backends.positivity.certify``
recorded (facts, polynomial, need), then decides each recorded call twice: as addrsim does
(HiGHS, then Z3 where the rounded weights fail the exact check) and with Z3 alone (the program
of ``_program`` within CERT_RU).  Prints the agreement table and the process time of each
(ratios, never asserted: tests never time).
"""
import argparse
import sys
import time

from addrsim.api import verify
from addrsim.backends import positivity as pos
from addrsim.backends import z3_int


def z3_alone(F, d, need):
    """The certificate as before HiGHS: Z3's exact linear program alone."""
    if F.bound(d)[0] >= need:
        return True
    prods = pos.products(F, d)
    if not prods:
        return False
    monos = sorted(set(d).union(*prods), key=repr)
    rng = pos._ranges(F, monos)
    lam, _ = pos._z3_weights(d, prods, monos, rng, need, pos.CERT_RU)
    return lam is not None and pos._rest_lower(d, prods, lam, rng) >= need


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--buffer", action="append")
    p.add_argument("--layout", action="append")
    a = p.parse_args()
    calls = []
    real = pos.certify

    def recorded(F, d, need, rlimit=None):
        calls.append((F.copy(), dict(d), need))
        return real(F, d, need, rlimit)
    z3_int.certify = recorded
    verify(a.file, buffers=a.buffer, layouts=a.layout or ("bhsd", "bshd", "sbhd"))
    table, t_h, t_z = {}, 0.0, 0.0
    for F, d, need in calls:
        t = time.process_time()
        h = real(F, d, need)[0]
        t_h += time.process_time() - t
        t = time.process_time()
        z = z3_alone(F, d, need)
        t_z += time.process_time() - t
        table[(h, z)] = table.get((h, z), 0) + 1
    print(f"{len(calls)} certificate calls of {a.file} ({', '.join(a.buffer or ['every buffer'])})")
    for (h, z), n in sorted(table.items()):
        print(f"  HiGHS {'shown' if h else 'not shown':9}  Z3 alone {'shown' if z else 'not shown':9}  {n}")
    print(f"process time: HiGHS path {t_h:.2f} s, Z3 alone {t_z:.2f} s, ratio {t_z / max(t_h, 1e-9):.1f}x")


if __name__ == "__main__":
    sys.exit(main())
