"""Verdicts a kernel engineer can trust (issue 12): the kernel's verdict over explicit
domain layers, routing per host entry point (reachable or latent), unreachable domains,
witnesses of proofs, host limits apart from kernel counterexamples, model typos as bad input.

Kernels: the wheel's gfx942 bwd_hd128_bf16_a16_rtne (2025 ABI, host codegen.py) and the same
kernel from aiter e4048607 (2026 ABI, read in place at ../shared/aiter-e4048607)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from addrsim.api import EXIT_LATENT, exit_status, finding_kind, verify

ROOT = Path(__file__).resolve().parent.parent
AITER = ROOT.parent / "shared" / "aiter-e4048607"
A16_2026 = AITER / "hsa" / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_a16_rtne.co"
VIEWS = ROOT / "examples" / "layouts" / "views.yaml"
EX = ROOT / "examples"
MODEL = EX / "models" / "examples.yaml"

needs_2026 = pytest.mark.skipif(not A16_2026.exists(), reason="needs ../shared/aiter-e4048607")


def checks(rep):
    return {(c["buffer"], c["layout"]): c for k in rep["kernels"] for c in k["checks"]}


def test_wheel_sbhd_lse_d_are_latent_kernel_bugs(real_kernel):
    """Shape: any batch >= 2, SBHD.  The kernel's (batch_id*BAs) >> 6 is wrong (cause formula);
    the wheel's host never routes SBHD with batch > 1 here (batch_stride_q >= stride_q)."""
    rep = verify(real_kernel, ["lse", "d"], ["sbhd"], properties=["address"])
    assert rep["kernels"][0]["host"] == "aiter-0.1.7.post2.dev18"
    for b in ("lse", "d"):
        c = checks(rep)[(b, "sbhd")]
        assert c["verdict"] == "counterexample" and c["cause"] == "formula"
        assert c["counterexample"]["shape"]["batch"] == 2
        assert "routing" not in " ".join(c["domain"]["layers"])           # the kernel's own domain
        assert c["routing"]["host"] == "aiter-0.1.7.post2.dev18"
        assert c["routing"]["reachable"] is False and finding_kind(c) == "latent"
        assert len(c["routing"]["masked_by"]) == 1
        assert c["routing"]["masked_by"][0].startswith("batch_stride_q >= stride_q")
        assert "codegen.py" in c["routing"]["masked_by"][0]
    assert exit_status([rep]) == EXIT_LATENT


def test_wheel_sbhd_routed_batch2_is_unreachable(real_kernel):
    """With routing in the domain and batch >= 2, no SBHD shape reaches the kernel: the verdict
    is unreachable (never a vacuous proof), and the exclusion names the routing condition."""
    rep = verify(real_kernel, ["lse"], ["sbhd"], properties=["address"], routed=True, bounds={"batch": (2, 8)})
    c = checks(rep)[("lse", "sbhd")]
    assert c["verdict"] == "unreachable"
    assert c["witness"] is None
    assert any(a.startswith("batch_stride_q >= stride_q") for a in c["excluded_by"])
    assert any("batch" in a and "--bound" in a for a in c["excluded_by"])
    assert exit_status([rep]) == 2


def test_wheel_packed_q_view_is_proved_in_every_loop_iteration(real_kernel):
    """A user view: Q sliced out of packed QKV, dO contiguous BSHD.  The kernel addresses dO
    with Q's strides: a kernel counterexample in the first iteration, which the host masks
    (latent): it routes this kernel only when dO shares Q's strides (codegen.py QDO).  Q is
    proved for every iteration of the main loop 0x4590-0x6038, with a witness: until session 10
    its access at 0x5e68 was "unknown" there (the V# stride field after the base advances,
    addrsim/ir/bounded.py).  Session 5 had dO's routing undecided, naming a "nested loop
    0x6048": that loop was a backward exit branch taken for a back edge (addrsim/engine/cfg.py)."""
    rep = verify(real_kernel, ["q", "do"], ["bshd_qkv_packed"], model_files=[VIEWS], properties=["address"],
                 bounds={"batch": (1, 8), "nhead_q": (1, 8), "seqlen_q": (1, 4096), "seqlen_k": (1, 4096)})
    q, do = checks(rep)[("q", "bshd_qkv_packed")], checks(rep)[("do", "bshd_qkv_packed")]
    assert q["verdict"] == "proved" and q["all_iterations"] and q["witness"] is not None
    assert do["verdict"] == "counterexample" and do["routing"]["reachable"] is False
    assert finding_kind(do) == "latent"
    (entry,) = do["routing"]["entry_points"]
    assert entry["verdict"] == "unreachable"
    assert any("stride_q == stride_do" in m and "QDO" in m for m in entry["masked_by"])


@needs_2026
@pytest.mark.slow
def test_2026_a16_lse_sbhd_proved_with_witness():
    """aiter e4048607's a16 kernel computes LSE from nhead_q and Hs_lsed (pattern A): proved in
    SBHD, with a replayed witness at batch >= 2 and a workgroup other than (0, 0)."""
    rep = verify(A16_2026, ["lse"], ["sbhd"], properties=["address"])
    assert rep["kernels"][0]["host"] == "aiter-e4048607"
    c = checks(rep)[("lse", "sbhd")]
    assert c["verdict"] == "proved"
    w = c["witness"]
    assert w["shape"]["batch"] >= 2 and w["coords"]["batch_id"] >= 1
    assert w["replayed_on"] == "this kernel"
    assert w["offset"] == 4 * (w["coords"]["batch_id"] * w["shape"]["nhead_q"] + w["coords"]["head_id"]) * w["shape"]["seqlen_q"]
    assert set(c["domain"]["layers"]) == {"bounds", "grid", "memory", "traits", "exact"}
    assert all(a["source"] for a in c["domain"]["assumptions"])


def _shortcut_listing(tmp_path) -> Path:
    """The 2026 kernel's listing edited back to the 2025 shortcut: (batch_id * BAs_q) >> 6."""
    text = subprocess.run(["llvm-objdump-22", "-d", str(A16_2026)], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    i = next(n for n, l in enumerate(lines) if re.search(r"s_mul_i32 s62, s4, s87\b", l))
    assert "s_mul_i32 s62, s62, s86" in lines[i + 1]
    assert any("s_load_dword s53, s[0:1], 0xe0" in l for l in lines)      # s53 = BAs_q (kernarg 0xe0)
    lines[i], lines[i + 1] = "\ts_mul_i32 s62, s4, s53", "\ts_lshr_b32 s62, s62, 6"
    out = tmp_path / "shortcut.txt"
    out.write_text("\n".join(lines) + "\n")
    return out


@needs_2026
@pytest.mark.slow
def test_2026_shortcut_edit_is_reachable_and_diff_says_fixed(tmp_path):
    lst = _shortcut_listing(tmp_path)
    rep = verify(lst, ["lse"], ["sbhd"], like=A16_2026, properties=["address"])
    c = checks(rep)[("lse", "sbhd")]
    assert c["verdict"] == "counterexample" and c["counterexample"]["shape"]["batch"] == 2
    assert c["routing"]["host"] == "aiter-e4048607" and c["routing"]["reachable"] is True
    assert {e["entry"] for e in c["routing"]["entry_points"] if e["reachable"]} == {
        "C++ fmha_v3_bwd", "Python can_impl_fmha_v3_bwd"}
    assert exit_status([rep]) == 1
    out = subprocess.run([sys.executable, "-m", "addrsim", "diff", str(lst), str(A16_2026), "--like", str(A16_2026),
                          "--buffer", "lse", "--layout", "sbhd", "--json", "-"], capture_output=True, text=True)
    d = json.loads(out.stdout)
    row = next(r for k in d["kernels"] for r in k["checks"] if r["buffer"] == "lse" and r["layout"] == "sbhd")
    assert row["change"] == "fixed"



@needs_2026
def test_a_counterexample_every_entry_launches_is_routed_without_a_rerun(tmp_path):
    """When the kernel's failing shape satisfies an entry point's routing conditions
    (evaluated), that entry point reaches it: the routing reports the same shape and never
    decides the check again (the least failing shape of the kernel's domain is the least of
    any routed subset that holds it)."""
    from addrsim.prove.domain import route
    from addrsim.prove.verdict import Verdict
    out = []
    verify(_shortcut_listing(tmp_path), ["lse"], ["sbhd"], like=A16_2026, properties=["address"], checks_out=out)
    c = out[0][1]
    assert c.verdict == Verdict.COUNTEREXAMPLE

    def rerun(entry):
        raise AssertionError(f"rerun for {entry}")
    r = route(c, rerun)
    assert r.reachable is True and r.verdict == Verdict.COUNTEREXAMPLE
    assert [e.shape for e in r.entries] == [c.counterexample.shape] * 2

def _build(name, tmp_path):
    obj, co = tmp_path / f"{name}.o", tmp_path / f"{name}.co"
    subprocess.run(["llvm-mc-22", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj",
                    str(EX / f"{name}.s"), "-o", str(obj)], check=True)
    subprocess.run(["ld.lld-22", "-shared", str(obj), "-o", str(co)], check=True)
    return co


@pytest.mark.slow
def test_kernel_wrap_is_a_kernel_counterexample(tmp_path):
    """examples/q_batch_u32.s: Q's batch term batch_id * BAs_q in one 32-bit s_mul_i32.  With
    exact arguments the kernel's own product still wraps: cause overflow at that instruction,
    at the smallest shape (batch 3, as batch_id 1 cannot wrap; then nhead_q 8 at 2**20 rows)."""
    rep = verify(_build("q_batch_u32", tmp_path), ["q"], ["bhsd"], model_files=[MODEL], properties=["address"])
    c = checks(rep)[("q", "bhsd")]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow"
    assert c["overflow"][0]["kind"] == "instruction" and "s_mul_i32 s19, s4, s21" in c["overflow"][0]["instruction"]
    shape = c["counterexample"]["shape"]
    assert (shape["batch"], shape["nhead_q"], shape["seqlen_q"]) == (3, 8, 2 ** 20)


def test_host_cast_only_is_a_host_limit(tmp_path):
    """examples/q_batch_u64.s: the same batch term in 64 bits.  The only wrap left is the
    host's u32 cast of BAs_q: a host limit of its own, the kernel's check is proved."""
    rep = verify(_build("q_batch_u64", tmp_path), ["q"], ["bhsd"], model_files=[MODEL], properties=["address"])
    c = checks(rep)[("q", "bhsd")]
    assert c["verdict"] == "proved" and c["witness"] is not None
    lim = [l for l in rep["kernels"][0]["host_limits"] if l["argument"] == "BAs_q"]
    assert len(lim) == 1
    assert lim[0]["boundary"] == "nhead_q*seqlen_q >= 2**24"
    assert (lim[0]["shape"]["batch"], lim[0]["shape"]["nhead_q"], lim[0]["shape"]["seqlen_q"]) == (1, 16, 2 ** 20)
    assert 0 < lim[0]["memory_bytes"] <= 192 * 2 ** 30


def test_model_typo_is_bad_input(tmp_path, real_kernel):
    bad = tmp_path / "typo.yaml"
    bad.write_text("buffers:\n  lse:\n    ptr: [Lse]\n    expected: \"batch_id * nhead_qq * Hs_lsed\"\n")
    out = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--model", str(bad),
                          "--buffer", "lse", "--layout", "bhsd", "--check", "address"],
                         capture_output=True, text=True)
    assert out.returncode == 3
    err = out.stderr.strip()
    assert err.count("\n") == 0 and str(bad) in err and "buffers.lse.expected" in err and "nhead_qq" in err


@pytest.mark.parametrize("text,needle", [
    ("hosts:\n  - {name: h, contracts: [aiter-wheel-v3], entry_points: [{name: e, routing: {v3-a16-direct-dqq: []}}]}\n",
     "unknown family v3-a16-direct-dqq"),
    ("hosts:\n  - {name: h, contracts: [aiter-wheel-v33], entry_points: [{name: e, routing: {'*': []}}]}\n",
     "unknown contract(s) aiter-wheel-v33"),
    ("hosts:\n  - {name: h, contracts: [aiter-wheel-v3], entry_points: [{name: e, routng: {'*': []}}]}\n",
     "routing mapping"),
])
def test_host_model_typo_is_bad_input(tmp_path, real_kernel, text, needle):
    """A typo in a host model would make every bug look latent: it is bad input instead."""
    bad = tmp_path / "host.yaml"
    bad.write_text(text)
    out = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--model", str(bad),
                          "--buffer", "lse", "--layout", "sbhd", "--check", "address"], capture_output=True, text=True)
    assert out.returncode == 3 and needle in out.stderr and str(bad) in out.stderr, out.stderr


def test_unknown_or_unfit_host_is_bad_input(real_kernel):
    for host, needle in (("aiter-nope", "unknown host"), ("aiter-e4048607", "no argument contract")):
        out = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--host", host,
                              "--buffer", "lse", "--layout", "sbhd", "--check", "address"],
                             capture_output=True, text=True)
        assert out.returncode == 3 and needle in out.stderr, out.stderr


def test_a_bound_that_excludes_a_fixed_size_leaves_no_shape(tmp_path):
    """The example family fixes hdim_q = 128: --bound hdim_q=200:300 is not ignored, it empties
    the domain, and the report names both (unreachable, never a counterexample at 128)."""
    rep = verify(_build("q_batch_u32", tmp_path), ["q"], ["bhsd"], model_files=[MODEL], properties=["address"],
                 bounds={"hdim_q": (200, 300)})
    c = checks(rep)[("q", "bhsd")]
    assert c["verdict"] == "unreachable"
    assert any("200 <= hdim_q <= 300" in a for a in c["excluded_by"]) and any("hdim_q = 128" in a for a in c["excluded_by"])


def test_wheel_sbhd_routed_lse_is_proved_at_the_batch_routing_implies(real_kernel):
    """Routed through codegen.py, SBHD runs only with batch 1 (batch_stride_q >= stride_q):
    the domain says so in ``implied_ranges``, and LSE's batch-stride bug (batch >= 2) is out
    of it, so the routed verdict is proved, its witness at batch 1."""
    rep = verify(real_kernel, ["lse"], ["sbhd"], properties=["address"], routed=True)
    c = checks(rep)[("lse", "sbhd")]
    assert c["verdict"] == "proved"
    assert c["domain"]["implied_ranges"] == {"batch": [1, 1]}
    assert "routing (fmha_v3_bwd)" in c["domain"]["layers"]
    assert c["witness"]["shape"]["batch"] == 1


def test_the_text_report_names_the_ranges_the_domain_implies(real_kernel):
    """The routed SBHD run says, in its text, that the domain is batch = 1 in SBHD."""
    import io
    from addrsim.report.text import print_table
    rep = verify(real_kernel, ["lse"], ["sbhd"], properties=["address"], routed=True)
    buf = io.StringIO()
    print_table(rep, buf)
    assert "ranges the domain implies: batch = 1 (sbhd)" in buf.getvalue()
