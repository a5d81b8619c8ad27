"""Cold and warm `addrsim verify` of one code object with a fresh query cache, and whether the
two reports agree once times are removed (they must: budgets are resource units and a cache
hit is charged the units it cost).  Prints wall times, the ratio to llvm-objdump on the same
file in the same run, the verdict counts, and the checks that are unknown or not minimal.

    python3 benchmarks/cold_warm.py FILE.co [extra verify options, e.g. --check address]

Nothing here asserts a time; it prints numbers.
"""
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from addrsim.loader.disasm import find_objdump


def _timeless(v):
    if isinstance(v, dict):
        return {k: _timeless(x) for k, x in v.items()
                if not (k.endswith("_s") or k in ("seconds", "time", "replayed_on"))}
    if isinstance(v, list):
        return [_timeless(x) for x in v]
    return v


def _run(co, cache, out, extra):
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", co, "--quiet", "--cache-dir", str(cache),
                        "--json", str(out), *extra], capture_output=True, text=True)
    dt = time.perf_counter() - t
    if p.returncode not in (0, 1, 5):
        sys.exit(f"verify failed ({p.returncode}): {p.stderr.strip()[:500]}")
    return dt, json.loads(Path(out).read_text())


def main():
    co, extra = sys.argv[1], sys.argv[2:]
    exe, _ = find_objdump()
    t = time.perf_counter()
    subprocess.run([exe, "-d", co], capture_output=True, check=True)
    t_obj = time.perf_counter() - t
    d = Path(tempfile.mkdtemp())
    cold_s, cold = _run(co, d / "cache", d / "cold.json", extra)
    warm_s, warm = _run(co, d / "cache", d / "warm.json", extra)
    checks = [c for k in cold["kernels"] for c in k["checks"]]
    print(f"{Path(co).name}: {len(checks)} checks  {dict(collections.Counter(c['verdict'] for c in checks))}")
    print(f"llvm-objdump -d: {t_obj:.2f} s   cold: {cold_s:.1f} s ({cold_s / t_obj:.0f}x)   "
          f"warm: {warm_s:.1f} s ({warm_s / t_obj:.0f}x)")
    print("cold and warm reports agree (times aside):", _timeless(cold) == _timeless(warm))
    for c in checks:
        x = c.get("counterexample") or {}
        if c["verdict"] == "unknown" or (x and not x.get("minimal", True)):
            why = c["reason"] if c["verdict"] == "unknown" else "counterexample not proven minimal"
            print(f"  {c['property']:8} {c['buffer']:4} {c['layout']:5} {c['verdict']:15} {why[:110]}")


if __name__ == "__main__":
    main()
