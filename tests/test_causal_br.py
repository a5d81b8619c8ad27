"""Causal bottom-right kernels in group mode (issue 38 item 4).

A bottom-right kernel's first q row of a kv tile is max(0, kv_start + len_q - len_k) of its own
sequence, so the offset of its first LSE access inside the sequence depends on the lengths.
The claim measures each workgroup from a reference sequence 0 with the workgroup's own lengths
(addrsim.prove.check.reference), so these rows cancel and a correct kernel is proved; rows
placed by another sequence's lengths do not cancel (tests/test_examples.py, the edited
examples/group_lse_other_len.s, refuted).
"""
from pathlib import Path

import pytest

from addrsim.api import verify

E4048607 = Path(__file__).resolve().parents[2] / "shared" / "aiter-e4048607" / "hsa"


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not E4048607.is_dir(), reason="aiter e4048607 corpus not present")
def test_gfx942_causal_br_group_lse_and_d_proved():
    """gfx942 hd64 bf16 causal_br a32 rtne pssk group: LSE and D proved in every layout, each
    with a replayed witness at batch_id > 0 or a shape of the domain."""
    co = E4048607 / "gfx942" / "fmha_v3_bwd" / "bwd_hd64_bf16_causal_br_a32_rtne_pssk_group.co"
    rep = verify(co, buffers=["lse", "d"], properties=["address"])
    checks = rep["kernels"][0]["checks"]
    assert len(checks) == 6
    for c in checks:
        assert c["verdict"] == "proved", (c["buffer"], c["layout"], c["reason"])
        assert c["witness"] is not None
