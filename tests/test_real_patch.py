"""A worked patch of a real kernel, end to end (issue 40): the README kernel's SBHD LSE/D
bug fixed in its objdump listing by pattern B (`examples/patches/lse_sbhd_pattern_b.sed`,
four lines), then proved, diffed, gated and run as README.md shows.

Specification: the wheel's gfx942 hd128 bf16 a16 rtne kernel builds the LSE/D batch term as
(batch_id * BAs) >> 6, right in BHSD and BSHD, short by a factor seqlen_q in SBHD.  The patch
multiplies it by seq_len where the batch stride is below the sequence stride (SBHD):
- verify of the listing proves LSE and D in SBHD (address), with the offset in shape terms;
- diff: BHSD and BSHD keep their offset ("same"), SBHD is fixed, new - old in shape terms
  ``4*batch_id*nhead_q*(seqlen_q - 1)``, no Piecewise/Eq/xor/ult in the text;
- the listing gated against the kernel's own baseline: the two SBHD findings gone, nothing
  new (exit 0), the BHSD/BSHD wraps unchanged;
- on the virtual MI300, SBHD at batch 2: dQ, dK, dV right (the unpatched kernel's are wrong,
  tests/test_emu_kernel.py).
"""
import json
import subprocess
import sys
from pathlib import Path

PATCH = Path(__file__).parent.parent / "examples" / "patches" / "lse_sbhd_pattern_b.sed"
LSE_D = ["--buffer", "lse", "--buffer", "d", "--check", "address"]


def _addrsim(*args, ok=(0,)):
    p = subprocess.run([sys.executable, "-m", "addrsim", *map(str, args)], capture_output=True, text=True)
    assert p.returncode in ok, p.stderr + p.stdout[-3000:]
    return p


def _patched(real_kernel, tmp_path) -> Path:
    dis = subprocess.run(["llvm-objdump-22", "-d", str(real_kernel)], capture_output=True, text=True, check=True)
    fix = subprocess.run(["sed", "-f", str(PATCH)], input=dis.stdout, capture_output=True, text=True, check=True)
    added = [ln for ln in fix.stdout.splitlines() if ln not in set(dis.stdout.splitlines())]
    assert added == ["\ts_cmp_lt_u32 s53, s70", "\ts_cbranch_scc0 lse_batch_done", "\ts_mul_i32 s62, s62, s50",
                     "lse_batch_done:"]
    out = tmp_path / "bwd_fix.txt"
    out.write_text(fix.stdout)
    return out


def test_pattern_b_patch_of_the_readme_kernel_is_proved_diffed_gated_and_runs_right(real_kernel, tmp_path):
    fix = _patched(real_kernel, tmp_path)
    cache = ["--cache-dir", tmp_path / "q"]
    p = _addrsim("verify", fix, "--like", real_kernel, *LSE_D, "--layout", "sbhd", *cache)
    assert "lse/sbhd proved: extracted offset 4*seqlen_q*(batch_id*nhead_q + head_id)" in p.stdout
    assert "BAs >= Seqs" in p.stdout and "Eq(" not in p.stdout and "xor(" not in p.stdout

    d = _addrsim("diff", real_kernel, fix, "--like", real_kernel, *LSE_D, *cache, "--json", tmp_path / "d.json").stdout
    (kern,) = json.loads((tmp_path / "d.json").read_text())["kernels"]
    rows = {c["buffer"] + "/" + c["layout"]: c for c in kern["checks"]}
    assert {k: (c["change"], c["same_offset"]) for k, c in rows.items()} == {
        "lse/bhsd": ("same", True), "d/bhsd": ("same", True), "lse/bshd": ("same", True), "d/bshd": ("same", True),
        "lse/sbhd": ("fixed", False), "d/sbhd": ("fixed", False)}
    assert "SBHD: new - old = 4*batch_id*nhead_q*(seqlen_q - 1)  (bytes, shape terms)" in d
    assert not any(w in d for w in ("Piecewise", "Eq(", "xor(", "ult("))

    _addrsim("verify", real_kernel, *LSE_D, *cache, "--json", tmp_path / "base.json", ok=(1,))
    plain = tmp_path / "bwd.txt"            # the unedited listing: the kernel itself, gated as the kernel
    plain.write_text(subprocess.run(["llvm-objdump-22", "-d", str(real_kernel)], capture_output=True, text=True,
                                    check=True).stdout)
    g0 = _addrsim("scan", plain, "--like", real_kernel, *LSE_D, *cache, "--baseline", tmp_path / "base.json").stdout
    assert "0 failing (new and not accepted) of 6 finding(s): 0 new, 6 unchanged" in g0 and "0 gone" in g0
    g = _addrsim("scan", fix, "--like", real_kernel, *LSE_D, *cache, "--baseline", tmp_path / "base.json").stdout
    assert "0 failing (new and not accepted) of 4 finding(s): 0 new, 4 unchanged" in g
    assert "2 gone since the baseline" in g
    assert g.count("  gone ") == 2 and ":lse/sbhd:address:counterexample:formula" in g

    r = _addrsim("run", fix, "--like", real_kernel, "--layout", "sbhd", "--shape", "batch=2,nhead_q=2,seqlen_q=128")
    assert ": RIGHT (" in r.stdout and "WRONG" not in r.stdout


def test_an_inverted_branch_is_worse_in_diff_and_fails_the_gate(real_kernel, tmp_path):
    """A fresh-user trial's wrong patch: s_cbranch_scc1 instead of scc0 multiplies the BHSD and
    BSHD batch term by seq_len (wrong at batch 2, 0.25 MiB) and leaves SBHD's bug.  BHSD/BSHD
    were counterexamples already (a 32-bit wrap at 38 GiB), so the verdict word is the same;
    diff calls them worse (NEW fails below OLD's proven-minimal counterexample) and exits 1,
    and the gate counts them new."""
    fix = _patched(real_kernel, tmp_path)
    wrong = tmp_path / "wrong_br.txt"
    wrong.write_text(fix.read_text().replace("s_cbranch_scc0 lse_batch_done", "s_cbranch_scc1 lse_batch_done"))
    cache = ["--cache-dir", tmp_path / "q"]
    d = _addrsim("diff", real_kernel, wrong, "--like", real_kernel, *LSE_D, "--layout", "bhsd", "--layout", "sbhd",
                 *cache, ok=(1,)).stdout
    assert "address  lse    bhsd    counterexample  counterexample  worse" in d
    assert "summary: WORSE (fails below OLD's least counterexample, where OLD holds) lse/bhsd, d/bhsd" in d
    _addrsim("verify", real_kernel, *LSE_D, "--layout", "bhsd", *cache, "--json", tmp_path / "base.json", ok=(1,))
    g = _addrsim("scan", wrong, "--like", real_kernel, *LSE_D, "--layout", "bhsd", *cache,
                 "--baseline", tmp_path / "base.json", ok=(1,)).stdout
    assert "FAILING gfx942/bwd_hd128_bf16_a16_rtne.co:_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE:lse/bhsd" in g


def test_a_wrong_register_is_another_wrong_offset_in_diff(real_kernel, tmp_path):
    """A trial's wrong patch: s52 (Hs) instead of s50 (seq_len) leaves SBHD wrong, with another
    offset (4*batch_id*nhead_q*(256 - seqlen_q) against the old (1 - seqlen_q)).  The verdict
    word is the same; diff calls it another wrong offset and exits 1, as the gate counts it new."""
    fix = _patched(real_kernel, tmp_path)
    wrong = tmp_path / "wrong_reg.txt"
    wrong.write_text(fix.read_text().replace("s_mul_i32 s62, s62, s50", "s_mul_i32 s62, s62, s52"))
    d = _addrsim("diff", real_kernel, wrong, "--like", real_kernel, *LSE_D, "--layout", "sbhd",
                 "--cache-dir", tmp_path / "q", ok=(1,)).stdout
    assert "address  lse    sbhd    counterexample  counterexample  another" in d
    assert "ANOTHER wrong offset where the old one was lse/sbhd, d/sbhd" in d
    assert "2 of 2 checks keep their verdict" in d
