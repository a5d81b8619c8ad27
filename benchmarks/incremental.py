"""Z3's incremental solver (what every stage of addrsim's query asks: bounds pushed before each
check) against its non-incremental one (a solver asked once, never pushed, which runs its
preprocessing tactics first), on the SMT-LIB2 obligations addrsim wrote for undecided checks.

    addrsim verify KERNEL.co --jobs 2 --json r.json          # writes addrsim-smt2/ beside r.json
    python3 benchmarks/incremental.py addrsim-smt2/*.smt2 [--mru 10]

For each file: the answer, the resource units counted and the process time, first with one
push before the check (incremental), then on a fresh solver (non-incremental), both within
``--mru`` million units.  A "sat" here is a model of the written obligation; addrsim reports a
counterexample only after the model breaks the claim by evaluation, so a sat here is not yet
one (2026-12-05: the README kernel's K BSHD bounds obligation is sat in 0.2 s here, and the same
query's model in the process did not break the claim: not settled).  Ratios, never asserted.
"""
import argparse
import time

import z3


def decide(text: str, rlimit: int, push: bool):
    """(answer, units counted, process seconds) of the obligation ``text``."""
    ctx = z3.Context()
    s = z3.Solver(ctx=ctx)
    s.set("ctrl_c", False)
    s.set("timeout", 120_000)
    s.add(z3.parse_smt2_string(text, ctx=ctx))
    if push:
        s.push()
    s.set("rlimit", rlimit)
    t = time.process_time()
    r = s.check()
    st = s.statistics()
    units = next((st.get_key_value(k) for k in st.keys() if k == "rlimit count"), -1)
    return str(r), units, time.process_time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--mru", type=float, default=10.0, help="million resource units a check (default 10)")
    args = ap.parse_args()
    rlimit = int(args.mru * 1_000_000)
    print(f"{'obligation':60} {'incremental':>28} {'non-incremental':>28}")
    for f in args.files:
        text = open(f).read()
        a = decide(text, rlimit, True)
        b = decide(text, rlimit, False)
        fmt = lambda x: f"{x[0]:>7} {x[1] / 1e6:8.3f} Mru {x[2]:6.2f} s"  # noqa: E731
        print(f"{f.rsplit('/', 1)[-1][-60:]:60} {fmt(a):>28} {fmt(b):>28}")


if __name__ == "__main__":
    main()
