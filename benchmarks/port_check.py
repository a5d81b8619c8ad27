"""Porting check over a wheel: `addrsim diff` of every gfx942 fmha_v3_bwd kernel and its
gfx950 namesake (LSE and D by default, --check address), one line per pair, and a JSON file.

    python3 benchmarks/port_check.py ~/.cache/addrsim/x/aiter_meta/hsa --json port.json [--limit N]

Prints, per pair, whether the address logic carries over (same verdict and the same offset
in the no-wrap reading in every layout), the changes otherwise, and the time.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from addrsim.commands.diff import diff  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hsa", help="aiter_meta/hsa folder (gfx942/ and gfx950/ below)")
    ap.add_argument("--buffer", action="append")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()
    d42, d50 = Path(a.hsa) / "gfx942" / "fmha_v3_bwd", Path(a.hsa) / "gfx950" / "fmha_v3_bwd"
    names = sorted({p.name for p in d42.glob("*.co")} & {p.name for p in d50.glob("*.co")})
    if a.limit:
        names = names[:a.limit]
    rows, t_all = [], time.time()
    for n in names:
        t0 = time.time()
        rep = diff(d42 / n, d50 / n, a.buffer or ["lse", "d"], timeout_ms=3000, check_budget_s=20, min_budget_s=1)
        checks = [c for k in rep["kernels"] for c in k["checks"]]
        alike = all(c["change"] == "same" and c["same_offset"] for c in checks) and bool(checks)
        unread = all(c["change"] == "same" and c["same_offset"] is not False for c in checks) and not alike
        rows.append({"kernel": n, "carries_over": alike, "same_verdicts_offsets_not_compared": unread, "summary": rep["summary"], "time_s": round(time.time() - t0, 1),
                     "checks": [{k: c[k] for k in ("buffer", "layout", "change", "same_offset")} |
                                {"old": c["old"]["verdict"], "new": c["new"]["verdict"]} for c in checks]})
        print(f"{n:<48} {'carries over' if alike else 'same verdicts' if unread else 'DIFFERS':<13} {time.time() - t0:6.1f}s  {rep['summary'][:150]}",
              flush=True)
    n_alike = sum(r["carries_over"] for r in rows)
    print(f"\n{n_alike} of {len(rows)} same-name kernels carry their LSE/D address logic over; "
          f"{time.time() - t_all:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps({"pairs": rows}, indent=1))


if __name__ == "__main__":
    main()
