"""User layouts from a model file (--layouts FILE): views of larger tensors."""
import subprocess
import sys
import pytest

from addrsim.api import verify
from addrsim.model.models import layout_strides, load_models

from test_examples import EX, MODEL, build

VIEWS = str(EX / "layouts" / "views.yaml")


def test_extends_overrides_only_named_tensors():
    ms = load_models([VIEWS])
    lay = layout_strides(ms, "bshd_qkv_packed")
    assert lay["q"]["seq"] == "3*nhead_q*hdim_q"          # overridden
    assert lay["dq"]["seq"] == "nhead_q*hdim_q"            # inherited from bshd
    assert lay["lse"]["head"] == "seqlen_q + 64"


def test_abi_fix_stays_proved_on_padded_lse_view(tmp_path):
    """Pattern A reads nhead_q and Hs_lsed from the arguments, so padded LSE rows are fine."""
    rep = verify(build("lsed_abi_fix", tmp_path), buffers=["lse", "d"], layouts=["bshd_qkv_packed", "my_view"],
                 model_files=[MODEL, VIEWS], properties=["address"], min_budget_s=60)
    got = {(c["buffer"], c["layout"]): c["verdict"] for c in rep["kernels"][0]["checks"]}
    assert set(got.values()) == {"proved"}, got


def test_shortcut_refuted_on_padded_lse_view(tmp_path):
    """The BAs shortcut assumes LSE rows of exactly seqlen_q: the padded view refutes it at the
    smallest shape (batch 2)."""
    rep = verify(build("lsed_bas_shortcut", tmp_path), buffers=["lse"], layouts=["bshd_qkv_packed"],
                 model_files=[MODEL, VIEWS], bounds={"nhead_q": (1, 8), "nhead_k": (1, 8)}, properties=["address"], min_budget_s=60)
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "counterexample"
    assert c["counterexample"]["shape"]["batch"] == 2


def test_cli_layouts_option(tmp_path):
    co = build("lsed_abi_fix", tmp_path)
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(co), "--model", MODEL, "--buffer", "lse",
                        "--layouts", VIEWS, "--layout", "my_view", "--check", "address"], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "my_view" in p.stdout and "proved" in p.stdout


def test_unknown_user_layout_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("layouts:\n  v:\n    extends: nowhere\n")
    co = build("lsed_abi_fix", tmp_path)
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(co), "--model", MODEL, "--layouts", str(bad),
                        "--layout", "v"], capture_output=True, text=True)
    assert p.returncode == 3
    assert "unknown layout 'nowhere'" in p.stderr and p.stderr.count("\n") == 1


@pytest.mark.slow
def test_dq_written_with_q_strides_is_refuted_when_dq_layout_differs(real_kernel):
    """aiter's a16 kernels write dQ with Q's strides (the host passes no dQ stride and never
    checks stride_dq == stride_q): with Q in BSHD and dQ head-major, head 1 of dQ lands at
    Q's head stride.  Minimal shape: batch 1, nhead_q 2, seqlen 64 (the host's sk % 64 == 0)."""
    rep = verify(real_kernel, buffers=["dq"], layouts=["bshd_dq_bhsd"], model_files=[VIEWS], properties=["address"], min_budget_s=60)
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    assert (x["shape"]["batch"], x["shape"]["nhead_q"], x["shape"]["seqlen_q"]) == (1, 2, 64)
    assert x["coords"] == {"batch_id": 0, "head_id": 1}
    assert x["address"] == {"extracted": 128 * 2, "expected": 64 * 128 * 2}
