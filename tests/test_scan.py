"""addrsim scan: corpus inputs (directory, wheel), routing table, JSON/SARIF/JUnit outputs."""
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile

import pytest

ROUTES = ("dtype,hdim_q,hdim_v,mask,atomic32,pssk,pddv,mode,bf16_cvt,ts_qo,ts,knl_name,co_name\n"
          "bf16,128,128,0,0,0,0,0,0,16,192,ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE,bwd_hd128_bf16_a16_rtne.co\n")


def scan(*args):
    return subprocess.run([sys.executable, "-m", "addrsim", "scan", "--no-progress", *map(str, args)],
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, real_kernel):
    root = tmp_path_factory.mktemp("corpus")
    d = root / "hsa" / "gfx942" / "fmha_v3_bwd"
    d.mkdir(parents=True)
    shutil.copy(real_kernel, d / real_kernel.name)
    (d / "fmha_bwd_dqdkdv.csv").write_text(ROUTES)
    (d / "notes.co").write_text("not a code object\n")
    return root


@pytest.fixture(scope="module")
def scanned(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    p = scan(corpus, "--buffer", "lse", "--layout", "bhsd", "--layout", "sbhd", "--jobs", "2",
             "--json", out / "r.json", "--sarif", out / "r.sarif", "--junit", out / "r.xml", "--html", out / "r.html")
    return p, out


@pytest.mark.slow
def test_exit_code_and_summary(scanned):
    p, _ = scanned
    assert p.returncode == 1, p.stderr            # a reachable counterexample (lse/bhsd, the kernel's 32-bit wrap)
    # lse/sbhd is the kernel's shortcut bug, latent under the wheel's host (batch_stride_q >= stride_q)
    assert "bwd_hd128_bf16_a16_rtne.co" in p.stdout and "lse:CEX/CEX" in p.stdout
    assert "LATENT under aiter-0.1.7.post2.dev18" in p.stdout and "batch_stride_q >= stride_q" in p.stdout
    assert "2 counterexample (1 reachable, 1 latent)" in p.stdout
    assert "host limits" in p.stdout and "BAs (bhsd): nhead_q*seqlen_q >= 2**24" in p.stdout
    assert "routed from: dtype=bf16,hdim_q=128" in p.stdout
    assert "skipped 1 code object" in p.stdout and "notes.co" in p.stdout


def test_json_report_has_routes(scanned):
    doc = json.loads((scanned[1] / "r.json").read_text())
    (k,) = doc["kernels"]
    assert k["routes"] == [{"dtype": "bf16", "hdim_q": "128", "hdim_v": "128", "mask": "0", "atomic32": "0",
                            "pssk": "0", "pddv": "0", "mode": "0", "bf16_cvt": "0", "ts_qo": "16", "ts": "192"}]
    got = {(c["buffer"], c["layout"]): c["verdict"] for c in k["checks"]}
    assert got == {("lse", "bhsd"): "counterexample", ("lse", "sbhd"): "counterexample"}
    reach = {c["layout"]: c["routing"]["reachable"] for c in k["checks"]}
    assert reach == {"bhsd": True, "sbhd": False}
    assert k["host"] == "aiter-0.1.7.post2.dev18" and k["host_limits"]
    assert doc["skipped"][0]["file"].endswith("notes.co")


def test_sarif_one_result_per_root_cause(scanned):
    log = json.loads((scanned[1] / "r.sarif").read_text())
    assert log["version"] == "2.1.0"
    res = [r for r in log["runs"][0]["results"] if r["ruleId"] != "addrsim/host-cast"]
    # the reachable wrap is an error, the latent wrong formula a warning that says what masks it
    # in triage order (the formula's smallest shape needs less memory: issue 40)
    assert [(r["ruleId"], r["level"], r["properties"]["reach"]) for r in res] == [
        ("addrsim/formula", "warning", "latent"), ("addrsim/wrap", "error", "reachable")]
    res = res[::-1]
    assert res[0]["locations"][0]["physicalLocation"]["address"]["absoluteAddress"] == 0x2b54
    assert any("batch_stride_q >= stride_q" in m for m in res[1]["properties"]["masked_by"])
    notes = [r for r in log["runs"][0]["results"] if r["ruleId"] == "addrsim/host-cast"]
    assert notes and all(r["level"] == "note" for r in notes)
    assert res[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("bwd_hd128_bf16_a16_rtne.co")


def test_junit_one_case_per_kernel_buffer_layout(scanned):
    root = ET.parse(scanned[1] / "r.xml").getroot()
    cases = root.findall(".//testcase")
    assert sorted(c.get("name") for c in cases) == ["lse/bhsd", "lse/sbhd"]
    assert len(root.findall(".//failure")) == 2     # both are kernel counterexamples


@pytest.mark.slow
def test_wheel_input(tmp_path, real_kernel):
    whl = tmp_path / "amd_aiter-0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.write(real_kernel, "aiter_meta/hsa/gfx942/fmha_v3_bwd/" + real_kernel.name)
    p = scan(whl, "--buffer", "lse", "--layout", "sbhd", "--min-budget", "0", "--routed")
    assert p.returncode == 0, p.stdout + p.stderr       # routed: the host sends SBHD only with batch 1
    assert "1 proved" in p.stdout
    p = scan(whl, "--buffer", "lse", "--layout", "sbhd", "--min-budget", "0")
    assert p.returncode == 5, p.stdout + p.stderr       # the kernel's own verdict: a latent bug


@pytest.mark.parametrize("args,needle", [
    ((), "needs a directory"),
    (("/nonexistent/dir",), "no such file"),
    (("{kernel}", "--layout", "nope"), "unknown layout"),
    (("{kernel}", "--jobs", "0"), "--jobs"),
])
def test_bad_input_one_line(args, needle, real_kernel):
    p = scan(*[a.format(kernel=real_kernel) for a in args])
    assert p.returncode == 3
    assert needle in p.stderr and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


def _less_times(x):
    if isinstance(x, dict):
        return {k: _less_times(v) for k, v in x.items() if k not in ("time_s", "explore_s", "cached")}
    if isinstance(x, list):
        return [_less_times(v) for v in x]
    return x


@pytest.mark.slow
def test_a_rerun_reads_the_report_of_each_unchanged_kernel(corpus, tmp_path):
    """With a query cache, a second scan of the same code object with the same models and
    settings reads the kernel's whole report back (marked ``cached``; the same verdicts,
    shapes and coordinates) without exploring it; other settings (another layout) do not."""
    args = (corpus, "--buffer", "lse", "--layout", "bhsd", "--cache-dir", tmp_path / "cache")
    first = scan(*args, "--json", tmp_path / "1.json")
    second = scan(*args, "--json", tmp_path / "2.json")
    one, two = (json.loads((tmp_path / f"{i}.json").read_text()) for i in (1, 2))
    assert first.returncode == second.returncode
    assert not any(k.get("cached") for k in one["kernels"]) and all(k.get("cached") for k in two["kernels"])
    assert _less_times(one) == _less_times(two)
    assert "1 read from the query cache" in second.stdout and "read from the query cache" not in first.stdout
    scan(corpus, "--buffer", "lse", "--layout", "bshd", "--cache-dir", tmp_path / "cache", "--json", tmp_path / "3.json")
    assert not any(k.get("cached") for k in json.loads((tmp_path / "3.json").read_text())["kernels"])


@pytest.mark.slow
def test_html_page_of_the_scan(scanned):
    page = (scanned[1] / "r.html").read_text()
    assert "<table id='matrix'>" in page and "<script" not in page
    assert "Root cause 2: 32-bit wrap at 0x2b54: s_mul_i32 s62, s4, s53" in page     # after the SBHD formula (triage)
    assert "Root cause 1: offset wrong over the integers too (sbhd)" in page
    assert "nhead_q*seqlen_q*(batch - 1) &gt;= 2**24" in page and "<svg" in page


def test_a_worker_that_dies_costs_its_kernel_not_the_scan(tmp_path, monkeypatch):
    """--jobs 2 over two example kernels, one of which kills the worker checking it (as the
    out-of-memory killer did to a cold wheel scan, 2026-12-06: BrokenProcessPool, no report at
    all).  The other kernel's report is whole, the culprit's is an internal error naming its
    file, and the scan's status is 4 (internal error)."""
    import os
    import addrsim.commands.scan as S
    from addrsim.api import exit_status
    from addrsim.model.models import load_models
    from test_examples import MODEL, build
    d = tmp_path / "corpus"
    d.mkdir()
    good, bad = build("lsed_three_paths", d), build("lsed_bas_shortcut", d)
    real = S._scan_one
    monkeypatch.setattr(S, "_scan_one", lambda path, *a: os._exit(9) if str(path) == str(bad)
                        else real(path, *a))      # the workers are forked: they inherit it
    corpus = S.collect([str(d)], load_models([MODEL]))
    reps = dict(zip(corpus.files, S.scan(corpus, ["lse"], ["bhsd"], [MODEL], jobs=2)))
    assert reps[str(good)]["kernels"] and reps[str(good)]["kernels"][0]["checks"][0]["verdict"] == "proved"
    assert reps[str(bad)]["exit"] == 4 and str(bad) in reps[str(bad)]["error"] and "died" in reps[str(bad)]["error"]


def test_a_warm_wheel_scan_reads_each_report_back(tmp_path):
    """A wheel's members are extracted to a fresh temporary folder each run; the key of a
    kernel's stored report names the member (WHEEL!member), not that folder, so a second scan
    of the same wheel reads every report back without exploring (before 2026-12-06 the
    folder was in the key: a warm scan of the whole wheel explored and checked again)."""
    from test_examples import MODEL, build
    co = build("lsed_three_paths", tmp_path)
    whl = tmp_path / "amd_aiter-0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.write(co, "aiter_meta/hsa/gfx942/fmha_v3_bwd/" + co.name)
    runs = []
    for n in range(2):
        p = scan(whl, "--model", MODEL, "--buffer", "lse", "--layout", "bhsd", "--cache-dir", tmp_path / "cache",
                 "--json", tmp_path / f"r{n}.json")
        assert p.returncode in (0, 1), p.stdout + p.stderr
        runs.append(json.loads((tmp_path / f"r{n}.json").read_text())["kernels"])
    assert [k.get("cached", False) for k in runs[0]] == [False]
    assert [k.get("cached", False) for k in runs[1]] == [True]
    assert runs[1][0]["checks"][0]["verdict"] == runs[0][0]["checks"][0]["verdict"] == "proved"
