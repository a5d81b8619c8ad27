"""The GPU cross-check (addrsim.commands.crosscheck, addrsim.gpu.crossrun) on the CPU, and the reproduction
script (addrsim.commands.repro).

The synthetic buggy kernel is examples/lsed_bas_shortcut.s ((batch_id*BAs_q) >> 6: wrong
for SBHD), the fixed one examples/lsed_abi_fix.s (pattern A).  With the domain bounded so
that Q's byte strides fit their 32-bit arguments (nhead <= 8, seqlen <= 4096), addrsim
proves the buggy kernel for BHSD/BSHD and refutes it for SBHD, and proves the fixed one
everywhere; the gradients computed with LSE/D read through each kernel's address function
must agree: wrong exactly where the prover says so."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest



def _importable(name: str) -> bool:
    try:
        __import__(name)
        return True
    except ImportError:
        return False


HAS_TORCH = _importable("torch")
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch (pip install -e '.[gpu]')")
HAS_CUDA = HAS_TORCH and __import__("torch").cuda.is_available()

from addrsim.gpu.crossrun import TOL, gather, run_case, run_plan  # noqa: E402
from addrsim.commands.repro import script  # noqa: E402

PLAN = Path(__file__).resolve().parent / "data" / "crosscheck_small_plan.json"
BOUNDS = ["--bound", "nhead_q=1:8", "--bound", "nhead_k=1:8", "--bound", "seqlen_q=1:4096",
          "--bound", "seqlen_k=1:4096", "--bound", "batch=1:16"]


def build(name, tmp_path):
    from test_examples import build as b     # needs z3 and LLVM: imported only where used
    return b(name, tmp_path)


MODEL = str(Path(__file__).resolve().parent.parent / "examples" / "models" / "examples.yaml")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "addrsim", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def small_plan():
    return json.loads(PLAN.read_text())


@pytest.mark.slow
@needs_torch
def test_buggy_fails_sbhd_and_passes_bhsd_end_to_end(tmp_path):
    """`addrsim crosscheck` on the buggy kernel, torch backend on the CPU: the cases come from
    the prover, the gradients are computed, predicted == observed in every case, SBHD has a
    failing case and BHSD has none."""
    co = build("lsed_bas_shortcut", tmp_path)
    out = tmp_path / "cx.json"
    png = tmp_path / "rows.png"
    p = cli("crosscheck", co, "--model", MODEL, *BOUNDS, "--cases", "2", "--layout", "bhsd", "--layout", "sbhd",
            "--json", out, "--plot", png)
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())
    assert rep["backend"] == "torch" and rep["device"] == "cpu" and rep["agree"] is True
    by = {}
    for c in rep["cases"]:
        assert set(c) >= {"kernel", "buffer", "layout", "shape", "predicted", "observed", "max_rel_err"}
        assert set(c["max_rel_err"]) == {"dq", "dk", "dv", "d"}
        assert c["predicted"] == c["observed"]
        by.setdefault(c["layout"], []).append(c)
    assert any(c["observed"] == "fail" for c in by["sbhd"])
    assert all(c["observed"] == "pass" for c in by["bhsd"]) and by["bhsd"]
    for c in by["sbhd"]:
        if c["observed"] == "fail":
            # the stage-split signature: D itself is right, the gradients are not
            assert c["max_rel_err"]["d"] < 1e-5 < TOL < max(c["max_rel_err"][t] for t in ("dq", "dk", "dv"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@needs_torch
def test_small_plan_agrees_on_the_cpu(small_plan):
    """The committed plan of both synthetic kernels (tests/data/crosscheck_small_plan.json):
    the buggy one fails in SBHD only, the fixed one passes everywhere."""
    rep = run_plan(small_plan, "torch")
    assert rep["agree"], [(c["kernel"], c["layout"], c["predicted"], c["observed"]) for c in rep["cases"]]
    obs = {(c["kernel"].replace("addrsim_example_", ""), c["layout"], c["observed"]) for c in rep["cases"]}
    assert ("lsed_bas_shortcut", "sbhd", "fail") in obs
    assert not any(k == "lsed_bas_shortcut" and l in ("bhsd", "bshd") and o == "fail" for k, l, o in obs)
    assert not any(k == "lsed_abi_fix" and o == "fail" for k, _, o in obs)
    assert rep["confusion"]["pass/fail"] == rep["confusion"]["fail/pass"] == 0


@needs_torch
def test_a_wrong_offset_is_observed(small_plan):
    """The runner must be able to see a fault it was not told about: moving batch 1's LSE
    slice of a passing case by one row makes it fail (the check is not vacuous)."""
    case = next(c for c in small_plan["cases"] if c["kernel"].endswith("lsed_abi_fix") and c["layout"] == "bhsd"
                and c["shape"]["batch"] >= 2)
    assert run_case(case, "torch").observed == "pass"
    bad = json.loads(json.dumps(case))
    key = "1,0"
    bad["offsets"]["lse"][key][0] += 4
    r = run_case(bad, "torch")
    assert r.observed == "fail" and [1, 0] in [list(p) for p in r.wrong_pairs]
    assert r.max_rel_err["d"] < 1e-5      # D itself is still right


@needs_torch
def test_out_of_range_reads_are_zero():
    import torch
    buf = torch.arange(10, dtype=torch.float32)
    assert gather(buf, 4 * 8, True, 4).tolist() == [8.0, 9.0, 0.0, 0.0]
    assert gather(buf, -8, True, 3).tolist() == [0.0, 0.0, 0.0]
    assert gather(buf, 0, False, 2).tolist() == [0.0, 0.0]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU and PyTorch (pip install -e '.[gpu]')")
def test_triton_and_torch_agree_on_the_small_cases(small_plan):
    """Both backends give the same pass/fail on the same cases, and the errors of correct runs
    are fp32 rounding on both."""
    pytest.importorskip("triton")
    a = run_plan(small_plan, "torch", device="cuda")
    b = run_plan(small_plan, "triton")
    assert [c["observed"] for c in a["cases"]] == [c["observed"] for c in b["cases"]]
    assert a["agree"] and b["agree"]
    for c in b["cases"]:
        if c["observed"] == "pass":
            assert max(c["max_rel_err"][t] for t in ("dq", "dk", "dv")) < 1e-4


@pytest.mark.parametrize("layout,perm", [("sbhd", "(1, 0, 2, 3)"), ("bhsd", "(0, 2, 1, 3)"), ("bshd", "None")])
def test_repro_script_is_python_with_the_case(layout, perm):
    shape = {"batch": 2, "nhead_q": 16, "nhead_k": 1, "seqlen_q": 1048576, "seqlen_k": 1048576,
             "hdim_q": 128, "hdim_v": 128}
    text = script("_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE", "k.co", "lse", layout, shape, "bf16",
                  atomic32=False, coords=(1, 0))
    tree = ast.parse(text)
    consts = {t.targets[0].id: ast.literal_eval(t.value) for t in tree.body
              if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name) and t.targets[0].id in
              ("LAYOUT", "PERM", "ATOMIC_FP32")}
    assert consts["LAYOUT"] == layout and str(consts["PERM"]) == perm and consts["ATOMIC_FP32"] is False
    dims = next(t for t in tree.body if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Tuple)
                and [e.id for e in t.targets[0].elts][:4] == ["B", "HQ", "HK", "SQ"])
    assert ast.literal_eval(dims.value) == (2, 16, 1, 1048576, 1048576, 128, 128)
    assert "FlashAttnFunc.apply" in text and "PASS" in text and "FAIL" in text
    if layout == "sbhd":
        assert "has no SBHD layout" in text
    else:
        assert f"-iperm={1 if layout == 'bhsd' else 0}" in text and "-b=2 -h=16 -h_k=1 -s=1048576" in text


@pytest.mark.slow
def test_repro_cli_writes_the_counterexample(tmp_path):
    co = build("lsed_bas_shortcut", tmp_path)
    out = tmp_path / "repro.py"
    p = cli("repro", co, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "sbhd", "-o", out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    ast.parse(text)
    assert 'LAYOUT = "sbhd"' in text and "B, HQ, HK, SQ, SK, D, DV = 2, 1, 1, 2, 1, 128, 128" in text
    p = cli("repro", co, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "bhsd")
    assert p.returncode == 2 and "proved: no failing shape" in p.stderr and not p.stdout
    p = cli("repro", co, "--model", MODEL, "--buffer", "lse", "--layout", "nope")
    assert p.returncode == 3 and p.stderr.count("\n") == 1
    if Path("/dev/full").exists():            # a write that fails: one line, exit 3
        p = cli("repro", co, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "sbhd", "-o", "/dev/full")
        assert p.returncode == 3 and "/dev/full: cannot write" in p.stderr and "internal error" not in p.stderr


def test_committed_gpu_results_follow_the_schema():
    """docs/crosscheck/wheel_triton.json, the run on the H200: the issue's schema, every case
    run, and predicted == observed in each."""
    rep = json.loads((Path(__file__).resolve().parent.parent / "docs" / "crosscheck" / "wheel_triton.json").read_text())
    assert isinstance(rep["device"], str) and rep["device"] != "cpu" and rep["backend"] == "triton"
    assert len(rep["cases"]) > 300
    for c in rep["cases"]:
        assert isinstance(c["kernel"], str) and isinstance(c["buffer"], str) and c["layout"] in ("bhsd", "bshd", "sbhd")
        assert isinstance(c["shape"], dict) and c["predicted"] in ("pass", "fail")
        assert c["observed"] in ("pass", "fail"), c
        assert c["observed"] == c["predicted"], c
        assert set(c["max_rel_err"]) == {"dq", "dk", "dv", "d"}
        assert all(isinstance(v, float) for v in c["max_rel_err"].values())
    assert rep["agree"] is True and rep["complete"] is True


@pytest.mark.parametrize("plan,code,words", [
    ({}, 3, 'expected a JSON object with a "cases" list'),
    ({"cases": []}, 2, "the plan has no cases"),
    ({"cases": [None]}, 3, "case 0: not an object"),
    ({"cases": [{"kernel": "k"}]}, 3, "case 0: 'layout' missing"),
])
def test_crossrun_refuses_bad_plans(tmp_path, plan, code, words):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    p = subprocess.run([sys.executable, "-m", "addrsim.gpu.crossrun", str(f), "--backend", "torch"],
                       capture_output=True, text=True)
    assert p.returncode == code and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_crossrun_refuses_a_plan_with_a_missing_offset(tmp_path, small_plan):
    bad = json.loads(json.dumps(small_plan))
    del bad["cases"][3]["offsets"]["d"]
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(bad))
    p = subprocess.run([sys.executable, "-m", "addrsim.gpu.crossrun", str(f), "--backend", "torch"],
                       capture_output=True, text=True)
    assert p.returncode == 3 and "case 3: no offsets for d" in p.stderr


@needs_torch
@pytest.mark.parametrize("device,words", [("foo", "not a PyTorch device"), ("meta", "cpu or cuda devices only")])
def test_crossrun_refuses_a_bad_device_in_one_line(tmp_path, small_plan, device, words):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(small_plan))
    p = subprocess.run([sys.executable, "-m", "addrsim.gpu.crossrun", str(f), "--backend", "torch",
                        "--device", device], capture_output=True, text=True)
    assert p.returncode == 3 and words in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_crosscheck_checks_outputs_and_device_first(tmp_path):
    co = str(tmp_path / "missing.co")      # never reached: the options are checked first
    for args, words in ((["--plot", "/proc/nope/rows.png"], "--plot: cannot write here"),
                        (["--plot", str(tmp_path)], "--plot: is a directory"),
                        (["--json", "/proc/nope/r.json"], "--json: cannot write here")):
        p = cli("crosscheck", co, *args)
        assert p.returncode == 3 and words in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_empty_bounds_are_bad_input():
    """--bound with an empty range would prove everything: refused."""
    for b in ("nhead_q=4:1", "seqlen_q=0:3", "foo=1:2"):
        p = cli("verify", "whatever.co", "--bound", b)
        assert p.returncode == 3 and "--bound" in p.stderr and p.stderr.count("\n") == 1, p.stderr


@pytest.mark.parametrize("name,atomic32", [("gfx942/fmha_v3_bwd/bwd_hd128_bf16_a16_rtne.co", False),
                                           ("gfx942/fmha_v3_bwd/bwd_hd128_bf16_a32_rtna.co", True)])
def test_repro_selects_the_kernels_accumulator(corpus, tmp_path, name, atomic32):
    """aiter picks the a16 kernels with is_v3_atomic_fp32=False: the script must ask for the
    kernel that was verified (the family's dQ accumulator in models/fmha_bwd_v3.yaml)."""
    out = tmp_path / "r.py"
    p = cli("repro", corpus / name, "--buffer", "lse", "--layout", "bhsd", "--shape",
            "batch=1,nhead_q=2,seqlen_q=128,hdim_q=128", "-o", out)
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert f"ATOMIC_FP32 = {atomic32}" in text and f"-v3_atomic_fp32={int(atomic32)}" in text
    assert "expect PASS" in text         # the prover proves this small shape


def test_crossrun_without_pytorch_says_so_in_one_line(tmp_path, small_plan):
    """Without PyTorch (hidden here by a package that fails to import) the runner refuses in
    one line that names the extra to install, exit status 3, no traceback."""
    hide = tmp_path / "hide" / "torch"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(small_plan))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "hide"), str(Path(__file__).parents[1]),
                                                         os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-m", "addrsim.gpu.crossrun", str(f), "--backend", "torch"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == "addrsim: the cross-check needs PyTorch: pip install -e '.[gpu]'"


README_CEX = {"batch": 2, "nhead_q": 9, "nhead_k": 1, "seqlen_q": 986944, "seqlen_k": 986944,
              "hdim_q": 128, "hdim_v": 128}       # the README kernel's q/bhsd counterexample (26.49 GiB)


def _consts(text, names):
    tree = ast.parse(text)
    return {t.targets[0].id: ast.literal_eval(t.value) for t in tree.body
            if isinstance(t, ast.Assign) and isinstance(t.targets[0], ast.Name) and t.targets[0].id in names}


def test_repro_reference_fits_at_the_readme_counterexample():
    """At seqlen 986944 a whole fp32 score matrix per slice would take 3.5 TiB; the script's
    reference is blocked and checks the counterexample's slice and a control only, and says
    what it needs: the tensors (26.49 GiB, the model's) and under 8 GiB for the reference."""
    from addrsim.commands.repro import ref_mib
    text = script("_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE", "k.co", "q", "bhsd", README_CEX, "bf16",
                  atomic32=False, coords=(1, 8), memory_bytes=28439778304)
    c = _consts(text, ("SLICES", "BLOCK", "MEMORY_GIB", "REF_MIB"))
    assert c["SLICES"] == [(1, 8), (0, 0)] and c["BLOCK"] == 1024
    assert c["MEMORY_GIB"] == 26.49
    assert c["REF_MIB"] == round(ref_mib(README_CEX)) and 1024 < c["REF_MIB"] < 8192
    assert "for bi, hi in SLICES:" in text and "range(B)" not in text


@needs_torch
@pytest.mark.parametrize("sq,sk,causal", [(7, 7, False), (7, 7, True), (5, 9, True), (9, 4, False)])
def test_repro_blocked_reference_equals_autograd(sq, sk, causal):
    """The script's blocked reference (blocks of 3 rows here) gives autograd's fp32 gradients."""
    import torch
    text = script("_ZN5aiter4kE", "k.co", "lse", "bshd", README_CEX)
    src = text[text.index("def ref_stats"):text.index("# the fp32 reference on the slices")]
    ns = {"torch": torch, "BLOCK": 3}
    exec(src, ns)     # the script's own function, as the user runs it
    g = torch.Generator().manual_seed(1)
    qs, ks, vs = (torch.randn(n, 8, generator=g, dtype=torch.float64) for n in (sq, sk, sk))
    dos = torch.randn(sq, 8, generator=g, dtype=torch.float64)
    got = ns["ref_slice"](qs, ks, vs, dos, 0.3, causal, 3)
    a, b, c = (t.clone().requires_grad_(True) for t in (qs, ks, vs))
    s = 0.3 * (a @ b.T)
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(sk - sq + 1), float("-inf"))
    p = torch.nan_to_num(torch.softmax(s, dim=-1))
    (p @ c).backward(dos)
    for want, have in zip((a.grad, b.grad, c.grad), got):
        assert torch.allclose(want, have, atol=1e-9), (want - have).abs().max()


@pytest.mark.slow
def test_repro_refuses_a_shape_past_device_memory_and_offers_the_smallest(corpus, tmp_path):
    p = cli("repro", corpus / "gfx942/fmha_v3_bwd/bwd_hd128_bf16_a16_rtne.co", "--buffer", "lse", "--layout", "bhsd",
            "--shape", "batch=4096,nhead_q=256,seqlen_q=1048576,hdim_q=128")
    assert p.returncode == 3 and p.stderr.count("\n") == 1 and not p.stdout, p.stderr
    assert "more than the 192 GiB of a gfx942 device" in p.stderr
    assert "the smallest shape that reproduces the finding: batch=3,nhead_q=8" in p.stderr


def test_repro_script_header_cannot_carry_code():
    """A file name with a line break stays inside the script's comment."""
    text = script("_ZN5aiter4kE", "inj/x\nprint('INJECTED')\n#.co", "lse", "bshd", README_CEX)
    tree = ast.parse(text)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "print"
             and any(isinstance(a, ast.Constant) and a.value == "INJECTED" for a in n.args)]
    assert calls == [] and "inj/x\\nprint('INJECTED')\\n#.co" in text


@pytest.mark.parametrize("shape", ["batch=1_0,nhead_q=1,seqlen_q=64,hdim_q=128",
                                   "batch=\u0663,nhead_q=1,seqlen_q=64,hdim_q=128", "batch=2,nhead_q"])
def test_repro_shape_takes_plain_decimal_sizes(shape):
    from addrsim.commands.repro import _parse_shape
    from addrsim.errors import InputError
    with pytest.raises(InputError, match="expected NAME=V"):
        _parse_shape(shape)


def test_repro_script_of_a_latent_finding_says_the_api_is_expected_to_pass():
    """The README kernel's LSE SBHD counterexample is latent under the wheel's host (SBHD only
    with batch 1): through aiter's API another kernel runs at batch 2, so the header must not
    promise a FAIL there."""
    masked = ["batch_stride_q >= stride_q and batch_stride_do >= stride_do [codegen.py G2:1287-1309]"]
    text = script("_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE", "k.co", "lse", "sbhd", README_CEX,
                  latent=("aiter-0.1.7.post2.dev18 fmha_v3_bwd", masked))
    ast.parse(text)
    assert "(expect FAIL) where this kernel runs" in text
    assert "# LATENT under aiter-0.1.7.post2.dev18 fmha_v3_bwd" in text and "is then expected to PASS" in text
    assert "#     batch_stride_q >= stride_q" in text
    assert "LATENT" not in script("_ZN5aiter4kE", "k.co", "lse", "sbhd", README_CEX)


def test_repro_shape_takes_the_familys_head_dims():
    from addrsim.commands.repro import _parse_shape
    from addrsim.errors import InputError
    fixed = {"hdim_q": 128, "hdim_v": 128}
    assert _parse_shape("batch=2,nhead_q=2,seqlen_q=64", fixed)["hdim_v"] == 128
    with pytest.raises(InputError, match="built for hdim_q=128"):
        _parse_shape("batch=2,nhead_q=2,seqlen_q=64,hdim_q=64", fixed)
    with pytest.raises(InputError, match="missing hdim_q"):
        _parse_shape("batch=2,nhead_q=2,seqlen_q=64")          # a family that fixes none


def test_repro_prints_small_memory_in_mib():
    from addrsim.commands.repro import _amount
    assert _amount(262144) == "256.0 KiB" and _amount(3 * 2**20) == "3.00 MiB" and _amount(3 * 2**30) == "3.00 GiB" and _amount(200 * 2**20) == "200 MiB"
