"""`addrsim explain` (issue 5 item 3): the backward slice of a buffer's address."""
import subprocess
import sys

from addrsim.report.explain import explain

from test_examples import MODEL, build


def test_slice_of_the_abi_fix(tmp_path):
    """Pattern A: the slice holds the argument loads and the 64-bit product, not the rest."""
    (e,) = explain(build("lsed_abi_fix", tmp_path), "lse", model_files=[MODEL])
    texts = [ln.text for ln in e.lines]
    assert "s_mul_i32 s18, s4, s16" in texts            # batch_id * nhead_q
    assert "s_mul_hi_u32 s20, s18, s17" in texts        # high half of the product
    assert not any(t.startswith("s_load_dwordx2 s[12:13]") for t in texts)   # D's pointer: not LSE's slice
    assert set(e.args) == {"Lse", "nhead_q", "Hs_lsed"}
    assert [ln.pc for ln in e.lines] == sorted(ln.pc for ln in e.lines)
    assert e.offset_nowrap == "Hs_lsed*(batch_id*nhead_q + head_id)"      # lane 0, the carries read whole
    assert "mulhu" in e.offset                                           # the hardware form keeps them


def test_real_kernel_lse_slice_is_short(real_kernel):
    """bwd_hd128_bf16_a16_rtne: the LSE address comes from about 15 of its instructions,
    among them the (batch_id*BAs) >> 6 shortcut."""
    exps = explain(real_kernel, "lse")
    e = next(x for x in exps if x.access_pc == 0x3eb0)
    assert len(e.lines) < 30
    assert any(ln.text == "s_lshr_b32 s62, s62, 6" and "BAs*batch_id" in ln.value for ln in e.lines)
    assert {"BAs", "seq_len", "Lse"} <= set(e.args)
    # every lane, LSE's own V# case (waves 0-1; D's waves take the other), pointers read as 0
    # (issue 40): no per-wave Piecewise, no pointer high word counted twice
    assert e.offset == "4*head_id*seq_len + 4*(Mod(tid_x, 16)) + 4*floor(floor(BAs*batch_id/64)/4)"
    (q,) = [x for x in explain(real_kernel, "q")][:1]
    assert not any(w in q.offset for w in ("Piecewise", "4294967296", "ult(", "Q"))
    assert q.offset.startswith("BAs*batch_id + Hs*head_id + ")
    add = next(ln for ln in q.lines if ln.text == "s_add_u32 s8, s55, s78")       # its sum, not its carry (SCC)
    assert not add.value.startswith("ult(") and "BAs*batch_id + Hs*head_id" in add.value


def test_accesses_with_the_same_slice_are_shown_once(real_kernel):
    """A fresh-user trial (issue 40): dQ's two atomic adds (0x4fac, 0x6a7c) have one slice."""
    (e,) = explain(real_kernel, "dq")
    assert (e.access_pc, e.also) == (0x4fac, [0x6a7c])


def test_cli(real_kernel):
    p = subprocess.run([sys.executable, "-m", "addrsim", "explain", str(real_kernel), "--buffer", "lse"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "instructions feed its address" in p.stdout and "s_mul_i32 s62, s4, s53" in p.stdout
    p = subprocess.run([sys.executable, "-m", "addrsim", "explain", str(real_kernel), "--buffer", "nope"],
                       capture_output=True, text=True)
    assert p.returncode == 3 and "unknown buffer" in p.stderr and p.stderr.count("\n") == 1
