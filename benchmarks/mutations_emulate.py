"""The cross-check on the virtual MI300 for every buffer, not only LSE/D (issue 37, item 6):
the mutation benchmark's wrong edits of the README kernel (benchmarks/mutations.py), each
verified (address and bounds, BHSD and SBHD), and each counterexample the emulator can hold
run at its own shape and its own pointers on the edited listing; plus every edit at a small shape (batch 2, nhead
2, seqlen 128) in both layouts.

    python3 benchmarks/mutations_emulate.py KERNEL.co OUT.json

A counterexample *agrees* when the run is wrong and the counterexample's (batch_id, head_id)
slice is among the wrong slices of some output; a counterexample past the emulator's limits is
skipped (the carry and overflow edits need tensors past 4 GiB).  The small-shape runs say
whether the edit shows at all at a shape the prover did not pick (a proved check must be right
there).  Measures; never asserts.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from addrsim.api import run, verify
from addrsim.errors import AddrsimError
from addrsim.loader.listing import load_source
from addrsim.model.models import buffer_pointer, load_models

from mutations import EDITS, LAYOUTS, edit

SMALL = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128, "seqlen_k": 128}


def _runs(path, layout, shape, co, pointers=None):
    try:
        rep = run(path, layout, shape, like=co, pointers=pointers)
    except AddrsimError as e:
        return {"observed": "skipped", "reason": str(e).splitlines()[0].split(": ", 1)[-1]}
    wrong = sorted({tuple(s) for o in rep["outputs"].values() for s in o["wrong_slices"]})
    return {"observed": "pass" if rep["ok"] else "fail", "wrong_slices": [list(s) for s in wrong],
            "errors": {n: round(o["max_rel_err"], 4) for n, o in rep["outputs"].items()},
            "fault": rep.get("fault", ""), "seconds": rep["seconds"]}


def main(co: str, out: str) -> None:
    listing = subprocess.run(["llvm-objdump-22", "-d", co], capture_output=True, text=True, check=True).stdout
    ms, kernel = load_models([]), load_source(co).co.kernels[0]
    cases = []
    with tempfile.TemporaryDirectory() as d:
        for name, bufs, edits, equivalent in EDITS:
            if equivalent:
                continue
            text = listing
            for pc, old, new in edits:
                text = edit(text, pc, old, new)
            p = Path(d) / (name.split(":")[0].replace("/", "_") + ".s")
            p.write_text(text)
            rep = verify(p, bufs, LAYOUTS, like=co)
            for c in rep["kernels"][0]["checks"]:
                x = c.get("counterexample")
                if c["verdict"] != "counterexample" or not x:
                    continue
                coords = x.get("coords") or {}
                row = {"edit": name, "buffer": c["buffer"], "layout": c["layout"], "check": c.get("property"),
                       "cause": c.get("cause"), "shape": x["shape"], "predicted": "fail",
                       "coords": [coords.get("batch_id"), coords.get("head_id")]}
                if c.get("cause") in ("overflow", "allocation") and \
                        buffer_pointer(ms, kernel, c["buffer"]) not in (x.get("kernargs") or {}):
                    row.update(observed="skipped", reason="no pointer in the counterexample: where its 32-bit "
                                                          "wrap lands depends on the allocation's base")
                else:
                    row.update(_runs(p, c["layout"], x["shape"], co, x.get("kernargs")))
                if row["observed"] != "skipped":
                    row["agree"] = row["observed"] == "fail" and row["coords"] in row["wrong_slices"]
                cases.append(row)
                print(f"{name:28s} {c['buffer']:4s} {c['layout']} {c.get('property')}: {row['observed']} "
                      f"{row.get('agree', row.get('reason', ''))}", flush=True)
            for lay in LAYOUTS:
                row = {"edit": name, "layout": lay, "shape": SMALL, "predicted": "small shape"}
                row.update(_runs(p, lay, SMALL, co))
                cases.append(row)
                print(f"{name:28s} small {lay}: {row['observed']} {row.get('wrong_slices', '')}", flush=True)
    ran = [c for c in cases if "agree" in c]
    Path(out).write_text(json.dumps({"tool": "addrsim", "device": "the virtual MI300 (addrsim/emu, CPU)",
                                     "kernel": co, "cases": cases,
                                     "agree": f"{sum(c['agree'] for c in ran)} of {len(ran)}"}, indent=1) + "\n")
    print(f"{sum(c['agree'] for c in ran)} of {len(ran)} emulable counterexamples agree; "
          f"{sum(1 for c in cases if c['observed'] == 'skipped')} skipped")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
