"""``addrsim repro --direct``: a script that launches the code object itself, bypassing the
host's routing, so a latent finding shows on the device (issue 40, item 6).

Specification: the README kernel (gfx942 hd128 bf16 a16 rtne) reads LSE and D with a stride
that is wrong in SBHD, a finding the wheel's host masks (latent).  The script's launch (its
constants and ``pack_kernargs``, plain Python above the device part) packs the same kernarg
bytes as the host contract gives the virtual MI300, with the same grid and workgroup size; run
on the virtual MI300 with those bytes, the kernel's gradients are wrong in SBHD at the
counterexample's shape and right in BHSD.  The device part loads the code object through
HIP's module API and judges the slices as the API script does.
"""
import ast
import subprocess
import sys

import pytest

from addrsim.emu import launch
from addrsim.model.models import load_models

SHAPE = {"batch": 2, "nhead_q": 1, "nhead_k": 1, "seqlen_q": 64, "seqlen_k": 64, "hdim_q": 128, "hdim_v": 128}


def _script(kernel, layout, *extra):
    p = subprocess.run([sys.executable, "-m", "addrsim", "repro", kernel, "--buffer", "lse", "--layout", layout,
                        "--direct", *extra], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout, p.stderr


def _launch_part(text):
    ns = {}
    exec(text[:text.index("# ---- the device part")], ns)      # the script's own constants and packing
    return ns


def _run_with_the_scripts_launch(kernel, layout, ns, monkeypatch):
    """run_kernel on the virtual MI300 with the main kernel's kernarg bytes from the script's
    pack_kernargs (each tensor at the address the run placed it), checked equal to the host
    contract's packing, and the script's grid and workgroup size."""
    seen = {}
    real_pack, real_launch = launch.pack_kernarg, launch.Launch

    def pack(kernel_, values):
        out = real_pack(kernel_, values)
        if kernel_.symbol != ns["SYMBOL"]:
            return out
        addresses = {t: values[a] for a, _, _, t in ns["KERNARGS"] if isinstance(t, str)}
        mine = ns["pack_kernargs"](addresses)
        seen["bytes_equal"] = mine == out
        return mine

    def made(k, arch, code, kernarg, grid, threads, **kw):
        if k.symbol == ns["SYMBOL"]:
            seen["grid"], seen["threads"] = tuple(grid), threads
        return real_launch(k, arch, code, kernarg, grid, threads, **kw)
    monkeypatch.setattr(launch, "pack_kernarg", pack)
    monkeypatch.setattr(launch, "Launch", made)
    shape = {n: v for n, v in zip(("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v"),
                                  (ns["B"], ns["HQ"], ns["HK"], ns["SQ"], ns["SK"], ns["D"], ns["DV"]))}
    res = launch.run_kernel(kernel, layout, shape, load_models([]))
    assert seen == {"bytes_equal": True, "grid": ns["GRID"], "threads": ns["THREADS"]}
    return res


@pytest.mark.slow
def test_the_direct_script_of_the_latent_sbhd_lse_finding_fails_on_the_virtual_mi300(real_kernel, monkeypatch):
    text, err = _script(real_kernel, "sbhd")
    ast.parse(text)
    assert "LATENT" in err and "launches the kernel directly" in err
    assert "does not route this shape to this kernel: this script launches it anyway" in text
    ns = _launch_part(text)
    assert ns["SLICES"][0] == (1, 0) and ns["DQ"] == "direct"
    res = _run_with_the_scripts_launch(real_kernel, "sbhd", ns, monkeypatch)
    assert not res.ok and {"dk", "dv"} <= {n for n, o in res.outputs.items() if not o.ok}


@pytest.mark.slow
def test_the_direct_script_at_a_shape_the_kernel_is_right_passes_on_the_virtual_mi300(real_kernel, monkeypatch):
    text, _ = _script(real_kernel, "bhsd", "--shape", "batch=2,nhead_q=1,seqlen_q=64")
    assert "expect PASS" in text
    res = _run_with_the_scripts_launch(real_kernel, "bhsd", _launch_part(text), monkeypatch)
    assert res.ok


def test_a_listing_is_refused_with_one_line(tmp_path):
    lst = tmp_path / "k.s"
    lst.write_text("s_endpgm\n")
    p = subprocess.run([sys.executable, "-m", "addrsim", "repro", lst, "--like", lst, "--buffer", "lse",
                        "--layout", "sbhd", "--direct"], capture_output=True, text=True)
    assert p.returncode != 0 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def test_the_device_part_launches_through_hips_module_api():
    from addrsim.commands.repro import direct_script
    plan = launch.DirectLaunch("_ZN5aiter1kE", "gfx942", 16, [("Q", 0, 8, "q"), ("n", 8, 4, 7)], (1, 2, 3), 256,
                               {}, "direct", 0.1)
    text = direct_script(plan, "k.co", "lse", "sbhd", SHAPE, (1, 0))
    ast.parse(text)
    for call in ("hipModuleLoad", "hipModuleGetFunction", "hipModuleLaunchKernel", "torch.cuda.synchronize"):
        assert call in text
    ns = _launch_part(text)
    assert ns["pack_kernargs"]({"q": 0x1122334455667788}) == bytes.fromhex("8877665544332211" "07000000" "00000000")
