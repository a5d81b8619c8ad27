"""The real gfx942 kernel bwd_hd128_bf16_a16_rtne.co from amd-aiter 0.1.7.post2.dev18.

What the machine code does (read off the disassembly at 0x2b54..0x2c00 and 0x3eb0):
  s65 = 4*head_id*seq_len + (batch_id*BAs >> 6)        (s_mul_i32: 32-bit)
  LSE/D index = (s65 + 4*(lane & 15)) >> 2, buffer_load ... idxen lds, stride 4
  waves 0-1 read LSE, waves 2-3 read D (s_cselect on wave id < 2).
BHSD/BSHD: BAs = h*s*128*2, so BAs >> 6 = h*s*4 is the right batch term, but the host casts
BAs to 32 bits: at batch=2, nhead_q=16, seqlen=2^20 BAs = 2^32 wraps to 0 and batch 1 reads
batch 0's rows.  SBHD: the shortcut is wrong, but the wheel's host only routes SBHD to this
kernel when batch_stride_q >= stride_q, i.e. batch == 1, so every shape the host sends is fine.
"""
import json
import subprocess
import sys

import pytest

from addrsim.api import verify


@pytest.fixture(scope="module")
def report(real_kernel):
    # a generous minimisation budget: the shapes below are the proven-minimal ones
    return verify(real_kernel, buffers=["lse", "d"], min_budget_s=60, properties=["address"])


def verdicts(report):
    return {(c["buffer"], c["layout"]): c for c in report["kernels"][0]["checks"]}


def test_metadata(report):
    k = report["kernels"][0]
    assert k["kernel"] == "_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE"
    assert k["arch"] == "gfx942"


@pytest.mark.parametrize("buffer", ["lse", "d"])
def test_sbhd_proved_under_host_routing(report, buffer):
    assert verdicts(report)[(buffer, "sbhd")]["verdict"] == "proved"


@pytest.mark.parametrize("buffer,lane_wave", [("lse", 0), ("d", 2)])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_wrap_counterexample(report, buffer, layout, lane_wave):
    c = verdicts(report)[(buffer, layout)]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    sh = x["shape"]
    if x["minimal"]:        # proven minimal (the budget sufficed): exactly the smallest wrap
        assert sh == {"batch": 2, "nhead_q": 16, "nhead_k": 1, "seqlen_q": 1 << 20,
                      "seqlen_k": 1 << 20, "hdim_q": 128, "hdim_v": 128}
        assert x["coords"] == {"batch_id": 1, "head_id": 0}
    # in any case a 32-bit wrap of the host's BAs: Q's batch stride is a multiple of 2^32 bytes
    assert sh["batch"] == 2 and x["coords"]["batch_id"] == 1
    assert (sh["nhead_q"] * sh["seqlen_q"] * 128 * 2) >= 1 << 32
    assert x["kernargs"]["BAs"] == (sh["nhead_q"] * sh["seqlen_q"] * 128 * 2) % (1 << 32)
    assert x["address"]["expected"] == x["coords"]["batch_id"] * sh["nhead_q"] * sh["seqlen_q"] * 4 \
        + x["coords"]["head_id"] * sh["seqlen_q"] * 4
    assert x["address"]["extracted"] != x["address"]["expected"]
    assert x["lane"] // 64 == lane_wave         # LSE is read by waves 0-1, D by waves 2-3
    # an overflow (int mode proves the check), first cause the host's u32 cast of BAs, and the
    # shape fits in an MI300X with every tensor of the family
    assert c["cause"] == "overflow" and "OVERFLOW" in c["reason"]
    first = c["overflow"][0]
    assert (first["kind"], first["argument"], first["width"]) == ("argument", "BAs", 32) and first["matters"]
    assert first["exact"] == sh["nhead_q"] * sh["seqlen_q"] * 128 * 2 and first["machine"] == x["kernargs"]["BAs"]
    assert first["boundary"] == "nhead_q*seqlen_q >= 2**24"
    assert 0 < x["memory_bytes"] <= 192 << 30


def test_extracted_formula(report):
    c = verdicts(report)[("lse", "sbhd")]
    assert "BAs*batch_id/64" in c["extracted"] and "head_id*seq_len" in c["extracted"]


def test_cli_json_and_exit_code(real_kernel):
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--buffer", "lse",
                        "--layout", "sbhd", "--json", "-"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["tool"] == "addrsim"
    chk = doc["kernels"][0]["checks"][0]
    assert set(chk) >= {"buffer", "layout", "verdict", "extracted", "expected", "reason", "counterexample", "time_s"}
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--layout", "bhsd",
                        "--buffer", "lse"],
                       capture_output=True, text=True)
    assert p.returncode == 1
