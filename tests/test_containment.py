"""Slice containment (issue 36, item 1a): the bounds check proves that every access the V#
lets through lies inside the workgroup's own (batch, head) slice, or its ``reach`` (the slice
plus the padded rows a last tile reads and discards), not merely inside the allocation.

examples/q_next_row.s (gfx942, hdim 128, bf16, BHSD): each workgroup reads rows 1..64 of its
head, one past the lane's own, through a V# that covers the batch's heads.  Every workgroup
makes the same error, so the relative address claim cannot see it."""
import shutil
import subprocess

from addrsim.api import verify
from addrsim.errors import InputError
from addrsim.model.schema import load_models

import pytest

from test_examples import EX, MODEL, build

SMALL = {"batch": (1, 1), "nhead_q": (1, 64), "seqlen_q": (64, 4096)}    # no 32-bit wrap of the offset


def checks(co):
    rep = verify(co, buffers=["q"], layouts=["bhsd"], model_files=[MODEL], properties=["address", "bounds"],
                 bounds=SMALL)
    return {c["property"]: c for c in rep["kernels"][0]["checks"]}


def build_text(text, name, tmp_path):
    src = tmp_path / f"{name}.s"
    src.write_text(text)
    obj, co = tmp_path / f"{name}.o", tmp_path / f"{name}.co"
    subprocess.run([shutil.which("llvm-mc-22"), "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj",
                    str(src), "-o", str(obj)], check=True)
    subprocess.run([shutil.which("ld.lld-22"), "-shared", str(obj), "-o", str(co)], check=True)
    return co


def test_a_row_past_the_slice_in_every_workgroup_is_a_layout_counterexample(tmp_path):
    """BHSD, batch 1, seqlen_q >= 64: the address is proved (the same error in every head),
    the bounds check refutes containment: at seqlen_q 64 lane 63 of head 0 reads head 1's row 0
    (offset 16384 = 64 rows of 256 bytes from its slice base, all it may reach)."""
    got = checks(build("q_next_row", tmp_path))
    assert got["address"]["verdict"] == "proved"
    b = got["bounds"]
    assert b["verdict"] == "counterexample" and b["cause"] == "layout", b["reason"]
    assert "outside the workgroup's own (batch, head) slice of q" in b["reason"]
    x = b["counterexample"]
    assert x["shape"]["seqlen_q"] == 64 and x["lane"] % 64 == 63
    assert x["address"] == {"extracted": 64 * 256, "expected": 64 * 256}
    assert x["replayed_on"] == "this kernel"


def test_the_same_kernel_reading_its_own_rows_is_proved(tmp_path):
    """The edit undone (rows 0..63 of the lane's own head): address and bounds proved."""
    text = (EX / "q_next_row.s").read_text().replace("        v_add_u32_e32 v1, 1, v1", "")
    got = checks(build_text(text, "q_own_row", tmp_path))
    assert got["address"]["verdict"] == "proved"
    assert got["bounds"]["verdict"] == "proved", got["bounds"]["reason"]


def test_the_last_head_clamped_by_the_v_sharp_is_no_allocation_fault(tmp_path):
    """The allocation claim is decided first and holds: the last head's row 64 lies past
    num_records (read as 0), so only containment fails."""
    b = checks(build("q_next_row", tmp_path))["bounds"]
    assert b["cause"] != "allocation"


def test_reach_must_be_an_expression(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("buffers:\n  q: {ptr: [Q], expected: '0', slice: '4', reach: [1, 2]}\n")
    with pytest.raises(InputError, match="reach"):
        load_models([str(bad)])


def _mask_row(mask: str, shift: int, tmp_path, name: str):
    """q_next_row without its "+ 1", the lane's row taken as (tid_x & mask) >> shift: an ``and``
    with a contiguous mask of middle bits, encoded exactly since issue 39 (2026-12-05)."""
    text = (EX / "q_next_row.s").read_text().replace("        v_add_u32_e32 v1, 1, v1", "").replace(
        "        v_and_b32_e32 v1, 63, v0", f"        v_and_b32_e32 v1, {mask}, v0\n"
                                           f"        v_lshrrev_b32_e32 v1, {shift}, v1")
    return checks(build_text(text, name, tmp_path))


def test_a_row_from_a_middle_bit_mask_inside_the_head_is_proved(tmp_path):
    """(tid_x & 0xfc) >> 2: rows 0..63, each read by four lanes: address and bounds proved."""
    got = _mask_row("0xfc", 2, tmp_path, "q_mask_row")
    assert got["address"]["verdict"] == "proved"
    assert got["bounds"]["verdict"] == "proved", got["bounds"]["reason"]


def test_a_row_from_a_mask_shifted_one_bit_short_is_a_layout_counterexample(tmp_path):
    """(tid_x & 0xfe) >> 1: rows up to 127 (a shift one bit short for the 256 work-items), past
    the head's 64 at seqlen_q 64: the bounds check refutes containment with a lane whose masked
    row is 64 or more, replayed on the kernel.  (0x1fc >> 2 would be right: tid_x < 256.)"""
    got = _mask_row("0xfe", 1, tmp_path, "q_mask_wide")
    b = got["bounds"]
    assert b["verdict"] == "counterexample" and b["cause"] == "layout", b["reason"]
    x = b["counterexample"]
    assert x["shape"]["seqlen_q"] == 64 and (x["lane"] & 0xfe) >> 1 >= 64
    assert x["replayed_on"] == "this kernel"
