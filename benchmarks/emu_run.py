"""Speed of the virtual MI300 (issue 37): one `addrsim run` of the README kernel (the wheel's
gfx942 hd128 bf16 a16) at batch 2, nhead 2, seqlen 128 in BHSD, and its instructions per second.

    python3 benchmarks/emu_run.py ~/.cache/addrsim/x/aiter_meta/hsa/gfx942/fmha_v3_bwd/bwd_hd128_bf16_a16_rtne.co

Prints one line: seconds of the run (the emulation alone, the reference excluded), wave
instructions executed, instructions per second, and the ratio to the 30 s aim of the issue.
"""
from __future__ import annotations

import sys
import time

from addrsim.api import run

AIM_S = 30.0


def main(path: str) -> None:
    t0 = time.time()
    rep = run(path, "bhsd", {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128, "seqlen_k": 128})
    total = time.time() - t0
    n, s = rep["instructions"], rep["seconds"]
    print(f"emu run bhsd 2x2x128: {'right' if rep['ok'] else 'WRONG'}, {s:.1f} s emulated ({total:.1f} s in all), "
          f"{n} wave instructions, {n / s:,.0f} instructions/s, {s / AIM_S:.2f} of the {AIM_S:g} s aim")


if __name__ == "__main__":
    main(sys.argv[1])
