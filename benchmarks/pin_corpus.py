"""Derive tests/data/corpus_verdicts.json from a scan's JSON report.

    addrsim scan WHEEL_OR_DIR --jobs 2 --json scan.json        (the scan's default settings)
    python3 benchmarks/pin_corpus.py scan.json tests/data/corpus_verdicts.json [--root ~/.cache/addrsim/x]

A wheel's scan names its kernels inside the temporary folder it extracted them to, gone after
the scan: ``--root`` (the wheel extracted, the folder holding ``aiter_meta/``) is read instead.

The data file maps "arch/file.co" to {"family": name, "verdicts": {"buffer/layout": verdict}},
grouped by kernel family, plus the scan settings it was made with.  A scan of some kernels
updates their entries and keeps the others.  tests/test_corpus.py rescans the CI short list
(all of them with ADDRSIM_CORPUS=pinned) and compares; entries pinned before issue 12 (no
``semantics`` tag: verdicts under routing, host casts as counterexamples) are skipped.
"""
import json
import sys
from pathlib import Path

from addrsim.loader import codeobj
from addrsim.commands.scan import SCAN_CHECK_MRU, SCAN_MIN_MRU, SCAN_QUERY_MRU
from addrsim.model.models import choose_family, load_models

#: what a verdict means in the pinned data: since issue 12 the kernel's own verdict (no routing,
#: exact kernel arguments), with routing reported beside it
SEMANTICS = "kernel-verdict"

NOTE = ("Kernels of the wheel scanned in bv mode with the scan's default budgets (resource units: "
        "the verdicts, unknown included, are the same on any machine at any load, so tests/test_corpus.py "
        "compares them exactly); counterexamples are within the device memory of the architecture; `causes` "
        "says which are overflows (int mode proves them).")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    keep_old = "--keep-old" in sys.argv       # without it, entries this scan did not cover are dropped
    doc = json.loads(Path(src).read_text())
    ms = load_models()
    out = {}
    root = sys.argv[sys.argv.index("--root") + 1] if "--root" in sys.argv else None
    for k in doc["kernels"]:
        co = codeobj.load(_local(k["file"], root))
        kern = next(x for x in co.kernels if x.symbol == k["kernel"])
        fam = choose_family(ms, kern, co.arch)["name"]
        key = f"{k['arch']}/{Path(k['file']).name}"
        out[key] = {"family": fam, "semantics": SEMANTICS,
                    "verdicts": {f"{c['buffer']}/{c['layout']}": c["verdict"] for c in k["checks"]},
                    "causes": {f"{c['buffer']}/{c['layout']}": c.get("cause") for c in k["checks"]
                               if c["verdict"] == "counterexample"},
                    "latent": sorted(f"{c['buffer']}/{c['layout']}" for c in k["checks"]
                                     if c["verdict"] == "counterexample"
                                     and (c.get("routing") or {}).get("reachable") is False)}
    old = json.loads(Path(dst).read_text()) if Path(dst).exists() else {}
    if keep_old:    # kernels this scan did not cover keep their entry, with the settings they were pinned with
        prev = {k: dict(v, settings=v.get("settings", {s: x for s, x in old.get("settings", {}).items()
                                                         if s != "memory"}))
                for k, v in old.get("kernels", {}).items() if k not in out}
        out = dict(prev, **out)
    pinned = {"source": "amd-aiter 0.1.7.post2.dev18 wheel, aiter_meta/hsa/*/fmha_v3_bwd/*.co",
              "note": NOTE,
              "settings": {"query_mru": SCAN_QUERY_MRU, "min_mru": SCAN_MIN_MRU, "check_mru": SCAN_CHECK_MRU,
                           "arith": "bv", "deterministic": True,
                           "properties": ["address"], "memory": "the architecture's (192 GiB gfx942, 288 GiB gfx950)"},
              "ci": old.get("ci", []),
              # one kernel per (architecture, family): the selection pinned before the whole wheel was
              "families": old.get("families") or sorted(old.get("kernels", {})),
              "kernels": dict(sorted(out.items(), key=lambda kv: (kv[1]["family"], kv[0])))}
    Path(dst).write_text(json.dumps(pinned, indent=1) + "\n")
    print(f"{len(out)} kernels pinned to {dst}")


def _local(path: str, root) -> str:
    """``path``, or where a wheel member lies under ``root`` when the scan's folder is gone."""
    if Path(path).exists() or root is None or "aiter_meta/" not in path:
        return path
    return str(Path(root).expanduser() / path[path.index("aiter_meta/"):])


if __name__ == "__main__":
    main()
