"""Every CLI command in-process on the small example kernels (the fast tier's view of commands/):
verify prints its table, explain its slice, scan its summary, diff its change, repro its
script, and the LSE-rows plot is drawn."""
import os
import json

import pytest

from addrsim.commands.cli import COMMANDS, main

from test_examples import MODEL, build

BOUNDS = ["--bound", "nhead_q=1:8", "--bound", "nhead_k=1:8", "--bound", "seqlen_q=1:4096",
          "--bound", "seqlen_k=1:4096", "--bound", "batch=1:16"]


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    d = tmp_path_factory.mktemp("k")
    return {n: build(n, d) for n in ("lsed_abi_fix", "lsed_bas_shortcut")}


def test_every_command_is_registered():
    assert set(COMMANDS) == {"verify", "diff", "crosscheck", "repro", "scan", "explain", "run", "contract"}


def test_verify_table_and_exit(kernels, capsys):
    code = main(["verify", str(kernels["lsed_abi_fix"]), "--model", MODEL, *BOUNDS, "--buffer", "lse",
                 "--layout", "sbhd", "--check", "address"])
    out = capsys.readouterr().out
    assert code == 0                                   # pattern A: right in every layout
    assert "lse/sbhd proved" in out and "witness:" in out and "domain: bounds, grid" in out


def test_verify_progress_on_stderr_only_when_asked(kernels, capsys):
    argv = ["verify", str(kernels["lsed_abi_fix"]), "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "bhsd",
            "--check", "address"]
    assert main(argv + ["--progress"]) == 0
    err = capsys.readouterr().err
    assert "addrsim verify" in err and "lse/bhsd address: proved" in err
    assert main(argv + ["--progress", "--quiet"]) == 0 and capsys.readouterr().err == ""
    assert main(argv) == 0 and capsys.readouterr().err == ""        # stderr is not a terminal here


def test_explain_prints_the_slice(kernels, capsys):
    assert main(["explain", str(kernels["lsed_abi_fix"]), "--model", MODEL, "--buffer", "lse"]) == 0
    assert "s_mul_hi_u32 s20, s18, s17" in capsys.readouterr().out


def test_scan_summary_and_json(kernels, tmp_path, capsys):
    out = tmp_path / "scan.json"
    code = main(["scan", "--no-progress", str(kernels["lsed_abi_fix"]), "--model", MODEL, *BOUNDS,
                 "--buffer", "lse", "--layout", "bhsd", "--json", str(out)])
    assert code == 0, capsys.readouterr()
    (k,) = json.loads(out.read_text())["kernels"]
    assert [c["verdict"] for c in k["checks"]] == ["proved"]


def test_diff_says_fixed(kernels, capsys):
    code = main(["diff", str(kernels["lsed_bas_shortcut"]), str(kernels["lsed_abi_fix"]), "--model", MODEL, *BOUNDS,
                 "--buffer", "lse", "--layout", "sbhd", "--json", "-"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 0
    assert any(r.get("change") == "fixed" for k in rep["kernels"] for r in k["checks"])


def test_repro_writes_a_script_for_a_shape(kernels, tmp_path):
    out = tmp_path / "r.py"
    assert main(["repro", str(kernels["lsed_bas_shortcut"]), "--model", MODEL, "--buffer", "lse", "--layout", "sbhd",
                 "--shape", "batch=2,nhead_q=2,seqlen_q=64,hdim_q=128", "-o", str(out)]) == 0
    text = out.read_text()
    compile(text, str(out), "exec")
    assert 'LAYOUT = "sbhd"' in text and "B, HQ, HK, SQ, SK, D, DV = 2, 2, 2, 64, 64, 128, 128" in text


def test_lse_rows_plot(kernels, tmp_path):
    pytest.importorskip("matplotlib")
    from addrsim.commands.crosscheck import AddressFunction
    from addrsim.model.models import load_models
    from addrsim.report.plots import plot_rows
    af = AddressFunction(str(kernels["lsed_bas_shortcut"]), ["lse"], load_models([MODEL]))
    shape = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 64, "seqlen_k": 64, "hdim_q": 128, "hdim_v": 128}
    png = tmp_path / "rows.png"
    assert plot_rows(af, {"sbhd": {"shape": shape, "label": "sbhd"}}, str(png), "lse") == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_repro_at_a_group_mode_shape_ends(tmp_path):
    """A breaker's case: minimisation at a --shape of a group-mode example asked a box and got
    the same counterexample back, outside it, for ever; now it stops (not proven minimal)."""
    import subprocess
    import sys
    co = build("group_lse_batchmode", tmp_path)
    p = subprocess.run([sys.executable, "-m", "addrsim", "repro", str(co), "--model", MODEL, "--buffer", "lse",
                        "--layout", "bhsd", "--shape", "batch=2,nhead_q=1,seqlen_q=64", "-o", str(tmp_path / "r.py")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    compile((tmp_path / "r.py").read_text(), "r.py", "exec")


@pytest.mark.parametrize("argv,words", [
    (["verify", "{co}", "--html", "{co}"], "is an input of this command"),
    (["verify", "{co}", "--json", "{model}"], "is an input of this command"),
    (["verify", "{co}", "--json", "{out}", "--html", "{out}"], "one output would overwrite the other"),
    (["scan", "--no-progress", "{co}", "--json", "{out}", "--sarif", "{out}"], "one output would overwrite the other"),
    (["repro", "{co}", "--buffer", "lse", "--layout", "sbhd", "-o", "{co}"], "is an input of this command")])
def test_an_output_never_overwrites_an_input_or_another_output(kernels, tmp_path, capsys, argv, words):
    import shutil
    co, model = tmp_path / "k.co", tmp_path / "m.yaml"
    shutil.copy(kernels["lsed_bas_shortcut"], co)
    shutil.copy(MODEL, model)
    before = co.read_bytes(), model.read_bytes()
    args = [a.format(co=co, model=model, out=tmp_path / "same.out") for a in argv]
    code = main(args + ["--model", str(model)] + (BOUNDS if argv[0] != "repro" else []))
    err = capsys.readouterr().err
    assert code == 3 and words in err and len(err.strip().splitlines()) == 1, err
    assert (co.read_bytes(), model.read_bytes()) == before and not (tmp_path / "same.out").exists()


@pytest.mark.parametrize("cmd", ["verify", "scan", "diff", "repro"])
def test_a_name_bounded_twice_is_refused_not_replaced(kernels, capsys, cmd):
    """`--bound batch=2:8 --bound batch=1:1` kept only the last range (and proved SBHD)."""
    co = str(kernels["lsed_bas_shortcut"])
    files = {"verify": [co], "scan": ["--no-progress", co], "diff": [co, co], "repro": [co, "--layout", "sbhd"]}[cmd]
    code = main([cmd, *files, "--model", MODEL, "--buffer", "lse", "--bound", "batch=2:8", "--bound", "batch=1:1"])
    err = capsys.readouterr().err
    assert code == 3 and "batch is bounded twice" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("extra,words", [(["--layout", "nosuch"], "--layout: unknown layout 'nosuch'"),
                                         (["--layout", "sbhd", "--shape", "batch=5000,nhead_q=1,seqlen_q=64"],
                                          "batch=5000 is outside the models' shape bounds batch=1:4096")])
def test_repro_refuses_an_unknown_layout_and_a_shape_outside_the_models(kernels, capsys, extra, words):
    shape = [] if "--shape" in extra else ["--shape", "batch=2,nhead_q=1,seqlen_q=64"]
    code = main(["repro", str(kernels["lsed_bas_shortcut"]), "--model", MODEL, "--buffer", "lse", *extra, *shape])
    err = capsys.readouterr().err
    assert code == 3 and words in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("bound,words", [("batch=4:1", "empty range"), ("batch=3:8", "outside --bound batch=3:8")])
def test_repro_refuses_a_bound_that_its_shape_breaks(kernels, tmp_path, capsys, bound, words):
    out = tmp_path / "r.py"
    code = main(["repro", str(kernels["lsed_bas_shortcut"]), "--model", MODEL, "--buffer", "lse", "--layout", "sbhd",
                 "--shape", "batch=2,nhead_q=2,seqlen_q=64,hdim_q=128", "--bound", bound, "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 3 and words in err and len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("cmd,flag", [("verify", "--json"), ("scan", "--json"), ("scan", "--sarif"),
                                      ("scan", "--junit"), ("diff", "--json"),
                                      ("verify", "--html"), ("scan", "--html")])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(kernels, tmp_path, capsys, cmd, flag):
    co = str(kernels["lsed_abi_fix"])
    files = [co, co] if cmd == "diff" else [co]
    if cmd == "scan":
        files = ["--no-progress"] + files
    code = main([cmd, *files, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "bhsd",
                 flag, str(tmp_path / "missing" / "out.txt")])
    err = capsys.readouterr().err
    assert code == 3 and flag in err and "cannot write" in err


def test_diff_takes_the_host_options(kernels, capsys):
    code = main(["diff", str(kernels["lsed_bas_shortcut"]), str(kernels["lsed_abi_fix"]), "--model", MODEL, *BOUNDS,
                 "--buffer", "lse", "--layout", "sbhd", "--host", "no-such-host", "--json", "-"])
    assert code == 3 and "no-such-host" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", ["verify", "scan"])
def test_html_needs_a_file_name(kernels, tmp_path, capsys, cmd):
    files = ["--no-progress", str(kernels["lsed_abi_fix"])] if cmd == "scan" else [str(kernels["lsed_abi_fix"])]
    for bad in ("-", ""):
        code = main([cmd, *files, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "bhsd", "--html", bad])
        err = capsys.readouterr().err
        assert code == 3 and "--html" in err and err.count("\n") == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_scan_names_the_output_it_cannot_write(kernels, capsys):
    code = main(["scan", "--no-progress", str(kernels["lsed_abi_fix"]), "--model", MODEL, *BOUNDS, "--buffer", "lse",
                 "--layout", "bhsd", "--sarif", "/dev/full"])
    err = capsys.readouterr().err
    assert code == 3 and "/dev/full: cannot write" in err and "None" not in err


def test_check_given_twice_checks_both_properties():
    """``--check bounds --check address`` is both (the last one alone was kept, silently)."""
    from addrsim.commands.common import Parser, add_common
    p = Parser(prog="t")
    add_common(p, "address")
    assert p.parse_args([]).check == ["address"]
    assert p.parse_args(["--check", "bounds"]).check == ["bounds"]
    assert p.parse_args(["--check", "bounds", "--check", "address"]).check == ["bounds", "address"]
    assert p.parse_args(["--check", "bounds,address", "--check", "bounds"]).check == ["bounds", "address"]
