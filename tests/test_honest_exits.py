"""Exits that never lie or hang, and reports the cache cannot make stale (issue 36, items 4-6):
a closed pipe keeps the verdict's status, SIGINT exits 130 at once and leaves no partial
output, a FIFO is skipped, a zip bomb is refused before extraction, a kernel no family
models is refused, reordered --layouts files and a changed host evidence file miss the
report cache."""
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from addrsim.commands.scan import MAX_MEMBER, collect
from addrsim.model.models import load_models

from test_examples import MODEL, build

ROOT = Path(__file__).resolve().parent.parent
BOUNDS = ["--bound", "nhead_q=1:8", "--bound", "nhead_k=1:8", "--bound", "batch=1:16"]


def _addrsim(*argv, env=None, **kw):
    e = dict(os.environ, **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "addrsim", *map(str, argv)], env=e, **kw)


@pytest.fixture(scope="module")
def shortcut(tmp_path_factory):
    return build("lsed_bas_shortcut", tmp_path_factory.mktemp("ex"))


def test_a_closed_pipe_keeps_the_verdicts_exit_status(shortcut):
    """`verify K | true` under pipefail: the refutation's status 1, not 0."""
    argv = ["verify", shortcut, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--check", "address"]
    alone = _addrsim(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    alone.wait(timeout=300)
    assert alone.returncode == 1
    piped = _addrsim(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    piped.stdout.close()                       # the reader is gone before the first line
    err = piped.stderr.read().decode()
    assert piped.wait(timeout=300) == 1, err
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_sigint_exits_130_within_two_seconds_and_writes_nothing(real_kernel, tmp_path, jobs):
    """Inside the solvers (the README kernel's main job takes minutes): one line, 130, the
    workers gone, the old --json untouched."""
    out = tmp_path / "o.json"
    out.write_text("OLD")
    p = _addrsim("verify", real_kernel, "--no-cache", "--json", out, "--jobs", jobs,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    assert p.poll() is None, "finished before the interrupt: give it more work"
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    stdout, err = p.communicate(timeout=10)
    assert p.returncode == 130 and time.monotonic() - t < 2
    assert err.strip().splitlines() == ["addrsim: interrupted"]
    assert out.read_text() == "OLD"                      # the old output, never a truncated one
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".o.json")]


def test_an_ignored_sigint_stays_ignored(shortcut):
    """A background job (SIGINT ignored by the shell) is not made interruptible."""
    p = _addrsim("verify", shortcut, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--check", "address",
                 "--layout", "bhsd", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=300) in (0, 1, 5)


def test_a_fifo_in_a_scanned_folder_is_skipped(tmp_path, shortcut):
    d = tmp_path / "corpus"
    d.mkdir()
    os.mkfifo(d / "stuck.co")
    (d / "k.co").write_bytes(Path(shortcut).read_bytes())
    c = collect([str(d)], load_models([MODEL]))
    assert c.files == [str(d / "k.co")]
    assert (str(d / "stuck.co"), "not a regular file") in c.skipped


def test_a_fifo_given_as_the_kernel_is_bad_input(tmp_path):
    os.mkfifo(tmp_path / "k.co")
    for cmd in (["verify"], ["scan", "--no-progress"]):
        p = _addrsim(*cmd, tmp_path / "k.co", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 3 and "not a" in err and len(err.strip().splitlines()) == 1, err


def test_a_zip_bomb_is_refused_before_extraction(tmp_path):
    whl = tmp_path / "bomb-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("aiter_meta/hsa/gfx942/fmha_v3_bwd/big.co", "w", force_zip64=True) as fh:
            chunk = b"\0" * (1 << 20)
            for _ in range((MAX_MEMBER >> 20) + 1):
                fh.write(chunk)
    assert whl.stat().st_size < 1 << 20
    p = _addrsim("scan", "--no-progress", whl, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 3 and "refused" in err and "big.co" in err, err


def test_verify_refuses_a_kernel_no_family_models(tmp_path):
    """A kernel no family describes (an example under the built-in models alone): one line,
    exit 2, never free-argument verdicts."""
    co = build("lse_loop", tmp_path)
    p = _addrsim("verify", co, "--json", "-", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and out == ""
    assert err.count("\n") == 1 and "no kernel family" in err


# ----------------------------------------------------------------------------- report cache keys

LAY_A = "layouts:\n  mine:\n    extends: bhsd\n"
LAY_B = "layouts:\n  mine:\n    extends: sbhd\n"


def _scan_verdict(kernel, cache, *extra):
    p = _addrsim("scan", "--no-progress", kernel, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--layout", "mine",
                 "--cache-dir", cache, "--json", "-", *extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                 text=True, env={"ADDRSIM_NO_CACHE": ""})
    out, err = p.communicate(timeout=300)
    assert p.returncode in (0, 1, 5), err
    rep = json.loads(out)
    (c,) = rep["kernels"][0]["checks"]
    return c["verdict"], rep["kernels"][0].get("cached", False)


def test_reordered_layout_files_do_not_reuse_a_report(shortcut, tmp_path):
    """The later file's `mine` wins: [A, B] is SBHD (refuted), [B, A] is BHSD (proved)."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(LAY_A)
    b.write_text(LAY_B)
    cache = tmp_path / "cache"
    first = _scan_verdict(shortcut, cache, "--layouts", a, "--layouts", b)
    assert first == ("counterexample", False)
    assert _scan_verdict(shortcut, cache, "--layouts", a, "--layouts", b) == ("counterexample", True)
    assert _scan_verdict(shortcut, cache, "--layouts", b, "--layouts", a) == ("proved", False)


def test_a_host_evidence_file_beside_the_kernel_is_in_the_key(shortcut, tmp_path):
    d = tmp_path / "k"
    d.mkdir()
    k = d / "k.co"
    k.write_bytes(Path(shortcut).read_bytes())
    cache = tmp_path / "cache"
    lay = tmp_path / "a.yaml"
    lay.write_text(LAY_A)
    assert _scan_verdict(k, cache, "--layouts", lay)[1] is False
    assert _scan_verdict(k, cache, "--layouts", lay)[1] is True
    (d / "fmha_bwd_dqdkdv.csv").write_text("co_name\n")          # evidence of aiter e4048607's host
    assert _scan_verdict(k, cache, "--layouts", lay)[1] is False


# ----------------------------------------------------------------------------- item 7: decided

PDDV = ROOT.parent / "shared" / "aiter-e4048607" / "hsa" / "gfx942" / "fmha_v3_bwd" / "bwd_hd128_bf16_causal_a16_rtne_pddv.co"


def test_an_exact_polynomial_quotient_is_its_quotient():
    """(2*nhead_q*hdim_q) / hdim_q is 2*nhead_q: no division is left for the solver; a term
    the divisor does not divide, or a divisor of two terms, is left alone."""
    from addrsim.ir import poly as P
    a = P.mul(P.mul(P.atom("nhead_q"), P.atom("hdim_q")), P.const(2))
    assert P.exact_quotient(a, P.atom("hdim_q")) == P.scale(P.atom("nhead_q"), 2)
    assert P.exact_quotient(P.add(a, P.const(1)), P.atom("hdim_q")) is None
    assert P.exact_quotient(a, P.add(P.atom("hdim_q"), P.const(1))) is None
    assert P.exact_quotient(a, P.const(4)) is None


@pytest.mark.slow
@pytest.mark.skipif(not PDDV.exists(), reason="needs ../shared/aiter-e4048607")
def test_causal_a16_pddv_lse_sbhd_is_decided():
    """aiter e4048607's post-fix causal a16 pddv kernels: lse/sbhd was "Z3 and Bitwuzla gave
    up within 3 Mru" (a division by the head dim, a shape variable under pddv); proved now,
    at the scan's budgets."""
    from addrsim.api import verify
    from addrsim.commands.scan import SCAN_CHECK_MRU, SCAN_MIN_MRU, SCAN_QUERY_MRU
    rep = verify(PDDV, ["lse"], ["sbhd"], properties=["address"], query_mru=SCAN_QUERY_MRU,
                 check_mru=SCAN_CHECK_MRU, min_mru=SCAN_MIN_MRU, cache={})
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "proved" and c["witness"] is not None


# ----------------------------------------------------------------------------- outputs whole, devices kept

def test_atomic_open_keeps_links_modes_and_devices(tmp_path):
    """From a breaker's run: `--json /dev/stdout` once replaced the /dev/stdout link with a file."""
    from addrsim.files import atomic_open
    target = tmp_path / "report.json"
    target.write_text("OLD")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with atomic_open(link, "w") as fh:
        fh.write("NEW")
    assert link.is_symlink() and target.read_text() == "NEW" and (target.stat().st_mode & 0o777) == 0o640
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as fh:
            fh.write("HALF")
            raise RuntimeError("killed")
    assert target.read_text() == "NEW" and not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    for dev in [d for d in ("/dev/null", "/dev/stdout") if os.path.lexists(d)]:
        before = os.lstat(dev).st_mode
        with atomic_open(dev, "w") as fh:
            fh.write("")
        assert os.lstat(dev).st_mode == before


@pytest.mark.skipif(not os.path.islink("/dev/stdout"), reason="no /dev/stdout link on this machine")
def test_json_to_dev_stdout_reaches_stdout(shortcut, tmp_path):
    out = tmp_path / "out"
    with open(out, "w") as fh:
        p = _addrsim("verify", shortcut, "--model", MODEL, *BOUNDS, "--buffer", "lse", "--check", "address",
                     "--layout", "bhsd", "--json", "/dev/stdout", stdout=fh, stderr=subprocess.PIPE)
        p.wait(timeout=300)
    assert p.returncode == 0 and os.path.islink("/dev/stdout")
    assert '"tool": "addrsim"' in out.read_text()


def test_the_exact_quotient_rule_still_refutes_a_wrong_claim():
    """The rewrite of udiv(2*nhead_q*hdim_q, hdim_q) must decide, not assume: the right
    quotient is proved, a quotient off by one (or by the wrong factor) is refuted with a model
    that violates it."""
    from addrsim.ir import expr as X
    from addrsim.ir.expr import Const, Sym
    from addrsim.prove.query import solve
    n, h = Sym("nhead_q", 32, "shape"), Sym("hdim_q", 32, "shape")
    ranges = {"nhead_q": (1, 256), "hdim_q": (72, 120)}
    q = X.udiv(X.mul(X.mul(n, h), Const(2, 32)), h)
    conds = [X.ule(Const(1, 32), n), X.ule(Const(72, 32), h)]
    assert solve(conds, X.eq(q, X.mul(n, Const(2, 32))), ranges, 10**7)[0] == "proved"
    for wrong in (X.add(X.mul(n, Const(2, 32)), Const(1, 32)), n):
        v, model, _, _ = solve(conds, X.eq(q, wrong), ranges, 10**7)
        assert v == "refuted"
        assert X.evaluate(X.eq(q, wrong), {"nhead_q": model["nhead_q"], "hdim_q": model["hdim_q"]}) == 0
