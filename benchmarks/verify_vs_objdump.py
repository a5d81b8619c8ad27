"""Wall time of `addrsim verify` on a code object next to llvm-objdump alone on the same file.

    python3 benchmarks/verify_vs_objdump.py PATH/TO/KERNEL.co [--repeat 3]
"""
import argparse
import subprocess
import sys
import time

from addrsim.api import verify
from addrsim.loader.disasm import find_objdump


def main():
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    exe, _ = find_objdump()
    t_obj, t_ver = [], []
    for _ in range(a.repeat):
        t = time.perf_counter()
        subprocess.run([exe, "-d", a.file], capture_output=True, check=True)
        t_obj.append(time.perf_counter() - t)
        t = time.perf_counter()
        verify(a.file)
        t_ver.append(time.perf_counter() - t)
    o, v = min(t_obj), min(t_ver)
    print(f"llvm-objdump -d: {o:.3f} s   addrsim verify: {v:.3f} s   ratio: {v / o:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
