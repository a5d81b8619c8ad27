"""The text report of the README kernel (address, every buffer, the three layouts), compared
with tests/data/readme_kernel_address.txt: root-cause blocks, reasons, the proved check with
its witness, and the summary line.  Budgets are resource units, so the text is the same on
every machine; times and the file's path are normalised.  ADDRSIM_UPDATE_SNAPSHOTS=1 rewrites
the snapshot (then review its diff)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).parent / "data" / "readme_kernel_address.txt"


def normalise(text: str, path: str) -> str:
    text = text.replace(path, "KERNEL.co")
    text = re.sub(r"(?m)(counterexample|proved|unknown|unsupported|unreachable)( +\S*)? +\d+\.\d+s$",
                  lambda m: m.group(0)[:m.group(0).rfind(" ")].rstrip(), text)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


@pytest.mark.slow
def test_readme_kernel_text_report(real_kernel):
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(real_kernel), "--check", "address",
                        "--jobs", "2", "--quiet", "--no-cache"], capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    got = normalise(p.stdout, str(real_kernel))
    if os.environ.get("ADDRSIM_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(got)
    assert got == SNAPSHOT.read_text()
    assert got.count("ROOT CAUSE ") >= 4 and "\n  summary: 25 counterexample(s) from " in got
