"""Wall time of `addrsim scan --jobs N` over a corpus next to llvm-objdump alone on the same
files, measured in one run on the same machine, printed as a ratio; then the median and the
slowest kernels (explore + all checks of one kernel, seconds, from the scan's JSON).

    python3 benchmarks/scan_vs_objdump.py DIR_OR_WHEEL [--jobs 2] [--json OUT.json] [extra scan options]

llvm-objdump is timed the way addrsim uses it: `llvm-objdump -d` once per code object,
sequentially.  Nothing here asserts a time; it prints numbers.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from addrsim.loader.disasm import find_objdump
from addrsim.model.models import load_models
from addrsim.commands.scan import collect


def _scan(cmd):
    """Run the scan in a process group of its own and return (exit status, stderr).  Stopping this
    benchmark (SIGTERM, Ctrl-C) stops the whole group, the scan and its pool workers: a plain
    child outlived its killed parent and ran to the end beside the next measurement."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)

    def stop(signum, _frame):
        os.killpg(proc.pid, signal.SIGTERM)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        _, err = proc.communicate()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        raise
    return proc.returncode, err


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", help="keep the scan's JSON report here")
    a, rest = p.parse_known_args()
    a.rest = [x for x in rest if x != "--"]
    corpus = collect([a.corpus], load_models())
    exe, _ = find_objdump()
    t = time.perf_counter()
    for f in corpus.files:
        subprocess.run([exe, "-d", f], capture_output=True, check=True)
    t_obj = time.perf_counter() - t
    out = a.json or str(Path(tempfile.mkdtemp()) / "scan.json")
    t = time.perf_counter()
    rc, err = _scan([sys.executable, "-m", "addrsim", "scan", a.corpus, "--jobs", str(a.jobs), "--no-progress",
                     "--json", out, *a.rest])
    t_scan = time.perf_counter() - t
    if rc not in (0, 1, 2):
        sys.exit(f"scan failed ({rc}): {err.strip()}")
    doc = json.loads(Path(out).read_text())
    per = sorted(((k["explore_s"] + sum(c["time_s"] for c in k["checks"]), f"{k['arch']}/{Path(k['file']).name}")
                  for k in doc["kernels"]), reverse=True)
    verdicts = {}
    for k in doc["kernels"]:
        for c in k["checks"]:
            verdicts[c["verdict"]] = verdicts.get(c["verdict"], 0) + 1
    print(f"files: {len(corpus.files)}  kernels: {len(doc['kernels'])}  checks: {sum(verdicts.values())}  {verdicts}")
    print(f"llvm-objdump -d (sequential): {t_obj:.1f} s   addrsim scan --jobs {a.jobs}: {t_scan:.1f} s   "
          f"ratio: {t_scan / t_obj:.1f}x")
    if per:
        print(f"per kernel (explore + checks, one worker): median {statistics.median(t for t, _ in per):.1f} s, "
              f"over 5 s: {sum(1 for t, _ in per if t > 5)}")
        print("slowest:")
        for t_k, name in per[:5]:
            print(f"  {t_k:6.1f} s  {name}")


if __name__ == "__main__":
    main()
