"""Bad input: one line naming the file and the problem, exit status 3, never a traceback."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "addrsim", *map(str, args)], capture_output=True, text=True)


def assert_bad(p, path, words):
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    assert str(path) in lines[0]
    assert any(w in lines[0] for w in words), lines[0]


def test_text_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello\n")
    assert_bad(run("verify", f), f, ["not an ELF"])


def test_truncated_code_object(tmp_path, real_kernel):
    f = tmp_path / "cut.co"
    f.write_bytes(real_kernel.read_bytes()[:3000])
    assert_bad(run("verify", f), f, ["truncated", "malformed", "metadata"])


def test_other_machine():
    ls = Path(shutil.which("ls")).resolve()
    assert_bad(run("verify", ls), ls, ["not AMDGPU"])


def test_missing_file(tmp_path):
    f = tmp_path / "nope.co"
    assert_bad(run("verify", f), f, ["cannot read"])


def test_metadata_without_lse(tmp_path, real_kernel):
    data = bytearray(real_kernel.read_bytes())
    i = data.find(b"\xa3Lse")          # msgpack str "Lse" in the metadata note
    assert i > 0
    data[i + 1:i + 4] = b"Lxx"
    f = tmp_path / "nolse.co"
    f.write_bytes(bytes(data))
    assert_bad(run("verify", f, "--buffer", "lse"), f, ["no argument for buffer 'lse'"])


def test_unknown_layout(real_kernel):
    assert_bad(run("verify", real_kernel, "--layout", "nope"), real_kernel, ["unknown layout"])


def test_malformed_model(tmp_path, real_kernel):
    m = tmp_path / "bad.yaml"
    m.write_text("families:\n  - match: 'fmha'\n    fixed: {hdim_q: '__import__(\"os\")'}\n")
    p = run("verify", real_kernel, "--model", m)
    assert p.returncode == 3 and "Traceback" not in p.stderr


@pytest.mark.parametrize("args,words", [
    (("--memory-gib", "inf"), ["--memory-gib"]),
    (("--memory-gib", "0"), ["--memory-gib"]),
    (("--arith", "float"), ["--arith"]),
    (("--check", "speed"), ["--check"]),
])
def test_bad_options_one_line(real_kernel, args, words):
    p = run("verify", real_kernel, "--buffer", "lse", "--layout", "sbhd", *args)
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert any(w in p.stderr for w in words)


def test_did_you_mean_for_names_and_keys(tmp_path, capsys):
    """From issue 40's minor items: a buffer or layout in the wrong case or one letter off, a
    layout key ``extend:`` or a stride ``haed:`` get the nearest name; a typo in a user's
    layouts file is named in that file (used or not); verify of a folder points to scan."""
    from addrsim.commands.cli import main
    from test_examples import MODEL, build
    co = str(build("lsed_abi_fix", tmp_path))
    assert main(["verify", co, "--model", MODEL, "--buffer", "LSE"]) == 3
    assert "did you mean 'lse'?" in capsys.readouterr().err
    assert main(["verify", co, "--model", MODEL, "--layout", "shbd"]) == 3
    assert "did you mean 'sbhd'?" in capsys.readouterr().err
    lay = tmp_path / "mine.yaml"
    for text, words in (("extend: bshd", "unknown key 'extend' (did you mean 'extends'?)"),
                        ("extends: bshd\n    q: {batch: '1', haed: '2', seq: '3'}", "unknown key 'haed' (did you mean 'head'?)"),
                        ("extends: bshdd", "extends unknown layout 'bshdd' (did you mean 'bshd'?)")):
        lay.write_text(f"layouts:\n  mine:\n    {text}\n")
        assert main(["verify", co, "--model", MODEL, "--layouts", str(lay), "--layout", "bhsd"]) == 3
        err = capsys.readouterr().err
        assert err.startswith(f"addrsim: {lay}:") and words in err and err.count("\n") == 1, err
    assert main(["verify", str(tmp_path), "--model", MODEL]) == 3
    assert "addrsim scan checks every code object below it" in capsys.readouterr().err


def test_a_run_that_only_prints_writes_no_obligations(tmp_path, monkeypatch, capsys):
    """Issue 40: addrsim-smt2/ is not written into the working directory unasked; the unknown's
    reason says how to ask for it."""
    from addrsim.commands.cli import main
    from test_examples import MODEL, build
    co = str(build("lsed_abi_fix", tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["verify", co, "--model", MODEL, "--buffer", "lse", "--layout", "sbhd", "--check", "address",
                 "--query-budget", "0.001", "--check-budget", "0.001", "--no-cache"])
    out = capsys.readouterr().out
    assert code == 2 and "--smt-dir DIR writes the obligation" in out
    assert not (tmp_path / "addrsim-smt2").exists()
