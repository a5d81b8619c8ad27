"""The real gfx942 kernel bwd_hd128_bf16_a16_rtne.co from amd-aiter 0.1.7.post2.dev18.

What the machine code does (read off the disassembly at 0x2b54..0x2c00 and 0x3eb0):
  s65 = 4*head_id*seq_len + (batch_id*BAs >> 6)        (s_mul_i32: 32-bit)
  LSE/D index = (s65 + 4*(lane & 15)) >> 2, buffer_load ... idxen lds, stride 4
  waves 0-1 read LSE, waves 2-3 read D (s_cselect on wave id < 2).
BHSD/BSHD: BAs = h*s*128*2, so BAs >> 6 = h*s*4 is the right batch term with exact kernel
arguments, but the kernel's own s_mul_i32 of batch_id by BAs keeps 32 bits: from batch_id 2 at
8 heads of 2^20 rows it wraps (a kernel overflow).  The host's u32 cast of BAs itself (16 heads
of 2^20 rows) is a host limit, reported apart.  SBHD: the shortcut is wrong (a kernel bug of
cause formula), latent under the wheel's host, which routes SBHD here only when
batch_stride_q >= stride_q, i.e. batch == 1: routed, every shape it sends is fine.
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
def test_sbhd_is_a_latent_kernel_bug(report, buffer):
    c = verdicts(report)[(buffer, "sbhd")]
    assert c["verdict"] == "counterexample" and c["cause"] == "formula"
    assert c["routing"]["reachable"] is False


@pytest.mark.parametrize("buffer", ["lse", "d"])
def test_sbhd_proved_under_host_routing(real_kernel, buffer):
    """With the wheel's routing in the domain (--routed), only batch 1 reaches the kernel in
    SBHD: proved, with a witness at batch 1."""
    rep = verify(real_kernel, buffers=[buffer], layouts=["sbhd"], properties=["address"], routed=True)
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "proved" and c["witness"]["shape"]["batch"] == 1
    assert any(l.startswith("routing") for l in c["domain"]["layers"])


@pytest.mark.parametrize("buffer,lane_wave", [("lse", 0), ("d", 2)])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_wrap_counterexample(report, buffer, layout, lane_wave):
    c = verdicts(report)[(buffer, layout)]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    sh = x["shape"]
    if x["minimal"]:        # proven minimal (the budget sufficed): exactly the smallest wrap
        assert sh == {"batch": 3, "nhead_q": 8, "nhead_k": 1, "seqlen_q": 1 << 20,
                      "seqlen_k": 1 << 20, "hdim_q": 128, "hdim_v": 128}
        assert x["coords"] == {"batch_id": 2, "head_id": 0}
    # in any case the kernel's 32-bit batch_id * BAs, with BAs exact (below 2^32)
    assert sh["batch"] == 3 and x["coords"]["batch_id"] == 2
    assert x["kernargs"]["BAs"] == sh["nhead_q"] * sh["seqlen_q"] * 128 * 2 < 1 << 32
    assert x["coords"]["batch_id"] * x["kernargs"]["BAs"] >= 1 << 32
    assert x["address"]["expected"] == x["coords"]["batch_id"] * sh["nhead_q"] * sh["seqlen_q"] * 4 \
        + x["coords"]["head_id"] * sh["seqlen_q"] * 4
    assert x["address"]["extracted"] != x["address"]["expected"]
    assert x["lane"] // 64 == lane_wave         # LSE is read by waves 0-1, D by waves 2-3
    # an overflow (int mode proves the check) of the kernel's s_mul_i32, reachable through the
    # host, at a shape that fits in an MI300X with every tensor of the family
    assert c["cause"] == "overflow" and "OVERFLOW" in c["reason"]
    first = c["overflow"][0]
    assert first["kind"] == "instruction" and first["instruction"].startswith("s_mul_i32") and first["matters"]
    assert first["boundary"] == "batch_id*nhead_q*seqlen_q >= 2**24"
    assert c["routing"]["reachable"] is True
    assert 0 < x["memory_bytes"] <= 192 << 30


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_host_cast_of_bas_is_a_host_limit(report, layout):
    lims = [l for l in report["kernels"][0]["host_limits"] if l["argument"] == "BAs" and l["layout"] == layout]
    assert len(lims) == 1
    assert lims[0]["boundary"] == "nhead_q*seqlen_q >= 2**24"
    assert (lims[0]["shape"]["batch"], lims[0]["shape"]["nhead_q"], lims[0]["shape"]["seqlen_q"]) == (1, 16, 1 << 20)
    assert "codegen" in lims[0]["source"] or "G2" in lims[0]["source"]


def test_extracted_formula(report):
    c = verdicts(report)[("lse", "sbhd")]
    assert "BAs*batch_id/64" in c["extracted"] and "head_id*seq_len" in c["extracted"]


def test_cli_json_and_exit_code(real_kernel):
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--buffer", "lse",
                        "--layout", "sbhd", "--check", "address", "--json", "-"], capture_output=True, text=True)
    assert p.returncode == 5, p.stderr        # a latent counterexample only
    # with the bounds check too, slice containment finds the same shortcut at batch 2; the
    # routed bounds check (batch 1) is unsupported (later loop iterations), so its routing is
    # undecided, which counts as reachable (README, exit codes): exit 1
    b = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--buffer", "lse",
                        "--layout", "sbhd", "--check", "bounds"], capture_output=True, text=True)
    assert b.returncode == 1, b.stderr
    doc = json.loads(p.stdout)
    assert doc["tool"] == "addrsim"
    chk = doc["kernels"][0]["checks"][0]
    assert set(chk) >= {"buffer", "layout", "verdict", "extracted", "expected", "reason", "counterexample", "time_s",
                        "witness", "domain", "routing"}
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--layout", "bhsd",
                        "--buffer", "lse"],
                       capture_output=True, text=True)
    assert p.returncode == 1


@pytest.mark.slow
def test_q_sbhd_every_loop_iteration_is_proved_and_dv_sbhd_wraps(real_kernel):
    """SBHD, address, the kernel's own domain.  Q is read in the loop 0x4590-0x6038 from a V#
    whose 48-bit base advances by 64 rows a step: the induction's translation obligation holds
    once the stride field of the advanced base is seen to be the base's own (the base stays a
    canonical address: addrsim.ir.bounded) and the stride products cancel; session 9 left it
    "unknown" after 90 s.  dV's 32-bit row index wraps once the tensor passes 4 GiB: Bitwuzla
    finds the shape in 1.2 s, which its old budget (10,000 calls) cut off."""
    rep = verify(real_kernel, buffers=["q", "dv"], layouts=["sbhd"], properties=["address"])
    v = verdicts(rep)
    assert v[("q", "sbhd")]["verdict"] == "proved" and v[("q", "sbhd")]["all_iterations"]
    assert v[("q", "sbhd")]["witness"] is not None
    assert v[("dv", "sbhd")]["verdict"] == "counterexample" and v[("dv", "sbhd")]["cause"] == "overflow"


@pytest.mark.slow
def test_do_reuses_the_answers_of_q(real_kernel, monkeypatch):
    """Q and dO are addressed by the same arithmetic on the same path from different pointer
    arguments: their queries are the same up to the pointer's name
    (addrsim.ir.expr.canonical_names), so dO's are read from the cache Q's check filled, with
    the same verdict and minimal shape."""
    import addrsim.prove.check as C
    from addrsim.prove.store import Store

    decided = []
    real = C.decide_query
    monkeypatch.setattr(C, "decide_query", lambda *a, **k: decided.append(1) or real(*a, **k))
    cache = Store()
    opts = dict(layouts=["bhsd"], properties=["address"], cache=cache, query_mru=3, check_mru=10, min_mru=6)
    q = verify(real_kernel, buffers=["q"], **opts)["kernels"][0]["checks"][0]
    assert q["verdict"] == "counterexample" and decided
    decided.clear()
    do = verify(real_kernel, buffers=["do"], **opts)["kernels"][0]["checks"][0]
    assert decided == []
    assert do["verdict"] == "counterexample"
    assert do["counterexample"]["shape"] == q["counterexample"]["shape"]
