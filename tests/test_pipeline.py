"""The virtual MI300 runs the whole backward pass (issue 37): the odo pre-kernel (D), the
dQ/dK/dV kernel and the dq_convert / dq_shuffle post-kernel, chosen from the routing csvs
beside the kernel as aiter e4048607's host chooses them (csrc/cpp_itfs/mha_bwd.cu), and
``--stage`` runs one of them on reference inputs so a failure splits as the seed's does (D
right, gradients wrong).

The selection is tested on csvs written here; the runs need ../shared/aiter-e4048607 (the
kernels of that corpus are read in place, never copied) and skip without it."""
import subprocess
import sys
from pathlib import Path

import pytest

from addrsim.emu.pipeline import acc_layout, find_pipeline
from addrsim.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "aiter-e4048607" / "hsa"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="needs ../shared/aiter-e4048607")
HEAD = "dtype,hdim_q,hdim_v,mask,atomic32,pssk,pddv,mode,bf16_cvt,ts_qo,ts,knl_name,co_name\n"


def _folder(tmp_path, tables):
    for name, rows in tables.items():
        (tmp_path / f"fmha_bwd_{name}.csv").write_text(HEAD + "".join(r + "\n" for r in rows))
    return tmp_path


ODO = ["fp16,128,128,0,0,0,0,0,3,0,128,odo_fp16,odo_fp16.co", "bf16,128,128,0,0,0,0,0,3,0,128,odo_bf16,odo_bf16.co",
       "bf16,128,128,0,0,0,0,1,3,0,128,odo_bf16_group,odo_bf16_group.co"]
CONVERT = ["bf16,128,128,0,0,0,0,0,0,0,64,cvt_rtne,cvt_rtne.co", "bf16,128,128,0,0,0,0,0,1,0,64,cvt_rtna,cvt_rtna.co",
           "fp16,128,128,0,0,0,0,0,3,0,64,cvt_fp16,cvt_fp16.co"]
SHUFFLE = ["bf16,128,128,0,0,0,0,0,3,0,64,shuffle,shuffle.co"]
MAIN = ["bf16,128,128,0,1,1,0,0,3,16,192,a32,a32.co", "bf16,128,128,0,0,0,0,0,0,16,192,a16,a16.co",
        "fp16,128,128,0,1,1,0,0,3,16,192,a32h,a32h.co"]


def test_the_host_picks_odo_and_the_post_kernel(tmp_path):
    """gfx942: an atomic32 kernel gets odo and dq_convert (bf16_cvt 3 means the caller's
    default, 1: rtna), an a16 kernel odo and no post-kernel; fp16 gets fp16's convert.
    gfx950: the 16-bit accumulator gets dq_shuffle (any dtype); ts from the csv."""
    d = _folder(tmp_path, {"odo": ODO, "dq_convert": CONVERT, "dq_shuffle": SHUFFLE, "dqdkdv": MAIN})
    p = find_pipeline(d / "a32.co", "gfx942")
    assert (p.pre.symbol, p.pre.ts, p.post.role, p.post.symbol) == ("odo_bf16", 128, "dq_convert", "cvt_rtna")
    p = find_pipeline(d / "a16.co", "gfx942")
    assert p.pre.symbol == "odo_bf16" and p.post is None
    assert find_pipeline(d / "a32h.co", "gfx942").post.symbol == "cvt_fp16"
    p = find_pipeline(d / "a16.co", "gfx950")
    assert (p.post.role, p.post.symbol, p.post.ts) == ("dq_shuffle", "shuffle", 64)
    assert find_pipeline(d / "a32.co", "gfx950").post.symbol == "cvt_rtne"       # gfx950 forces rtne


def test_no_csv_row_means_the_host_does_it_and_a_missing_post_kernel_is_bad_input(tmp_path):
    """The wheel: no routing csv beside the kernel, so D and dQ are the host's (None).  A csv
    that needs a post-kernel it does not list is one line naming the file."""
    assert find_pipeline(tmp_path / "a32.co", "gfx942") is None
    d = _folder(tmp_path, {"odo": ODO, "dqdkdv": MAIN})
    assert find_pipeline(d / "other.co", "gfx942") is None
    with pytest.raises(InputError, match="needs a dq_convert post-kernel"):
        find_pipeline(d / "a32.co", "gfx942")


def test_the_accumulator_has_the_hosts_shape():
    """mha_bwd.cu 592-611: fp32 [b, h, s, d] for atomic32; 16-bit [b, h, ceil16(s), 128] else;
    the batch stride is 0 at batch 1."""
    env = {"batch": 2, "nhead_q": 3, "seqlen_q": 100, "hdim_q": 128}
    assert acc_layout(True, env) == (4, (2, 3, 100, 128), (3 * 100 * 512, 100 * 512, 512))
    assert acc_layout(False, env) == (2, (2, 3, 112, 128), (3 * 112 * 256, 112 * 256, 256))
    assert acc_layout(True, dict(env, batch=1))[2][0] == 0


SHAPE = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128, "seqlen_k": 128}
HDIMS = {"hdim_q": 128, "hdim_v": 128}


@needs_corpus
@pytest.mark.slow
def test_whole_pass_on_gfx942_a32_in_sbhd():
    """odo, the a32 rtna kernel, dq_convert rtna: D, dQ (bf16 in SBHD), dK, dV all right."""
    from addrsim.api import run
    rep = run(CORPUS / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a32_rtna_psskddv.co", "sbhd", dict(SHAPE, **HDIMS))
    assert rep["ok"], rep["outputs"]
    assert [s["stage"] for s in rep["stages"]] == ["odo", "main", "dq_convert"]
    assert set(rep["outputs"]) == {"d", "dq", "dk", "dv"}


@needs_corpus
@pytest.mark.slow
def test_whole_pass_on_gfx950_a16_with_dq_shuffle():
    """gfx950's 16-bit accumulator is in the kernel's own order; dq_shuffle puts it in BSHD:
    dQ right only through the post-kernel (seqlen 100: ceil16 rows, a partial tile)."""
    from addrsim.api import run
    rep = run(CORPUS / "gfx950" / "fmha_v3_bwd" / "bwd_hd128_bf16_a16_psskddv.co", "bshd",
              dict(SHAPE, seqlen_q=100, seqlen_k=100, **HDIMS))
    assert rep["ok"], rep["outputs"]
    assert [s["stage"] for s in rep["stages"]] == ["odo", "main", "dq_shuffle"]


@needs_corpus
@pytest.mark.slow
def test_each_stage_alone_on_reference_inputs(capsys):
    """--stage odo compares D only, --stage post dQ only (from the reference accumulator);
    dq_shuffle's input has no reference (exit 2); the wheel has no odo kernel (exit 2)."""
    from addrsim.commands.cli import main
    k = CORPUS / "gfx950" / "fmha_v3_bwd" / "bwd_hd128_bf16_a32_psskddv.co"
    shape = "batch=2,nhead_q=2,seqlen_q=128,hdim_q=128,hdim_v=128"
    for stage, outs in (("odo", "d:"), ("post", "dq:")):
        assert main(["run", str(k), "--layout", "bshd", "--shape", shape, "--stage", stage]) == 0
        out = capsys.readouterr().out
        assert out.count(": ok") == 1 and f"  {outs} ok" in out
    a16 = k.parent / "bwd_hd128_bf16_a16_psskddv.co"
    assert main(["run", str(a16), "--shape", shape, "--stage", "post"]) == 2
    assert "main kernel's own order" in capsys.readouterr().err


@needs_corpus
@pytest.mark.slow
def test_lse_shortcut_edited_back_splits_as_the_seed_says(tmp_path):
    """aiter e4048607's gfx942 a16 kernel computes LseD_base = (batch*nhead_q + head) *
    Hs_lsed (0x4164-0x4168).  Edited back to the 2025 shortcut (batch * BAs_q) >> 6, the
    whole pass in SBHD at batch 2: the odo kernel's D right, dQ, dK and dV wrong in batch 1's
    slices from row 0; BHSD right; SBHD at batch 1 right."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from mutations import edit
    from addrsim.api import run
    k = CORPUS / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a16_rtne.co"
    text = subprocess.run(["llvm-objdump-22", "-d", str(k)], capture_output=True, text=True, check=True).stdout
    text = edit(text, 0x4164, "s_mul_i32 s62, s4, s87", "s_mul_i32 s62, s4, s53")      # batch * BAs_q
    text = edit(text, 0x4168, "s_mul_i32 s62, s62, s86", "s_lshr_b32 s62, s62, 6")     # >> 6
    lst = tmp_path / "shortcut.lst"
    lst.write_text(text)
    rep = run(lst, "sbhd", SHAPE, like=k)
    assert rep["outputs"]["d"]["ok"]
    for b in ("dq", "dk", "dv"):
        assert rep["outputs"][b]["wrong_slices"] == [[1, 0], [1, 1]]
        assert set(rep["outputs"][b]["first_rows"].values()) == {0}
    assert run(lst, "bhsd", SHAPE, like=k)["ok"]
    assert run(lst, "sbhd", dict(SHAPE, batch=1), like=k)["ok"]


@needs_corpus
@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["bwd_hd128_bf16_a16_psskddv_group", "bwd_hd128_bf16_causal_br_a32_psskddv_group"])
def test_whole_pass_in_group_mode(kernel):
    """Group mode on gfx950 (sequence starts for odo, main and the post-kernel; sequences of
    different lengths, seqlen_k longer than seqlen_q for the bottom-right mask): D, dQ, dK, dV
    right through odo_group and dq_shuffle_group / dq_convert_group."""
    from addrsim.api import run
    rep = run(CORPUS / "gfx950" / "fmha_v3_bwd" / f"{kernel}.co", "bshd",
              dict(SHAPE, seqlen_k=192 if "causal_br" in kernel else 128, **HDIMS))
    assert rep["ok"], rep["outputs"]
    assert [s["stage"] for s in rep["stages"]][0] == "odo" and set(rep["outputs"]) == {"d", "dq", "dk", "dv"}
