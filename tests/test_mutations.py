"""Edited listings of the README kernel (the wheel's gfx942 bwd_hd128_bf16_a16_rtne) that a
proof must not survive (issue 36), and equivalent edits that must stay as they were.

Each edit changes one instruction, named by its address in the llvm-objdump listing.  The
register roles (from the kernarg loads at 0x2820-0x2838 and the pointer adds at 0x2bd4-0x2bf0):
s[78:79] Q, s[80:81] K, s[84:85] dO; s[12:13] K's V# base, s[8:9] Q's, s[20:21] dO's."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from addrsim.api import verify

pytestmark = pytest.mark.slow


def objdump(co: Path) -> str:
    exe = shutil.which("llvm-objdump-22")
    assert exe, "llvm-objdump-22 is needed (apt-get install llvm-22)"
    return subprocess.run([exe, "-d", str(co)], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def listing(real_kernel):
    return objdump(real_kernel)


def edit(text: str, pc: int, old: str, new: str) -> str:
    """``text`` with the instruction at ``pc`` changed from ``old`` to ``new`` (exactly one)."""
    pat = re.compile(rf"^(\s*){re.escape(old)}(\s+// {pc:012X}:)", re.M)
    out, n = pat.subn(lambda m: m.group(1) + new + m.group(2), text)
    assert n == 1, (hex(pc), old)
    return out


def run(tmp_path, real_kernel, text, buffers, layouts=("bhsd",), props=("address",), cache=None):
    p = tmp_path / "edited.s"
    p.write_text(text)
    rep = verify(p, list(buffers), list(layouts), like=real_kernel, properties=list(props), cache=cache)
    return {(c["buffer"], c["layout"], c.get("property", "address")): c for c in rep["kernels"][0]["checks"]}, rep


DROPPED_CARRIES = [("q", 0x2BE8, "s_addc_u32 s9, 0, s79", "s_add_u32 s9, 0, s79", 0x2BE4),
                   ("k", 0x2BD8, "s_addc_u32 s13, 0, s81", "s_add_u32 s13, 0, s81", 0x2BD4),
                   ("do", 0x2BF0, "s_addc_u32 s21, 0, s85", "s_add_u32 s21, 0, s85", 0x2BEC)]


@pytest.mark.parametrize("buffer, pc, old, new, low_add", DROPPED_CARRIES, ids=[d[0] for d in DROPPED_CARRIES])
def test_a_dropped_carry_is_an_overflow_at_the_pointer_add(tmp_path, real_kernel, listing, buffer, pc, old, new,
                                                           low_add):
    """The replay keeps the solver's pointer base: the carry it found happens, and the root
    cause is the low add whose carry is lost (was: "did not replay (engine bug)")."""
    checks, rep = run(tmp_path, real_kernel, edit(listing, pc, old, new), [buffer])
    c = checks[(buffer, "bhsd", "address")]
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow", c.get("reason")
    site = next(w for w in c["overflow"] if w["matters"])
    assert site["pc"] == low_add
    assert pointer_name(buffer) in c["counterexample"]["kernargs"]        # the base the solver chose, shown
    (rc,) = [r for r in rep["kernels"][0]["root_causes"] if r["kind"] == "wrap"]
    assert rc["where"]["pc"] == low_add and "s_addc_u32" in rc["fix"]


def pointer_name(buffer):
    return {"q": "Q", "k": "K", "do": "dO"}[buffer]


def test_q_read_through_ks_pointer_is_a_counterexample(tmp_path, real_kernel, listing):
    text = edit(listing, 0x2BE4, "s_add_u32 s8, s55, s78", "s_add_u32 s8, s55, s80")
    text = edit(text, 0x2BE8, "s_addc_u32 s9, 0, s79", "s_addc_u32 s9, 0, s81")
    checks, rep = run(tmp_path, real_kernel, text, ["q", "k"], props=("address", "bounds"))
    for prop in ("address", "bounds"):
        c = checks[("q", "bhsd", prop)]
        assert c["verdict"] == "counterexample" and c["cause"] == "base", c.get("reason")
        assert "through argument K, not Q" in c["reason"]
    (rc,) = [r for r in rep["kernels"][0]["root_causes"] if r["kind"] == "base"]
    assert rc["checks"] == ["q/bhsd", "q/bhsd bounds"]
    assert checks[("k", "bhsd", "address")]["cause"] != "base"               # K's own accesses are K's


def test_do_with_qs_high_word_is_a_counterexample(tmp_path, real_kernel, listing):
    checks, _ = run(tmp_path, real_kernel, edit(listing, 0x2BF0, "s_addc_u32 s21, 0, s85", "s_addc_u32 s21, 0, s79"),
                    ["do"])
    c = checks[("do", "bhsd", "address")]
    assert c["verdict"] == "counterexample" and c["cause"] == "base"
    assert "combines its dO argument with Q" in c["reason"]
    x = c["counterexample"]["address"]
    assert x["extracted"] != x["expected"]


EQUIVALENT = [(0x2BE4, "s_add_u32 s8, s55, s78", "s_add_u32 s8, s78, s55"),       # commutative operands
              (0x2BF8, "v_lshlrev_b32_e32 v11, 2, v11", "v_mul_u32_u24_e32 v11, 4, v11")]   # x << 2 as x * 4


def _essence(c):
    x = c.get("counterexample") or {}
    return c["verdict"], c.get("cause"), x.get("shape"), x.get("coords"), x.get("address")


@pytest.mark.parametrize("pc, old, new", EQUIVALENT, ids=["commuted", "shift-as-multiply"])
def test_equivalent_edits_keep_every_verdict(tmp_path, real_kernel, listing, pc, old, new):
    buffers = ["q", "lse"]
    layouts = ("bhsd", "sbhd")
    before, _ = run(tmp_path, real_kernel, listing, buffers, layouts)
    after, _ = run(tmp_path, real_kernel, edit(listing, pc, old, new), buffers, layouts)
    assert {k: _essence(c) for k, c in after.items()} == {k: _essence(c) for k, c in before.items()}


# ----------------------------------------------------------------------------- absolute: store coverage

def test_dk_wave_row_term_dropped_is_a_layout_counterexample(tmp_path, real_kernel, listing):
    """Every wave stores over wave 0's rows: the relative claim cancels it (each workgroup
    alike); the run of the workgroup's four waves does not.  dV's address is a copy of dK's
    (v_mov_b32 v10, v5 at 0x2c54), so both break."""
    checks, rep = run(tmp_path, real_kernel, edit(listing, 0x2C28, "v_add_u32_e32 v5, s60, v5", "v_add_u32_e32 v5, 0, v5"),
                      ["dk", "dv"], layouts=("bhsd", "sbhd"))
    for lay in ("bhsd", "sbhd"):
        c = checks[("dk", lay, "address")]
        assert c["verdict"] == "counterexample" and c["cause"] == "layout", c.get("reason")
        assert "store the same dk bytes" in c["reason"] and "wave 0" in c["reason"]
        assert checks[("dv", lay, "address")]["cause"] == "layout"
    causes = [r for r in rep["kernels"][0]["root_causes"] if r["kind"] == "layout"]
    assert sorted(x for r in causes for x in r["checks"]) == ["dk/bhsd", "dk/sbhd", "dv/bhsd", "dv/sbhd"]


def test_the_clean_kernels_stored_coverage_is_not_the_edited_ones(tmp_path, real_kernel, listing):
    """Store coverage judgements are reused across kernels whose sliced runs are the same
    (prove/coverage.py, engine/slice.py sliced_program): the unedited kernel's judgements,
    in the store first, are not read for the kernel whose dQ lane term is shifted by 3 (a
    stepped instruction differs; it reads the same registers), which is still a layout
    counterexample in BSHD."""
    from addrsim.prove.store import Store
    cache = Store()
    clean, _ = run(tmp_path, real_kernel, listing, ["dq"], layouts=("bshd",), cache=cache)
    assert clean[("dq", "bshd", "address")].get("cause") != "layout"
    assert any(isinstance(k, tuple) and k[0] == "run-result" for k in cache)
    edited = edit(listing, 0x2C74, "v_lshlrev_b32_e32 v6, 2, v6", "v_lshlrev_b32_e32 v6, 3, v6")
    checks, _ = run(tmp_path, real_kernel, edited, ["dq"], layouts=("bshd",), cache=cache)
    assert checks[("dq", "bshd", "address")]["cause"] == "layout"


def test_dq_lane_term_doubled_is_a_layout_counterexample(tmp_path, real_kernel, listing):
    """The dQ atomics' lane term shifted by 3: the next head's row in BSHD.  (In BHSD the
    doubled offsets stay inside the slice and leave holes; atomics claim no coverage, so it
    survives there: see prove/coverage.py.)"""
    checks, _ = run(tmp_path, real_kernel, edit(listing, 0x2C74, "v_lshlrev_b32_e32 v6, 2, v6",
                                                "v_lshlrev_b32_e32 v6, 3, v6"), ["dq"], layouts=("bshd",))
    assert checks[("dq", "bshd", "address")]["cause"] == "layout"
    assert "outside the workgroup's own dq slice" in checks[("dq", "bshd", "address")]["reason"]


def test_the_unedited_kernel_covers_its_tiles(tmp_path, real_kernel, listing):
    checks, _ = run(tmp_path, real_kernel, listing, ["dk", "dv", "dq"], layouts=("bhsd", "bshd", "sbhd"))
    assert not [k for k, c in checks.items() if c.get("cause") in ("layout", "base")]
