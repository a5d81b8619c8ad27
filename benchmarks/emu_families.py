"""The virtual MI300 over whole corpora (issue 37, the closing table): one kernel per family of
each corpus folder, run in BHSD, BSHD and SBHD at a small shape, and the instructions without
semantics per kernel (none expected).

    python3 benchmarks/emu_families.py OUT.json FOLDER [FOLDER ...]
    python3 benchmarks/emu_families.py --summary OUT.json > OUT.md

FOLDER is an fmha_v3_bwd folder (the wheel's aiter_meta/hsa/<arch>/fmha_v3_bwd or aiter
e4048607's hsa/<arch>/fmha_v3_bwd).  Shape: batch 2, nhead_q 2, seqlen 128 (seqlen_k 192 for
causal_br), hdim the family's largest; sliding-window kernels with window (32, 16); group
kernels get sequences of 128 and 104 rows.  Prints one line per run and writes every run
(right/wrong, largest relative error per output, stages, seconds, instructions per second)
to OUT.json.  Measures; never asserts.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from addrsim.api import run
from addrsim.emu.step import unsupported
from addrsim.errors import AddrsimError
from addrsim.loader.listing import load_source
from addrsim.model.models import build_problem, choose_family, load_models
from addrsim.ir.expr import Sym

LAYOUTS = ("bhsd", "bshd", "sbhd")


def _shape(ms, k, arch, symbol):
    prob = build_problem(ms, k, "bhsd", Sym("tid_x", 32, "lane"), None, arch, None)
    hq = prob.fixed.get("hdim_q", prob.bounds["hdim_q"][1])
    hv = prob.fixed.get("hdim_v", hq if "hdim_v" not in prob.fixed and prob.bounds["hdim_v"][1] >= hq
                        else prob.bounds["hdim_v"][1])
    shape = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128,
             "seqlen_k": 192 if "causal_br" in symbol else 128}
    shape.update({n: v for n, v in (("hdim_q", hq), ("hdim_v", hv)) if n not in prob.fixed})
    return shape


def _missing(src):
    out = {}
    for code in src.code.values():
        for ins in code:
            why = unsupported(ins)
            if why:
                out[ins.mnemonic] = why
    return out


def main(out_path: str, folders) -> None:
    ms = load_models([])
    rows = []
    for folder in folders:
        picked = {}
        for co in sorted(Path(folder).glob("*.co")):
            src = load_source(co)
            k = src.co.kernels[0]
            fam = choose_family(ms, k, src.co.arch)
            name = fam["name"] if fam is not None else None
            if name not in picked:
                picked[name] = (co, src, k)
        for fam, (co, src, k) in sorted(picked.items(), key=lambda x: str(x[0])):
            base = {"folder": str(folder), "kernel": co.name, "family": fam, "missing": _missing(src)}
            if fam is None:
                rows.append(dict(base, result="no family in the models"))
                print(f"{co.name}: no family", flush=True)
                continue
            try:
                shape = _shape(ms, k, src.co.arch, k.symbol)
            except AddrsimError as e:
                rows.append(dict(base, result=f"not run: {e}"))
                continue
            for lay in LAYOUTS:
                t0 = time.time()
                try:
                    rep = run(co, lay, shape, models=ms, window=(32, 16) if "swa" in k.symbol else None)
                except AddrsimError as e:
                    rows.append(dict(base, layout=lay, shape=shape, result=f"not run: {str(e).splitlines()[0]}"))
                    print(f"{co.name} {lay}: not run: {e}", flush=True)
                    continue
                row = dict(base, layout=lay, shape=shape, result="right" if rep["ok"] else "wrong",
                           errors={n: round(o["max_rel_err"], 5) for n, o in rep["outputs"].items()},
                           wrong_slices={n: o["wrong_slices"] for n, o in rep["outputs"].items() if o["wrong_slices"]},
                           stages=[s["stage"] for s in rep["stages"]], seconds=rep["seconds"],
                           wall=round(time.time() - t0, 1), instructions=rep["instructions"],
                           per_second=round(rep["instructions"] / max(rep["seconds"], 1e-9)),
                           not_compared=sorted(rep.get("not_compared", {})), fault=rep.get("fault", ""))
                rows.append(row)
                print(f"{co.name} {lay}: {row['result']} {row['errors']} {row['seconds']} s "
                      f"{row['per_second']:,}/s stages {row['stages']}", flush=True)
    Path(out_path).write_text(json.dumps({"tool": "addrsim", "runs": rows}, indent=1) + "\n")


def summary(path: str) -> str:
    """The runs of OUT.json as a markdown table: one row per (folder, family), the three
    layouts' results, the largest relative error, seconds and instructions per second."""
    runs = json.loads(Path(path).read_text())["runs"]
    rows, order = {}, []
    for r in runs:
        key = (r["folder"].split("/hsa/")[-1].replace("/fmha_v3_bwd", ""), "wheel" if "aiter_meta" in r["folder"]
               else "e4048607", r["family"], r["kernel"])
        if key not in rows:
            order.append(key)
        rows.setdefault(key, []).append(r)
    out = ["| corpus | arch | family | kernel | BHSD | BSHD | SBHD | largest rel. err (right runs) | stages | s per run | "
           "instr/s | without semantics |", "|" + "---|" * 12]
    for key in order:
        rs = rows[key]
        arch, corpus, fam, kernel = key
        res = {r.get("layout"): r["result"] for r in rs}
        wrong = {r["layout"]: r.get("wrong_slices") for r in rs if r["result"] == "wrong"}
        cell = lambda lay: (res.get(lay, rs[0]["result"]) if lay in res else rs[0]["result"]).split(":")[0] + (  # noqa
            f" (slices {sorted({tuple(s) for v in wrong[lay].values() for s in v})})" if lay in wrong else "")
        errs = [max(r["errors"].values()) for r in rs if r.get("errors") and r["result"] == "right"]
        secs = [r["seconds"] for r in rs if "seconds" in r]
        ips = [r["per_second"] for r in rs if "per_second" in r]
        stages = next((r["stages"] for r in rs if r.get("stages")), [])
        out.append(f"| {corpus} | {arch} | {fam} | {kernel} | {cell('bhsd')} | {cell('bshd')} | {cell('sbhd')} | "
                   f"{max(errs):.2%} | " if errs else f"| {corpus} | {arch} | {fam} | {kernel} | {cell('bhsd')} | "
                   f"{cell('bshd')} | {cell('sbhd')} | - | ")
        out[-1] += (f"{'+'.join(stages) or '-'} | {min(secs):.1f}-{max(secs):.1f} | " if secs else "- | - | ") + (
            f"{min(ips):,}-{max(ips):,} | " if ips else "- | ") + (", ".join(rs[0]["missing"]) or "none") + " |"
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        sys.stdout.write(summary(sys.argv[2]))
    else:
        main(sys.argv[1], sys.argv[2:])
