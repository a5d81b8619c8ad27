"""The dq_acc and D contracts between kernels of one backward pass (addrsim.prove.contract).

Synthetic pairs (examples/acc_*.s, gfx942, hdim 128, bf16, fp32 accumulator [batch, nhead_q,
seqlen_q, hdim_q]): a producer (the main kernel's dq) and two consumers (a post-kernel's
dq_acc), one reading by the same formula, one borrowing Q's batch stride.  Real pairs: aiter
e4048607's gfx942 hd64 pass (odo -> main D, main -> dq_convert dq_acc) and the hd128 a32
dq_convert, whose 32-bit head term wraps before the main kernel's.
"""
from pathlib import Path

import pytest

from addrsim.api import contract, pass_contracts
from addrsim.commands.cli import main as cli
from test_examples import MODEL, build

SMALL = {"nhead_q": (1, 8), "nhead_k": (1, 8), "seqlen_q": (1, 4096), "seqlen_k": (1, 4096)}   # BAs_q fits its u32


def by_layout(out):
    return {c["layout"]: c for c in out}


def test_agreeing_pair_is_proved_in_every_layout(tmp_path):
    """Producer and consumer place slice (batch, head) at (batch*nhead_q + head)*seqlen_q*
    hdim_q*4: proved in BHSD, BSHD and SBHD, each with a shape both kernels run at."""
    out = by_layout(contract(build("acc_producer", tmp_path), build("acc_consumer", tmp_path), "dq", "dq_acc",
                             model_files=[MODEL]))
    assert set(out) == {"bhsd", "bshd", "sbhd"}
    for c in out.values():
        assert c["verdict"] == "proved", c
        assert c["witness"]["hdim_q"] == 128 and c["witness"]["batch"] >= 1
        assert any("traits" in a for a in c["assumptions"])


def test_borrowed_batch_stride_is_a_contract_finding_in_sbhd_only(tmp_path):
    """batch_id*BAs_q*2 equals the accumulator's batch stride in BHSD and BSHD (hdim 128, bf16)
    but not in SBHD: the consumer, its batch term, a formula (not a wrap), at the smallest
    shape (batch 2, seqlen 2: 1024 bytes per batch against 512)."""
    out = by_layout(contract(build("acc_producer", tmp_path), build("acc_consumer_bas", tmp_path), "dq", "dq_acc",
                             model_files=[MODEL], bounds=SMALL))
    assert out["bhsd"]["verdict"] == out["bshd"]["verdict"] == "proved"
    c = out["sbhd"]
    assert c["verdict"] == "counterexample"
    assert c["culprit"] == ["addrsim_example_acc_consumer_bas"]
    assert (c["term"], c["cause"]) == ("batch", "formula")
    x = c["counterexample"]
    assert x["minimal"] is True
    assert (x["shape"]["batch"], x["shape"]["seqlen_q"], x["shape"]["batch_id"]) == (2, 2, 1)
    assert (x["producer_offset"], x["consumer_offset"], x["producer_expected"]) == (1024, 512, 1024)
    assert x["how"] == {"producer": "replayed", "consumer": "replayed"}


def test_contract_command_exit_status_and_bad_input(tmp_path, capsys):
    p, bad = build("acc_producer", tmp_path), build("acc_consumer_bas", tmp_path)
    argv = ["contract", str(p), str(bad), "--buffers", "dq", "dq_acc", "--model", MODEL, "--layout", "sbhd"]
    argv += [f"--bound={k}={lo}:{hi}" for k, (lo, hi) in SMALL.items()]
    assert cli(argv) == 1
    text = capsys.readouterr().out
    assert "counterexample (formula, batch term)" in text and "off the host's layout: addrsim_example_acc_consumer_bas" in text
    assert cli(["contract", str(p), str(bad), "--model", MODEL]) == 3          # two kernels need --buffers
    assert "--buffers" in capsys.readouterr().err
    assert cli(["contract", str(p), "--model", MODEL]) == 3                   # no routing csv beside it
    assert "routing table" in capsys.readouterr().err
    assert cli(["contract", str(p), str(bad), "--buffers", "dq", "lse", "--model", MODEL]) == 3
    assert "lse" in capsys.readouterr().err


E4048607 = Path(__file__).resolve().parents[2] / "shared" / "aiter-e4048607" / "hsa"


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.skipif(not E4048607.is_dir(), reason="aiter e4048607 corpus not present")
def test_real_pass_pairs_from_the_routing_tables():
    """gfx942 hd64 a32: the host runs odo, the main kernel and dq_convert; D and dq_acc agree in
    SBHD (the other layouts: README's measurements).  hd128 a32: dq_convert's head term is 32-bit (u32 Hs_dQ_acc times head_id,
    sign-extended) where the main kernel's is 64-bit: the pair disagrees from a 3.8 GB
    accumulator on, an overflow of dq_convert's head term."""
    d = E4048607 / "gfx942" / "fmha_v3_bwd"
    pairs = pass_contracts(d / "bwd_hd64_bf16_a32_rtne_pssk.co", "gfx942")
    assert [(a.name, pb, c.name, cb) for a, pb, c, cb in pairs] == [
        ("bwd_hd64_odo_bf16.co", "d", "bwd_hd64_bf16_a32_rtne_pssk.co", "d"),
        ("bwd_hd64_bf16_a32_rtne_pssk.co", "dq", "bwd_hd64_dq_convert_bf16_rtne.co", "dq_acc")]
    for a, pb, c, cb in pairs:
        assert {x["verdict"] for x in contract(a, c, pb, cb, layouts=["sbhd"])} == {"proved"}
    out = by_layout(contract(d / "bwd_hd128_bf16_a32_rtne_psskddv.co", d / "bwd_hd128_dq_convert_bf16_rtne.co",
                             "dq", "dq_acc", layouts=["bhsd"]))
    c = out["bhsd"]
    assert c["verdict"] == "counterexample" and (c["cause"], c["term"]) == ("overflow", "head")
    assert c["culprit"] == ["_ZN5aiter35fmha_bwd_hd128_dq_convert_bf16_rtneE"]
    x = c["counterexample"]
    assert x["producer_offset"] == x["producer_expected"] >= 2 ** 31
    assert x["consumer_offset"] == x["producer_offset"] - 2 ** 32 + 2 ** 64      # sign-extended 32-bit term


def test_scan_checks_the_pairs_the_routing_tables_name(tmp_path, capsys):
    """scan --contracts: a main kernel whose csv row says atomic32 is followed by the
    dq_convert row of its head dim and mode (mha_bwd.cu 424-452); the pair disagrees in SBHD,
    in the scan's JSON under "contracts".  The odo row names a kernel without D: that pair is an
    "error" entry naming the problem, the other pair still runs, the report is written, exit 3."""
    import json
    build("acc_producer", tmp_path)
    build("acc_consumer_bas", tmp_path)
    cols = "dtype,hdim_q,hdim_v,mask,atomic32,pssk,pddv,mode,bf16_cvt,ts_qo,ts,knl_name,co_name\n"
    (tmp_path / "fmha_bwd_dqdkdv.csv").write_text(
        cols + "bf16,128,128,0,1,0,0,0,3,16,64,addrsim_example_acc_producer,acc_producer.co\n")
    (tmp_path / "fmha_bwd_odo.csv").write_text(cols + "bf16,128,128,0,0,0,0,0,3,0,128,odo,acc_consumer_bas.co\n")
    (tmp_path / "fmha_bwd_dq_convert.csv").write_text(
        cols + "bf16,128,128,0,0,0,0,0,3,0,64,addrsim_example_acc_consumer_bas,acc_consumer_bas.co\n")
    out = tmp_path / "scan.json"
    argv = ["scan", str(tmp_path), "--contracts", "--model", MODEL, "--layout", "sbhd", "--buffer", "dq",
            "--check", "address", "--json", str(out), "--no-cache"]
    argv += [f"--bound={k}={lo}:{hi}" for k, (lo, hi) in SMALL.items()]
    assert cli(argv) == 3
    io = capsys.readouterr()
    assert "contracts between kernels of one pass" in io.out and "no pointer argument of buffer 'd'" in io.err
    cs = json.loads(out.read_text())["contracts"]
    assert [(c["layout"], c["verdict"], c["term"]) for c in cs] == [("-", "error", ""), ("sbhd", "counterexample", "batch")]


def test_bad_pairs_and_tables_are_one_line_each(tmp_path, capsys):
    """From a breaker's report: tensors no two kernels share, a reader given as the writer, an
    output that would overwrite an input, and routing tables the host could not read are bad
    input (exit 3, one line naming the file), never a verdict or an internal error."""
    p, c = build("acc_producer", tmp_path), build("acc_consumer", tmp_path)
    base = ["contract", "--model", MODEL, "--layout", "sbhd"]
    assert cli(base + [str(p), str(c), "--buffers", "dq", "lse"]) == 3
    assert "not a tensor two kernels of the pass share" in capsys.readouterr().err
    assert cli(base + [str(c), str(p), "--buffers", "dq", "dq_acc"]) == 3           # roles swapped
    assert cli(base + [str(p), str(c), "--buffers", "dq", "dq_acc", "--json", str(c)]) == 3
    assert "would be overwritten" in capsys.readouterr().err and c.read_bytes()[:4] == b"\x7fELF"
    cols = "dtype,hdim_q,hdim_v,mask,atomic32,pssk,pddv,mode,bf16_cvt,ts_qo,ts,knl_name,co_name\n"
    row = "bf16,128,128,0,1,0,0,0,3,16,64,addrsim_example_acc_producer,acc_producer.co\n"
    (tmp_path / "fmha_bwd_dqdkdv.csv").write_text(cols.replace("dtype,", "") + row.split(",", 1)[1])
    assert cli(base + [str(p)]) == 3
    assert "lacks the column(s) dtype" in capsys.readouterr().err
    (tmp_path / "fmha_bwd_dqdkdv.csv").write_text("\ufeff" + cols + row, encoding="utf-8")    # Excel's BOM
    assert cli(base + [str(p)]) == 3                                                 # read; no odo row
    assert "fmha_bwd_odo.csv" in capsys.readouterr().err


def test_a_pass_naming_a_missing_code_object_fails_before_the_work(tmp_path, capsys):
    p = build("acc_producer", tmp_path)
    cols = "dtype,hdim_q,hdim_v,mask,atomic32,pssk,pddv,mode,bf16_cvt,ts_qo,ts,knl_name,co_name\n"
    (tmp_path / "fmha_bwd_dqdkdv.csv").write_text(
        cols + "bf16,128,128,0,0,0,0,0,3,16,64,addrsim_example_acc_producer,acc_producer.co\n")
    (tmp_path / "fmha_bwd_odo.csv").write_text(cols + "bf16,128,128,0,0,0,0,0,3,0,128,odo,gone.co\n")
    assert cli(["contract", str(p), "--model", MODEL]) == 3
    err = capsys.readouterr().err
    assert "gone.co: not a file (named by the routing csvs beside acc_producer.co)" in err and err.count("\n") == 1


def test_a_slice_offset_built_from_a_loaded_value_is_never_proved(tmp_path):
    """The contract states its claim only where the address check would: acc_consumer.s edited to
    add a word it loads from memory to its offset (the same in every slice, so it cancels in
    offset(b,h) - offset(0,0)) is unsupported with the address check's reason, not proved."""
    import shutil
    import subprocess
    from test_examples import EX
    text = (EX / "acc_consumer.s").read_text()
    edit = ("        s_load_dword s26, s[8:9], 0x0           // a word from memory\n"
            "        s_waitcnt lgkmcnt(0)\n        s_add_u32 s18, s18, s26\n        s_addc_u32 s19, s19, 0\n")
    anchor = "        s_add_u32 s8, s8, s18"
    assert text.count(anchor) == 1
    src = tmp_path / "acc_consumer_loaded.s"
    src.write_text(text.replace(anchor, edit + anchor))
    obj, co = tmp_path / "c.o", tmp_path / "acc_consumer_loaded.co"
    subprocess.run([shutil.which("llvm-mc-22"), "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj", str(src),
                    "-o", str(obj)], check=True)
    subprocess.run([shutil.which("ld.lld-22"), "-shared", str(obj), "-o", str(co)], check=True)
    out = by_layout(contract(build("acc_producer", tmp_path), co, "dq", "dq_acc", layouts=["bhsd"], model_files=[MODEL]))
    c = out["bhsd"]
    assert c["verdict"] == "unsupported" and "memory the models do not describe" in c["reason"], c
