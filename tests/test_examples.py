"""Synthetic kernels in examples/, assembled with llvm-mc-22 and ld.lld-22."""
import shutil
import subprocess
from pathlib import Path

import pytest

from addrsim.api import verify

EX = Path(__file__).resolve().parent.parent / "examples"
MODEL = str(EX / "models" / "examples.yaml")


def build(name, tmp_path) -> Path:
    mc, ld = shutil.which("llvm-mc-22"), shutil.which("ld.lld-22")
    assert mc and ld, "llvm-mc-22 and ld.lld-22 are needed (apt-get install llvm-22 lld-22)"
    obj, co = tmp_path / f"{name}.o", tmp_path / f"{name}.co"
    subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj", str(EX / f"{name}.s"),
                    "-o", str(obj)], check=True)
    subprocess.run([ld, "-shared", str(obj), "-o", str(co)], check=True)
    return co


def verdicts(rep):
    return {(c["buffer"], c["layout"]): c for c in rep["kernels"][0]["checks"]}


def test_abi_fix_proved_for_every_layout(tmp_path):
    """Pattern A: batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed in 64 bits: proved everywhere,
    with the default bounds (batch <= 4096, nhead <= 256, seqlen <= 2^20)."""
    rep = verify(build("lsed_abi_fix", tmp_path), buffers=["lse", "d"], model_files=[MODEL])
    v = verdicts(rep)
    assert len(v) == 6
    assert all(c["verdict"] == "proved" for c in v.values()), v


def test_bas_shortcut_refuted_for_sbhd_only(tmp_path):
    """(batch_id*BAs_q) >> 6: right for BHSD/BSHD with hdim 128, wrong for SBHD.  Bounded to
    nhead <= 8 so that Q's byte strides fit the 32-bit arguments (beyond that the host's u32
    cast of BAs_q breaks BHSD too)."""
    rep = verify(build("lsed_bas_shortcut", tmp_path), buffers=["lse"], model_files=[MODEL],
                 bounds={"nhead_q": (1, 8), "nhead_k": (1, 8)})
    v = verdicts(rep)
    assert v[("lse", "bhsd")]["verdict"] == "proved"
    assert v[("lse", "bshd")]["verdict"] == "proved"
    c = v[("lse", "sbhd")]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    assert (x["shape"]["batch"], x["shape"]["nhead_q"], x["shape"]["seqlen_q"]) == (2, 1, 2)
    assert x["coords"] == {"batch_id": 1, "head_id": 0}
    # SBHD: BAs_q = nhead_q*128*2 = 256, so (1*256)>>6 = 4 bytes; expected 1*1*Hs_lsed = 2*4
    assert x["address"] == {"extracted": 4, "expected": 8}
