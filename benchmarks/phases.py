"""The phase table of a profiled run (the issue 39 profile's rows), from a cProfile file.

    python3 -m cProfile -o run.prof -m addrsim verify KERNEL.co --jobs 1 --no-cache
    python3 benchmarks/phases.py run.prof [other.prof]

Each row is the cumulative time of the functions named (seconds of the profiled process, so
with cProfile's overhead; compare two files made the same way).  Rows overlap where the
phases nest (routing reruns contain certificates); the table says where the time is, not a
partition.
"""
import pstats
import sys

ROWS = [
    ("whole check() calls", "prove/check.py", "check"),
    ("positivity certificates", "backends/positivity.py", "certify"),
    ("Z3 checks (all)", "z3/z3core.py", "Z3_solver_check_assumptions"),
    ("Bitwuzla", "backends/bitwuzla_run.py", "check"),
    ("concrete probe", "prove/probe.py", "probe"),
    ("minimisation", "prove/query.py", "minimize"),
    ("routing (reruns and reach)", "prove/domain.py", "route"),
    ("settle (witnesses)", "prove/domain.py", "settle"),
    ("division proofs", "prove/check.py", "_prove_divisions"),
    ("exploration", "engine/explore.py", "explore"),
]


def table(path):
    st = pstats.Stats(path).stats
    out = {}
    for label, file, fn in ROWS:
        out[label] = sum(v[3] for (f, _, name), v in st.items() if f.endswith(file) and name == fn)
    total = max(v[3] for v in st.values())
    return out, total


def main():
    tabs = [table(p) for p in sys.argv[1:]]
    print(f"{'phase':32}" + "".join(f"{p[-28:]:>30}" for p in sys.argv[1:]))
    for label, _, _ in ROWS:
        print(f"{label:32}" + "".join(f"{t[label]:24.1f} {100 * t[label] / tot:4.0f}%" for t, tot in tabs))
    print(f"{'total (profiled process)':32}" + "".join(f"{tot:24.1f}      " for _, tot in tabs))


if __name__ == "__main__":
    sys.exit(main())
