#!/usr/bin/env bash
# Plans of the GPU cross-check for the wheel's kernels with LSE/D counterexamples, and a few
# proved ones: one `addrsim crosscheck --plan-out` per kernel, merged into one plan.
#   benchmarks/crosscheck_wheel.sh HSA_DIR OUT_PLAN.json     (HSA_DIR = .../aiter_meta/hsa)
# Then, on the GPU machine: python3 -m addrsim.gpu.crossrun OUT_PLAN.json --backend triton --json R.json
set -euo pipefail
HSA=$1; OUT=$2; TMP=$(mktemp -d)
cd "$HSA"
LIST=$( (ls gfx942/fmha_v3_bwd/*.co | grep -v "pssk\|pddv\|group"; ls gfx950/fmha_v3_bwd/*.co | grep "hd64_.*a16";
         echo gfx942/fmha_v3_bwd/bwd_hd128_bf16_a32_rtna_psskddv.co gfx942/fmha_v3_bwd/bwd_hd64_bf16_a32_rtna_pssk.co \
              gfx950/fmha_v3_bwd/bwd_hd128_bf16_a16_psskddv.co gfx950/fmha_v3_bwd/bwd_hd128_bf16_a32_psskddv.co) | tr ' ' '\n')
cd - >/dev/null
i=0
for k in $LIST; do
  i=$((i + 1))
  python3 -m addrsim crosscheck "$HSA/$k" --cases 4 --plan-out "$TMP/$(printf %03d $i).json" 2>/dev/null
done
python3 - "$TMP" "$OUT" "$HSA" <<'PY'
import glob, json, os, sys
tmp, out, hsa = sys.argv[1:]
cases = []
for f in sorted(glob.glob(os.path.join(tmp, "*.json"))):
    for c in json.load(open(f))["cases"]:
        c["file"] = os.path.relpath(c["file"], os.path.dirname(os.path.dirname(os.path.abspath(hsa))))
        cases.append(c)
json.dump({"tool": "addrsim", "cases": cases}, open(out, "w"))
print(f"{len(cases)} cases -> {out}")
PY
