"""Synthetic kernels in examples/, assembled with llvm-mc-22 and ld.lld-22."""
import shutil
import subprocess
from pathlib import Path

import pytest

from addrsim.api import verify

EX = Path(__file__).resolve().parent.parent / "examples"
MODEL = str(EX / "models" / "examples.yaml")


def build(name, tmp_path) -> Path:
    mc, ld = shutil.which("llvm-mc-22"), shutil.which("ld.lld-22")
    assert mc and ld, "llvm-mc-22 and ld.lld-22 are needed (apt-get install llvm-22 lld-22)"
    obj, co = tmp_path / f"{name}.o", tmp_path / f"{name}.co"
    subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj", str(EX / f"{name}.s"),
                    "-o", str(obj)], check=True)
    subprocess.run([ld, "-shared", str(obj), "-o", str(co)], check=True)
    return co


def verdicts(rep):
    return {(c["buffer"], c["layout"]): c for c in rep["kernels"][0]["checks"]}


def test_abi_fix_proved_for_every_layout(tmp_path):
    """Pattern A: batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed in 64 bits: proved everywhere,
    with the default bounds (batch <= 4096, nhead <= 256, seqlen <= 2^20)."""
    rep = verify(build("lsed_abi_fix", tmp_path), buffers=["lse", "d"], model_files=[MODEL], properties=["address"], min_budget_s=60)
    v = verdicts(rep)
    assert len(v) == 6
    assert all(c["verdict"] == "proved" for c in v.values()), v


@pytest.mark.slow
def test_bas_shortcut_refuted_for_sbhd_only(tmp_path):
    """(batch_id*BAs_q) >> 6: right for BHSD/BSHD with hdim 128, wrong for SBHD.  Bounded to
    nhead <= 8 so that Q's byte strides fit the 32-bit arguments (beyond that the host's u32
    cast of BAs_q breaks BHSD too)."""
    # a generous minimisation budget: on a loaded machine the default one can run out
    rep = verify(build("lsed_bas_shortcut", tmp_path), buffers=["lse"], model_files=[MODEL], properties=["address"],
                 bounds={"nhead_q": (1, 8), "nhead_k": (1, 8)}, min_budget_s=60)
    v = verdicts(rep)
    assert v[("lse", "bhsd")]["verdict"] == "proved"
    assert v[("lse", "bshd")]["verdict"] == "proved"
    c = v[("lse", "sbhd")]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    assert x["minimal"] is True
    assert (x["shape"]["batch"], x["shape"]["nhead_q"], x["shape"]["seqlen_q"]) == (2, 1, 2)
    assert x["coords"] == {"batch_id": 1, "head_id": 0}
    # SBHD: BAs_q = nhead_q*128*2 = 256, so (1*256)>>6 = 4 bytes; expected 1*1*Hs_lsed = 2*4
    assert x["address"] == {"extracted": 4, "expected": 8}


BOUNDS_NO_HOST_WRAP = {"seqlen_k": (1, 32768), "seqlen_q": (1, 32768)}   # u32(batch_stride_k*2) < 2^32


@pytest.mark.slow
def test_gqa_key_head_proved(tmp_path):
    """K head = head_id / ratio through the float-reciprocal idiom: the division is proved exact
    exhaustively (head_id < 256, ratio <= 256, every rcp within 1 ULP), then K is proved."""
    rep = verify(build("gqa_key_head", tmp_path), buffers=["k"], model_files=[MODEL], properties=["address"], min_budget_s=60, bounds=BOUNDS_NO_HOST_WRAP)
    for lay in ("bhsd", "bshd", "sbhd"):
        assert verdicts(rep)[("k", lay)]["verdict"] == "proved", verdicts(rep)[("k", lay)]["reason"]


@pytest.mark.slow
def test_gqa_query_head_refuted(tmp_path):
    """Indexing K with the query head fails as soon as ratio > 1: nhead_q=2, nhead_k=1, head 1."""
    rep = verify(build("gqa_query_head", tmp_path), buffers=["k"], model_files=[MODEL], properties=["address"], min_budget_s=60, bounds=BOUNDS_NO_HOST_WRAP)
    c = verdicts(rep)[("k", "bshd")]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    assert (x["shape"]["nhead_q"], x["shape"]["nhead_k"], x["coords"]["head_id"]) == (2, 1, 1)
    assert x["address"] == {"extracted": 1 * 128 * 2, "expected": 0}


def test_group_mode_seqstart_proved(tmp_path):
    """Group mode: LSE row of sequence b at seqstart_q[b] (an unknown non-decreasing int32
    array read by the kernel) is proved for every layout."""
    rep = verify(build("group_lse_seqstart", tmp_path), buffers=["lse"], model_files=[MODEL], properties=["address"], min_budget_s=60)
    for lay in ("bhsd", "bshd", "sbhd"):
        assert verdicts(rep)[("lse", lay)]["verdict"] == "proved", verdicts(rep)[("lse", lay)]["reason"]


def test_group_mode_rows_placed_by_the_sequence_length_are_proved(tmp_path):
    """Group mode, each workgroup reading its sequence's last 64-row tile: the offset inside the
    sequence depends on the sequence's length, so the claim measures every workgroup from a
    reference sequence 0 with the workgroup's own lengths (addrsim.prove.check.reference);
    measured from a sequence 0 of other lengths it would be a false counterexample.  The
    witness replays, with batch_id > 0."""
    rep = verify(build("group_lse_last_tile", tmp_path), buffers=["lse"], layouts=["bhsd"], model_files=[MODEL],
                 properties=["address"], min_budget_s=60)
    c = verdicts(rep)[("lse", "bhsd")]
    assert c["verdict"] == "proved", c["reason"]
    assert c["witness"]["coords"]["batch_id"] > 0 and c["witness"]["replayed_on"] == "this kernel"


@pytest.mark.slow
def test_group_mode_batch_formula_refuted(tmp_path):
    """The batch-mode formula in a group-mode kernel: refuted, and the counterexample carries
    the seqstart_q values it read (sequence 1 starts at row 0 while batch_id*nhead_q*Hs_lsed = 4)."""
    rep = verify(build("group_lse_batchmode", tmp_path), buffers=["lse"], layouts=["bshd"], model_files=[MODEL], properties=["address"], min_budget_s=60)
    c = verdicts(rep)[("lse", "bshd")]
    assert c["verdict"] == "counterexample"
    x = c["counterexample"]
    assert x["coords"]["batch_id"] == 1 and x["shape"]["batch"] == 2
    seq = x["arrays"]["seqstart_q"]
    assert x["address"]["expected"] == int(seq["1"]) * 4
    assert x["address"]["extracted"] != x["address"]["expected"]


def test_one_address_on_three_paths_is_proved_once_on_the_domain(tmp_path, monkeypatch):
    """LSE and D read on three paths at one address each: D's claim is proved on the domain
    alone, once per layout, covering its three reads; LSE's needs the path condition
    seqlen_q < 2**20 (its base adds (seqlen_q >> 20) * head_id * 256), so the attempt on the domain
    alone fails and each path is decided with its own conditions: proved too."""
    import addrsim.prove.check as C
    seen = []
    orig = C._proved_on_domain

    def spy(ctx, *a):
        seen.append((ctx.buffer, ctx.layout, orig(ctx, *a)))
        return seen[-1][2]
    monkeypatch.setattr(C, "_proved_on_domain", spy)
    rep = verify(build("lsed_three_paths", tmp_path), buffers=["lse", "d"], model_files=[MODEL],
                 properties=["address"], min_budget_s=60)
    for (buf, lay), c in verdicts(rep).items():
        assert c["verdict"] == "proved", (buf, lay, c["reason"])
    assert sorted(seen) == sorted([("d", lay, True) for lay in ("bhsd", "bshd", "sbhd")]
                                  + [("lse", lay, False) for lay in ("bhsd", "bshd", "sbhd")])


def test_group_mode_rows_placed_by_another_sequence_are_refuted(tmp_path):
    """The rule of the test above can fail: rows placed by sequence 0's length (a bottom-right
    offset read from the wrong sequence) are a counterexample at batch_id 1 with sequences of
    different lengths, replayed on this kernel."""
    rep = verify(build("group_lse_other_len", tmp_path), buffers=["lse"], layouts=["bhsd"], model_files=[MODEL],
                 properties=["address"], min_budget_s=60)
    c = verdicts(rep)[("lse", "bhsd")]
    assert c["verdict"] == "counterexample", c["reason"]
    x = c["counterexample"]
    assert x["coords"]["batch_id"] >= 1
    seq = {int(k): int(v) for k, v in x["arrays"]["seqstart_q"].items()}
    b = x["coords"]["batch_id"]
    assert (seq.get(1, 0) - seq.get(0, 0) - 1) // 64 != (seq.get(b + 1, 0) - seq.get(b, 0) - 1) // 64


def test_a_clamped_bottom_right_row_is_proved(tmp_path):
    """Group mode, causal bottom-right: the first q row of a key tile, max(0, kv_tile*64 -
    (len_k - len_q)), with len_k - len_q read only through the kernel's signed max (the
    integer encoding's signed-read rule, addrsim.backends.z3_int.signed_reads): proved, with
    a witness replayed at batch_id > 0."""
    rep = verify(build("group_lse_br_clamp", tmp_path), buffers=["lse"], layouts=["bhsd"], model_files=[MODEL],
                 properties=["address"], min_budget_s=60)
    c = verdicts(rep)[("lse", "bhsd")]
    assert c["verdict"] == "proved", c["reason"]
    assert c["witness"]["coords"]["batch_id"] > 0 and c["witness"]["replayed_on"] == "this kernel"


def test_the_bottom_right_row_without_its_clamp_is_refuted(tmp_path):
    """The signed-read rule can fail: the same kernel without its s_max_i32 reads a negative
    row (len_k > len_q + kv_tile*64) as a row near 2**32, which wraps once added to
    seqstart_q[batch_id].  The minimal counterexample: two sequences of one q row and two key
    rows, batch_id 1, key tile 0 (row -1), replayed on this kernel."""
    rep = verify(build("group_lse_br_noclamp", tmp_path), buffers=["lse"], layouts=["bhsd"], model_files=[MODEL],
                 properties=["address"], min_budget_s=60)
    c = verdicts(rep)[("lse", "bhsd")]
    assert c["verdict"] == "counterexample", c["reason"]
    x = c["counterexample"]
    assert x["minimal"] and x["replayed_on"] == "this kernel"
    assert x["shape"]["batch"] == 2 and (x["shape"]["seqlen_q"], x["shape"]["seqlen_k"]) == (1, 2)
    assert x["coords"]["batch_id"] == 1 and x["grid"]["kv_tile"] == 0
    sq = {int(k): int(v) for k, v in x["arrays"]["seqstart_q"].items()}
    sk = {int(k): int(v) for k, v in x["arrays"]["seqstart_k"].items()}
    assert sk[2] - sk[1] > sq[2] - sq[1]                  # len_k > len_q: the row is negative
    assert x["address"]["extracted"] != x["address"]["expected"]


def test_a_name_given_twice_is_checked_once(tmp_path):
    """A fresh-user trial (issue 40): --layout sbhd --layout sbhd, --buffer lse --buffer lse
    or --check address,address ended in an internal error (KeyError); each is checked, and
    shown, once."""
    import sys
    from addrsim import api
    co = build("lsed_bas_shortcut", tmp_path)
    rep = api.verify(co, ["lse", "lse"], ["sbhd", "sbhd"], model_files=[MODEL], properties=("address", "address"))
    assert [(c["buffer"], c["layout"], c["property"]) for c in rep["kernels"][0]["checks"]] == [
        ("lse", "sbhd", "address")]
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(co), "--model", MODEL, "--buffer", "lse",
                        "--buffer", "lse", "--layout", "sbhd", "--layout", "sbhd", "--check", "address,address"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "internal error" not in p.stderr and p.stdout.count("address  lse") == 1


def test_an_option_that_takes_one_value_given_two_is_bad_input(tmp_path):
    """A trial (issue 40): explain/repro --buffer lse --buffer d silently took d; run --layout
    twice took the last.  Two values are bad input (exit 3, one line); the same value twice is it."""
    import sys
    co = build("lsed_bas_shortcut", tmp_path)
    for cmd in (["explain", str(co), "--model", MODEL, "--buffer", "lse", "--buffer", "d"],
                ["repro", str(co), "--model", MODEL, "--buffer", "lse", "--buffer", "d", "--layout", "sbhd"]):
        p = subprocess.run([sys.executable, "-m", "addrsim", *cmd], capture_output=True, text=True)
        assert p.returncode == 3 and p.stderr == "addrsim: --buffer given twice (lse, d): this command takes one\n"
    p = subprocess.run([sys.executable, "-m", "addrsim", "explain", str(co), "--model", MODEL, "--buffer", "lse",
                        "--buffer", "lse"], capture_output=True, text=True)
    assert p.returncode == 0 and "lse access" in p.stdout


def test_two_listings_of_one_code_object_in_one_scan_are_named_by_their_files(tmp_path):
    """A trial (issue 40): two listings scanned with one --like were both named as that code
    object, so their findings shared names and the gate could not tell them apart.  Each is
    now named by its own file, and the scan says so once."""
    import json as _json
    import sys
    co = build("lsed_bas_shortcut", tmp_path)
    text = subprocess.run(["llvm-objdump-22", "-d", str(co)], capture_output=True, text=True, check=True).stdout
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.txt").write_text(text)
    p = subprocess.run([sys.executable, "-m", "addrsim", "scan", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
                        "--like", str(co), "--model", MODEL, "--buffer", "lse", "--layout", "sbhd", "--check",
                        "address", "--json", str(tmp_path / "r.json")], capture_output=True, text=True)
    assert p.returncode == 1 and "2 listings take their metadata from" in p.stderr
    from addrsim.report.gate import findings
    rep = _json.loads((tmp_path / "r.json").read_text())
    names = sorted(fp.split(":")[0] for fp in findings(rep["kernels"]))
    assert names == ["gfx942/a.txt", "gfx942/b.txt"]
