"""The D and dq_acc contracts of aiter e4048607's backward pass (issue 38 item 2), on one main
kernel per (architecture, head dims, mode, accumulator) of the routing table: the pairs the
host launches with it (odo -> main D, main -> dq_convert/dq_shuffle dq_acc), in BHSD, BSHD
and SBHD.

    python3 benchmarks/contracts_pass.py OUT.json FOLDER [FOLDER ...]
    python3 benchmarks/contracts_pass.py --summary OUT.json > OUT.md

FOLDER is an fmha_v3_bwd folder with its csvs.  The main kernel of each group is the csv's
first row of it with no mask, else the first (rounding siblings rtne/rtna/rtz build the same
addresses).  Prints one line per contract and writes them all, with seconds, to OUT.json.
Measures; never asserts.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from addrsim.api import contract, pass_contracts
from addrsim.errors import AddrsimError
from addrsim.loader.routing import read_rows


def mains(folder: Path):
    """One main kernel per (hdim_q, hdim_v, mode, atomic32) of the folder's routing table."""
    groups = {}
    for r in read_rows(folder / "fmha_bwd_dqdkdv.csv"):
        k = (r["hdim_q"], r["hdim_v"], r["mode"], r["atomic32"])
        if k not in groups or (groups[k]["mask"] != "0" and r["mask"] == "0"):
            groups[k] = r
    return [folder / r["co_name"] for _, r in sorted(groups.items())]


def main(argv) -> int:
    if argv[:1] == ["--summary"]:
        return summary(json.loads(Path(argv[1]).read_text()))
    out, rows = Path(argv[0]), []
    for folder in map(Path, argv[1:]):
        arch = folder.parent.name
        for m in mains(folder):
            for pr, pb, co, cb in pass_contracts(m, arch):
                t0 = time.process_time()
                try:
                    res = contract(pr, co, pb, cb)
                except AddrsimError as e:
                    res = [{"layout": "-", "verdict": "error", "reason": str(e)}]
                s = round(time.process_time() - t0, 1)
                for c in res:
                    rows.append(dict(c, arch=arch, producer_file=pr.name, consumer_file=co.name, cpu_s=s))
                    print(arch, pr.name, pb, "->", co.name, cb, c["layout"], c["verdict"], c.get("cause", ""),
                          c.get("term", ""), s, flush=True)
                out.write_text(json.dumps(rows, indent=1, default=str))
    return 0


def summary(rows) -> int:
    print("| arch | producer | consumer | tensor | BHSD | BSHD | SBHD | CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    pairs = {}
    for r in rows:
        pairs.setdefault((r["arch"], r["producer_file"], r["consumer_file"], r.get("consumer", ["", ""])[1]), {})[
            r["layout"]] = r
    for (arch, p, c, buf), by in pairs.items():
        cell = lambda lay: (by[lay]["verdict"] + (  # noqa: E731
            f" ({by[lay]['cause'] or 'unclassified'}, {by[lay]['term'] or 'batch and head together'})"
            if by[lay]["verdict"] == "counterexample" else "")) if lay in by else "-"
        cpu = next(iter(by.values()))["cpu_s"]
        print(f"| {arch} | {p} | {c} | {buf} | {cell('bhsd')} | {cell('bshd')} | {cell('sbhd')} | {cpu} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
