"""The odo pre-kernel is a modelled family (issue 38, item 1): aiter e4048607's
fmha_bwd_hd*_odo kernels, batch and group mode, gfx942 and gfx950, with the 2026 host's odo
contract (mha_bwd.cu:46-111: O, dO and D each with its own byte strides).

O takes dO's strides in the built-in layouts; a user view may give O its own.  The fix aiter
made (the odo kernel addresses dO with dO's strides, not O's) is the test: the kernel is
proved in a view where the two differ, and the kernel edited back to O's strides is a
formula counterexample there, at the smallest shape.  Needs ../shared/aiter-e4048607."""
import subprocess
from pathlib import Path

import pytest

from addrsim.api import verify
from addrsim.model.models import load_models

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "aiter-e4048607" / "hsa"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CORPUS.exists(), reason="needs ../shared/aiter-e4048607")]
SMALL = {"batch": (1, 4), "nhead_q": (1, 8), "seqlen_q": (1, 4096)}
VIEW = """layouts:
  bshd_o_wide:                 # O a view of a tensor twice as wide (its head and row strides doubled)
    extends: bshd
    o: {batch: "seqlen_q*nhead_q*hdim_v*2", head: "hdim_v*2", seq: "nhead_q*hdim_v*2"}
"""


def _odo(arch, group=False):
    return CORPUS / arch / "fmha_v3_bwd" / f"bwd_hd128_odo_bf16{'_group' if group else ''}.co"


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_odo_writes_d_where_the_main_kernel_reads_it(arch):
    """D (fp32 [batch, nhead_q, seqlen_q], written by odo at LSE's strides) is proved in every
    built-in layout on both architectures; O and dO are proved below 4 GiB, and past it their
    only counterexamples are 32-bit wraps (0x2530 adds the tile and head terms in 32 bits:
    cause overflow), never a formula or layout cause.  On gfx950 the 64-bit base add carries
    into V# dword1: its swizzle_enable bit is proved 0 on the domain first."""
    rep = verify(_odo(arch), ["o", "do", "d"], ["bhsd", "bshd", "sbhd"], properties=("address",))
    checks = {(c["buffer"], c["layout"]): c for c in rep["kernels"][0]["checks"]}
    assert all(checks[("d", lay)]["verdict"] == "proved" for lay in ("bhsd", "bshd", "sbhd"))
    for (b, lay), c in checks.items():
        assert c["verdict"] == "proved" or c.get("cause") == "overflow", (b, lay, c["verdict"], c.get("cause"))
    small = verify(_odo(arch), ["o", "do"], ["bhsd", "bshd", "sbhd"], properties=("address",), bounds=SMALL)
    assert all(c["verdict"] == "proved" for c in small["kernels"][0]["checks"])


def test_a_swizzle_bit_that_can_be_set_is_never_read_as_linear(tmp_path):
    """The rule that lets gfx950's odo through (computed swizzle_enable and add_tid_enable bits
    proved 0 on the domain, the address then built linear) must refuse a computed bit that can
    be 1: the odo kernel edited to OR bit 31 into O's computed dword1 (0x24e4: 0x40000 ->
    0x80040000) is unsupported, never proved with a linear address; the unedited kernel is
    proved at the same bounds.  (Constant bits are modelled: isa/memory.buffer_offset.)"""
    k = _odo("gfx950")
    text = subprocess.run(["llvm-objdump-22", "-d", str(k)], capture_output=True, text=True, check=True).stdout
    old = "s_or_b32 s13, s13, 0x40000"
    assert text.count(old) == 1
    lst = tmp_path / "odo_swizzled.s"
    lst.write_text(text.replace(old, "s_or_b32 s13, s13, 0x80040000"))
    rep = verify(lst, ["o"], ["bshd"], properties=("address",), bounds=SMALL, like=k)
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "unsupported" and "swizzle_enable" in c["reason"] and "not proved 0" in c["reason"]
    assert verify(k, ["o"], ["bshd"], properties=("address",), bounds=SMALL)["kernels"][0]["checks"][0]["verdict"] \
        == "proved"


def test_odo_addresses_do_with_dos_own_strides(tmp_path):
    """In a view where O's strides differ from dO's, the 2026 odo kernel is proved for both;
    with dO's stride loads pointed back at O's arguments (Hs_o, BAs_o, Seqs_o: the bug aiter
    fixed), dO is a formula counterexample in that view at the smallest shape, and still
    proved in plain BSHD, where the two tensors' strides agree."""
    views = tmp_path / "views.yaml"
    views.write_text(VIEW)
    ms = load_models([str(views)])
    k = _odo("gfx942")
    rep = verify(k, ["o", "do"], ["bshd_o_wide", "bshd"], models=ms, properties=("address",), bounds=SMALL)
    assert all(c["verdict"] == "proved" for c in rep["kernels"][0]["checks"])
    text = subprocess.run(["llvm-objdump-22", "-d", str(k)], capture_output=True, text=True, check=True).stdout
    for old, new in (("s_load_dword s50, s[0:1], 0x60", "s_load_dword s50, s[0:1], 0x30"),    # Hs_do -> Hs_o
                     ("s_load_dword s51, s[0:1], 0x70", "s_load_dword s51, s[0:1], 0x40"),    # BAs_do -> BAs_o
                     ("s_load_dword s52, s[0:1], 0x80", "s_load_dword s52, s[0:1], 0x50")):   # Seqs_do -> Seqs_o
        assert text.count(old) == 1
        text = text.replace(old, new)
    lst = tmp_path / "odo_o_strides.s"
    lst.write_text(text)
    rep = verify(lst, ["do"], ["bshd_o_wide", "bshd"], models=ms, properties=("address",), bounds=SMALL, like=k)
    checks = {c["layout"]: c for c in rep["kernels"][0]["checks"]}
    assert checks["bshd_o_wide"]["verdict"] == "counterexample" and checks["bshd_o_wide"]["cause"] == "formula"
    assert checks["bshd_o_wide"]["counterexample"]["shape"]["seqlen_q"] == 1
    assert checks["bshd"]["verdict"] == "proved"


def test_the_virtual_mi300_runs_odo_in_a_view_with_its_own_o_strides(tmp_path):
    """--stage odo on the view: O laid out with its own strides, D right."""
    from addrsim.api import run
    views = tmp_path / "views.yaml"
    views.write_text(VIEW)
    main = CORPUS / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a16_rtne.co"
    rep = run(main, "bshd_o_wide", {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128, "seqlen_k": 128},
              model_files=[str(views)], stage="odo")
    assert rep["ok"] and list(rep["outputs"]) == ["d"]


def test_group_odo_is_decided():
    """gfx950's group odo: D ([nhead_q, total_q] at seqstart_q[batch]) is proved; O (read at
    seqstart_q[batch] rows, its V#'s swizzle bit proved 0) is proved below 4 GiB."""
    rep = verify(_odo("gfx950", True), ["o", "d"], ["bshd"], properties=("address",), bounds=SMALL)
    checks = {c["buffer"]: c for c in rep["kernels"][0]["checks"]}
    assert checks["d"]["verdict"] == "proved" and checks["o"]["verdict"] == "proved"


def test_the_byte_range_check_of_an_offen_stride_v_sharp(tmp_path):
    """The MUBUF range row (isa/memory.buffer_in_range): with idxen clear, a stride-4 V# is
    checked in bytes.  The odo kernel stores D through one whose num_records is the slice's
    remaining bytes from its 128-row tile, so its bounds claim is proved; edited to leave the
    tile's start out of num_records (0x2598 s_sub_i32 s32, s32, s31 -> s32, 0), a second tile
    stores D past the tensor at seqlen_q 129: an allocation counterexample."""
    import sys
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from mutations import edit
    k = _odo("gfx942")
    bounds = {"batch": (1, 2), "nhead_q": (1, 4), "seqlen_q": (1, 1024)}
    rep = verify(k, ["d"], ["bhsd"], properties=("bounds",), bounds=bounds)
    assert rep["kernels"][0]["checks"][0]["verdict"] == "proved"
    text = subprocess.run(["llvm-objdump-22", "-d", str(k)], capture_output=True, text=True, check=True).stdout
    lst = tmp_path / "odo_records.s"
    lst.write_text(edit(text, 0x2598, "s_sub_i32 s32, s32, s31", "s_sub_i32 s32, s32, 0"))
    c = verify(lst, ["d"], ["bhsd"], properties=("bounds",), bounds=bounds, like=k)["kernels"][0]["checks"][0]
    assert c["verdict"] == "counterexample" and c["counterexample"]["shape"]["seqlen_q"] == 129
