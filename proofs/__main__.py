"""Run every claim of proofs/: ``python3 -m proofs [-k SUBSTRING] [--timeout-ms N] [-q]``.

One line per claim: pattern, name, expected verdict, verdict got, seconds; then the
counterexample (Alive2 style: the assignment, the kernel's value, the correct value).  Exit
status 0 when every claim gets its expected verdict (and, where the claim names one, its
expected minimal shape), 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys
import time

from . import all_claims
from ._claims import check, describe


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m proofs", description=__doc__.splitlines()[0])
    ap.add_argument("-k", default="", help="only claims whose name contains this")
    ap.add_argument("--timeout-ms", type=int, default=20_000, help="per solver query (default 20000)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no counterexample details")
    args = ap.parse_args(argv)
    bad = 0
    t0 = time.monotonic()
    claims = [c for c in all_claims() if args.k in c.name]
    print(f"{'pat':3} {'claim':58} {'expected':14} {'got':14} {'time':>7}")
    for c in claims:
        r = check(c, timeout_ms=args.timeout_ms)
        ok = r.ok
        if ok and r.verdict == "counterexample" and c.expect_shape:
            ok = r.minimal and all(r.model.get(k) == x for k, x in c.expect_shape.items())
        bad += not ok
        print(f"{c.pattern:3} {c.name:58} {c.expect:14} {r.verdict:14} {r.seconds:6.2f}s"
              f"{'' if ok else '   <-- MISMATCH'}")
        if r.verdict == "counterexample" and not args.quiet:
            print(describe(r))
        if r.verdict in ("unknown", "vacuous"):
            print(f"  {r.verdict}: {r.reason}")
        if c.lemmas and not args.quiet:
            full = sum(1 for t, _ in c.lemmas if r.lemmas.get(t) == len(c.cases))
            print(f"  lemmas proved in every case: {full}/{len(c.lemmas)}")
        if not ok and r.verdict == "counterexample" and c.expect_shape:
            print(f"  expected minimal shape {dict(c.expect_shape)}")
    print(f"{len(claims)} claims, {len(claims) - bad} as expected, {bad} not; {time.monotonic() - t0:.1f}s")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
