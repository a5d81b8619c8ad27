"""`--html FILE` (addrsim.report.html): one self-contained page per run, loaded in headless
Chromium (Debian's chromium package).

Specification: the page has no script and no external resource; it loads with no console
error and shows the kernels x buffers x layouts matrix coloured by verdict, each root cause
with its boundary drawn in the (nhead_q, seqlen_q) plane, and the LSE rows per slice; a
formula with a name outside the shape variables is never evaluated.
"""
import re
import shutil
import subprocess

import pytest

from addrsim.report.html import _reader, to_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
SHAPE = {"batch": 3, "nhead_q": 8, "nhead_k": 1, "seqlen_q": 1048576, "seqlen_k": 1048576, "hdim_q": 128,
         "hdim_v": 128}


def _report():
    site = {"kind": "instruction", "pc": 0x2b54, "instruction": "s_mul_i32 s62, s4, s53", "argument": "",
            "width": 32, "machine": 0, "exact": 1 << 32, "matters": True, "formula": "256*batch_id*nhead_q*seqlen_q",
            "boundary": "batch_id*nhead_q*seqlen_q >= 2**24",
            "shape_boundary": "nhead_q*seqlen_q*(batch - 1) >= 2**24", "text": "s_mul_i32 s62, s4, s53 at 0x2b54"}
    cex = {"shape": SHAPE, "coords": {"batch_id": 2, "head_id": 0}, "lane": 0, "access_pc": 0x3eb0, "minimal": True,
           "address": {"extracted": 0, "expected": 67108864}, "memory_bytes": 40466644992}
    small = dict(SHAPE, batch=2, nhead_q=1, seqlen_q=64, seqlen_k=64)
    checks = [
        {"buffer": "lse", "layout": "bhsd", "property": "address", "verdict": "counterexample", "cause": "overflow",
         "overflow": [site], "counterexample": cex, "reason": "", "routing": {"reachable": True},
         "extracted_shape": "4*seqlen_q*(batch_id*nhead_q + head_id)"},
        {"buffer": "lse", "layout": "sbhd", "property": "address", "verdict": "counterexample", "cause": "formula",
         "overflow": [], "counterexample": dict(cex, shape=small), "reason": "", "routing": {"reachable": False},
         "difference": "-4*batch_id*nhead_q*seqlen_q + 4*batch_id*nhead_q",
         "extracted_shape": "4*(batch_id*nhead_q + head_id*seqlen_q)",
         "domain": {"assumptions": [{"layer": "grid", "text": "batch_id < batch", "source": "m"},
                                    {"layer": "grid", "text": "head_id < nhead_q", "source": "m"}]}},
        {"buffer": "k", "layout": "bshd", "property": "bounds", "verdict": "unknown",
         "reason": "check budget of 60 Mru spent <before> every access was decided"},
        {"buffer": "q", "layout": "bhsd", "property": "address", "verdict": "proved", "reason": None},
    ]
    k = {"file": "/x/gfx942/bwd_hd128_bf16_a16_rtne.co", "kernel": "_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE",
         "arch": "gfx942", "host": "aiter-0.1.7.post2.dev18", "checks": checks, "host_limits": [],
         "memory": {"bytes": "512*batch*nhead_k*seqlen_k + 512*batch*nhead_q*seqlen_k + 1032*batch*nhead_q*seqlen_q",
                    "limit": 206158430208}}
    return {"tool": "addrsim", "version": "0.1.0", "kernels": [k]}


def test_page_is_self_contained_and_has_the_matrix_causes_and_rows():
    page = to_html(_report())
    assert "<script" not in page and not re.search(r"(src|href)=['\"]?(https?:)?//", page)
    assert "<table id='matrix'>" in page
    assert "title='unknown: check budget of 60 Mru spent &lt;before&gt; every access was decided'" in page
    assert page.count("<div class='cause'") == 2
    assert page.count("<svg") == 4       # two boundary planes (wrap; formula: batch >= 2 and seqlen_q >= 2), two LSE rows
    assert "boundary (sbhd): batch &gt;= 2 and seqlen_q &gt;= 2" in page
    assert "title='proved: every shape of the domain" in page
    assert "fill='#e53935'" in page and "fill='#ddd'" in page      # breaks, and past device memory


def test_formulas_with_other_names_are_never_evaluated():
    assert _reader("nhead_q*seqlen_q", ("nhead_q", "seqlen_q"))(nhead_q=2, seqlen_q=3) == 6
    assert _reader("__import__('os').system('true')", ("nhead_q",)) is None
    assert _reader("batch_id*nhead_q", ("nhead_q",)) is None          # an id left in: not a shape boundary
    assert _reader("nhead_q; 1", ("nhead_q",)) is None


def _load(path, tmp_path):
    p = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                        path.as_uri()], capture_output=True, text=True, timeout=120)
    errors = [l for l in p.stderr.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "rror" in l)]
    return p.stdout, errors


@needs_chromium
def test_page_loads_in_headless_chromium_without_console_errors(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(to_html(_report()))
    dom, errors = _load(page, tmp_path)
    assert errors == []
    assert '<table id="matrix">' in dom and ">CEX<" in dom and "Root cause 2" in dom
    bad = tmp_path / "bad.html"                  # the check sees a console error when there is one
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>throw new Error('boom')</script></body></html>")
    _, errors = _load(bad, tmp_path)
    assert errors and "boom" in errors[0]


def test_lse_rows_come_from_the_kernels_own_offsets_when_the_report_has_them():
    """The README kernel's SBHD LSE slices at batch 2, nhead_q 2, seqlen_q 64 (``rows_read``,
    hardware arithmetic): batch 1 reads 8 bytes in (row 2) instead of row 128: red bars."""
    rep = _report()
    sbhd = rep["kernels"][0]["checks"][1]
    shape = dict(SHAPE, batch=2, nhead_q=2, nhead_k=2, seqlen_q=64, seqlen_k=64)
    sbhd["rows_read"] = {"shape": shape, "slices": [[0, 0, 0, True], [0, 1, 256, True], [1, 0, 8, True],
                                                    [1, 1, 264, True]]}
    sbhd["extracted_shape"] = "this is never read"
    page = to_html(rep)
    assert "from the kernel&#x27;s address arithmetic" in page
    assert "<title>rows 2..65</title>" in page and "<title>rows 66..129</title>" in page
    assert "<title>rows 64..127</title>" in page          # b0 h1: right


def test_verify_reports_the_rows_each_lse_slice_reads(tmp_path):
    """examples/lsed_bas_shortcut.s (the BAs shortcut): BHSD slices read rows (b*2 + h)*64;
    SBHD's batch term is BAs (Hdim-strided), not nhead_q*seqlen_q rows."""
    from addrsim.api import verify
    from test_examples import MODEL, build
    rep = verify(build("lsed_bas_shortcut", tmp_path), buffers=["lse"], model_files=[MODEL],
                 layouts=["bhsd", "sbhd"], properties=["address"])
    rows = {c["layout"]: c["rows_read"] for c in rep["kernels"][0]["checks"]}
    shape = rows["bhsd"]["shape"]
    assert (shape["batch"], shape["nhead_q"]) == (2, 2)
    S = shape["seqlen_q"]
    assert [(b, h, off) for b, h, off, _ in rows["bhsd"]["slices"]] == \
        [(b, h, 4 * (b * 2 + h) * S) for b in range(2) for h in range(2)]
    assert any(off != 4 * (b * 2 + h) * S for b, h, off, _ in rows["sbhd"]["slices"])
