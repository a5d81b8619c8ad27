"""Shared fixtures: the real aiter wheel, downloaded once with pip and cached outside the
repository (``$ADDRSIM_CACHE``, default ``~/.cache/addrsim``)."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# verdicts in tests never come from an earlier run's query cache (addrsim.prove.store); the
# cache's own tests give it a folder explicitly
os.environ["ADDRSIM_NO_CACHE"] = "1"

WHEEL = "amd-aiter==0.1.7.post2.dev18"
KERNEL = "aiter_meta/hsa/gfx942/fmha_v3_bwd/bwd_hd128_bf16_a16_rtne.co"


def cache_dir() -> Path:
    return Path(os.environ.get("ADDRSIM_CACHE", Path.home() / ".cache" / "addrsim"))


@pytest.fixture(scope="session")
def real_kernel() -> Path:
    """Path of bwd_hd128_bf16_a16_rtne.co (gfx942) from the public amd-aiter wheel."""
    root = cache_dir()
    out = root / "x" / KERNEL
    if not out.exists():
        wheels = list((root / "wheel").glob("amd_aiter-*.whl"))
        if not wheels:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                            str(root / "wheel"), WHEEL], check=True)
            wheels = list((root / "wheel").glob("amd_aiter-*.whl"))
        with zipfile.ZipFile(wheels[0]) as z:
            z.extract(KERNEL, root / "x")
    return out


@pytest.fixture(scope="session")
def corpus(real_kernel) -> Path:
    """Directory aiter_meta/hsa with every fmha_v3_bwd code object of the wheel (both archs)."""
    root = cache_dir()
    hsa = root / "x" / "aiter_meta" / "hsa"
    wheels = list((root / "wheel").glob("amd_aiter-*.whl"))
    if wheels and len(list(hsa.glob("*/fmha_v3_bwd/*.co"))) < 200:
        with zipfile.ZipFile(wheels[0]) as z:
            for n in z.namelist():
                if "/fmha_v3_bwd/" in n and n.startswith("aiter_meta/hsa/"):
                    z.extract(n, root / "x")
    return hsa


# ----------------------------------------------------------------------------- tiers
# fast (default for development): python3 -m pytest -q tests -m "not slow"
# slow: every test that needs the wheel (the fixtures above) or takes more than a few seconds;
# corpus: the pinned verdicts of real kernels (also slow); gpu: needs a CUDA GPU (skipped without).
WHEEL_FIXTURES = {"real_kernel", "corpus"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if WHEEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)        # a test that reads the wheel is slow
