"""The dq_convert post-kernel is a modelled family (issue 38, item 1), and aiter e4048607's
dq_shuffle takes the 2026 post contract (mha_bwd.cu:714-728): dq_acc in (the host's
accumulator shape, mha_bwd.cu:592-611), dQ out in the layout.  Needs ../shared/aiter-e4048607."""
from pathlib import Path

import pytest

from addrsim.api import verify

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "aiter-e4048607" / "hsa"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CORPUS.exists(), reason="needs ../shared/aiter-e4048607")]
SMALL = {"batch": (1, 4), "nhead_q": (1, 8), "seqlen_q": (1, 4096)}


def test_gfx942_dq_convert_reads_the_accumulator_the_host_allocates():
    """gfx942 dq_convert (rtne): dQ is proved in BHSD and BSHD; below 4 GiB dq_acc and dQ are
    proved in every layout; past it the only counterexamples are 32-bit wraps (cause overflow:
    0x21ec adds the tile and head terms in 32 bits), and host casts of BAs_dQ_acc/BAs_dQ."""
    k = CORPUS / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_dq_convert_bf16_rtne.co"
    rep = verify(k, ["dq_acc", "dq"], ["bhsd", "bshd", "sbhd"], properties=("address",))
    checks = {(c["buffer"], c["layout"]): c for c in rep["kernels"][0]["checks"]}
    assert checks[("dq", "bhsd")]["verdict"] == checks[("dq", "bshd")]["verdict"] == "proved"
    for key, c in checks.items():
        assert c["verdict"] == "proved" or c.get("cause") == "overflow", (key, c["verdict"], c.get("cause"))
    small = verify(k, ["dq_acc", "dq"], ["bhsd", "bshd", "sbhd"], properties=("address",), bounds=SMALL)
    assert all(c["verdict"] == "proved" for c in small["kernels"][0]["checks"])


@pytest.mark.parametrize("name", ["bwd_hd128_dq_shuffle", "bwd_hd128_dq_convert_bf16_group"])
def test_gfx950_post_kernels_are_decided(name):
    """gfx950's post-kernels build their V#s by a 64-bit base add that carries into dword1;
    swizzle_enable is proved 0 on the domain, and below 4 GiB dq_acc and dQ are proved."""
    rep = verify(CORPUS / "gfx950" / "fmha_v3_bwd" / f"{name}.co", ["dq_acc", "dq"], ["bshd"], properties=("address",),
                 bounds=SMALL)
    for c in rep["kernels"][0]["checks"]:
        assert c["verdict"] == "proved", (c["buffer"], c["verdict"], c.get("reason"))
