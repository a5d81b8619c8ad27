"""Mutation score of addrsim's checks on the README kernel (issue 36): one-instruction edits of
its llvm-objdump listing over every buffer, each verified (address and bounds, BHSD and SBHD)
and compared with the unedited listing.

    python3 benchmarks/mutations.py ~/.cache/addrsim/x/aiter_meta/hsa/gfx942/fmha_v3_bwd/bwd_hd128_bf16_a16_rtne.co

An edit is *killed* when a check of its buffers becomes a counterexample it was not (another
cause, shape or workgroup), *survived* when every check reads as before, *undecided* when a
check changed only to unknown or unsupported.  Equivalent edits must survive.  Prints one line
per edit and the score; the tests pin the edits of the issue (tests/test_mutations.py).
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from addrsim.api import verify

# (name, buffers checked, [(pc, old, new), ...], equivalent?)
EDITS = [
    ("q: carry dropped", ["q"], [(0x2BE8, "s_addc_u32 s9, 0, s79", "s_add_u32 s9, 0, s79")], False),
    ("k: carry dropped", ["k"], [(0x2BD8, "s_addc_u32 s13, 0, s81", "s_add_u32 s13, 0, s81")], False),
    ("v: carry dropped", ["v"], [(0x2BE0, "s_addc_u32 s17, 0, s83", "s_add_u32 s17, 0, s83")], False),
    ("do: carry dropped", ["do"], [(0x2BF0, "s_addc_u32 s21, 0, s85", "s_add_u32 s21, 0, s85")], False),
    ("q: through K's pointer", ["q"], [(0x2BE4, "s_add_u32 s8, s55, s78", "s_add_u32 s8, s55, s80"),
                                       (0x2BE8, "s_addc_u32 s9, 0, s79", "s_addc_u32 s9, 0, s81")], False),
    ("do: high word of Q", ["do"], [(0x2BF0, "s_addc_u32 s21, 0, s85", "s_addc_u32 s21, 0, s79")], False),
    ("q: lane term << 3", ["q"], [(0x3BA8, "v_lshlrev_b32_e32 v28, 2, v28", "v_lshlrev_b32_e32 v28, 3, v28")], False),
    ("k: lane term << 3", ["k"], [(0x2B8C, "v_lshlrev_b32_e32 v28, 2, v28", "v_lshlrev_b32_e32 v28, 3, v28")], False),
    ("dk: wave-row term dropped", ["dk"], [(0x2C28, "v_add_u32_e32 v5, s60, v5", "v_add_u32_e32 v5, 0, v5")], False),
    ("dk: row step dropped", ["dk"], [(0x83D0, "v_add_u32_e32 v5, s46, v5", "v_add_u32_e32 v5, 0, v5")], False),
    ("dv: row step dropped", ["dv"], [(0x9800, "v_add_u32_e32 v10, s46, v10", "v_add_u32_e32 v10, 0, v10")], False),
    ("dq: lane term << 3", ["dq"], [(0x2C74, "v_lshlrev_b32_e32 v6, 2, v6", "v_lshlrev_b32_e32 v6, 3, v6")], False),
    ("dq: wave term dropped", ["dq"], [(0x2C70, "v_add_u32_e32 v6, s60, v6", "v_add_u32_e32 v6, 0, v6")], False),
    ("lse/d: lane term << 3", ["lse", "d"], [(0x2BF8, "v_lshlrev_b32_e32 v11, 2, v11",
                                              "v_lshlrev_b32_e32 v11, 3, v11")], False),
    ("q: add operands commuted", ["q"], [(0x2BE4, "s_add_u32 s8, s55, s78", "s_add_u32 s8, s78, s55")], True),
    ("lse/d: x << 2 as x * 4", ["lse", "d"], [(0x2BF8, "v_lshlrev_b32_e32 v11, 2, v11",
                                               "v_mul_u32_u24_e32 v11, 4, v11")], True),
]
LAYOUTS = ["bhsd", "sbhd"]


def edit(text: str, pc: int, old: str, new: str) -> str:
    pat = re.compile(rf"^(\s*){re.escape(old)}(\s+// {pc:012X}:)", re.M)
    out, n = pat.subn(lambda m: m.group(1) + new + m.group(2), text)
    if n != 1:
        raise SystemExit(f"edit at {pc:#x}: {old!r} not found once")
    return out


def essence(rep) -> dict:
    out = {}
    for c in rep["kernels"][0]["checks"]:
        x = c.get("counterexample") or {}
        out[(c["buffer"], c["layout"], c.get("property"))] = (c["verdict"], c.get("cause"), x.get("shape"),
                                                               x.get("coords"))
    return out


def classify(before: dict, after: dict) -> str:
    changed = [k for k in before if after.get(k) != before[k]]
    if not changed:
        return "survived"
    if any(after[k][0] == "counterexample" for k in changed):
        return "killed"
    return "undecided"


def main(co: str) -> None:
    listing = subprocess.run(["llvm-objdump-22", "-d", co], capture_output=True, text=True, check=True).stdout
    score = {"killed": 0, "survived": 0, "undecided": 0}
    wrong = 0
    with tempfile.TemporaryDirectory() as d:
        base = {}
        for name, bufs, edits, equivalent in EDITS:
            key = tuple(bufs)
            if key not in base:
                p = Path(d) / "orig.s"
                p.write_text(listing)
                base[key] = essence(verify(p, bufs, LAYOUTS, like=co))
            text = listing
            for pc, old, new in edits:
                text = edit(text, pc, old, new)
            p = Path(d) / "edited.s"
            p.write_text(text)
            t = time.time()
            after = essence(verify(p, bufs, LAYOUTS, like=co))
            got = classify(base[key], after)
            causes = sorted({v[1] or "" for k, v in after.items() if v != base[key].get(k) and v[0] == "counterexample"})
            want = "survived" if equivalent else "killed"
            wrong += got != want and equivalent
            if not equivalent:
                score[got] += 1
            print(f"{name:32s} {got:9s} {'(equivalent) ' if equivalent else ''}{','.join(causes):20s} "
                  f"{time.time() - t:6.1f}s")
    print(f"score over {len(EDITS) - sum(e[3] for e in EDITS)} wrong edits: {score['killed']} killed, "
          f"{score['survived']} survived, {score['undecided']} undecided; equivalent edits changed: {wrong}")


if __name__ == "__main__":
    main(sys.argv[1])
