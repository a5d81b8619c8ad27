"""Wall time of `addrsim scan` over kernels one after another on one fresh query cache: the
first kernel cold, each later one warm with what the earlier ones stored (rounding siblings:
rtne, then rtz, then rtna).  With several code roots (checkouts of addrsim), each root gets
its own fresh cache and runs the same sequence, in the order given, so two versions are
compared back to back on the same machine state.

    python3 benchmarks/siblings.py K1.co K2.co ... [--root DIR ...] [--check address] [--jobs 1]

Each run is a separate process started in a neutral folder (so the root on PYTHONPATH is the
addrsim that runs).  Nothing here asserts a time; it prints numbers.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kernels", nargs="+")
    p.add_argument("--root", action="append", help="an addrsim checkout (default: this one)")
    p.add_argument("--check", default="address")
    p.add_argument("--jobs", type=int, default=1)
    a = p.parse_args()
    roots = a.root or [str(Path(__file__).resolve().parents[1])]
    neutral = tempfile.mkdtemp()
    for root in roots:
        cache = tempfile.mkdtemp()
        env = dict(os.environ, PYTHONPATH=root)
        env.pop("ADDRSIM_NO_CACHE", None)
        for k in a.kernels:
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "addrsim", "scan", str(Path(k).resolve()), "--check", a.check,
                                "--jobs", str(a.jobs), "--cache-dir", cache, "--quiet"],
                               capture_output=True, text=True, cwd=neutral, env=env)
            dt = time.perf_counter() - t
            print(f"{root}  {Path(k).name:40s} {dt:7.1f} s  exit {r.returncode}", flush=True)


if __name__ == "__main__":
    main()
