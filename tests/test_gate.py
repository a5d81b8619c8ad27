"""The CI gate (addrsim.report.gate): findings against a baseline report and accepted findings,
and their marks in SARIF and JUnit, on hand-made reports; then `scan --baseline --accepted` on
the real kernel.

Specification: a finding is named without file path, instruction address or shape; against a
baseline it is new or unchanged, and the baseline's findings not found again are gone; the
gate fails (exit 1 for a counterexample, 2 for an undecided check) only on findings that are
new and not accepted; an accepted entry needs a reason, may expire, and one that matches
nothing is stale; bad files are one line naming the file (InputError), never evaluated.
"""
import copy
import datetime
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from addrsim.errors import InputError
from addrsim.report.formats import to_junit, to_sarif
from addrsim.report.gate import fingerprint, gate, gate_status, gate_text, load_accepted, load_baseline

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
SHAPE = {"batch": 2, "nhead_q": 9, "nhead_k": 1, "seqlen_q": 64, "seqlen_k": 64, "hdim_q": 128, "hdim_v": 128}
TODAY = datetime.date(2026, 12, 3)


def _cex(buffer, layout, cause="overflow", pc=0x2b54):
    site = {"kind": "instruction", "pc": pc, "instruction": "s_mul_i32 s62, s4, s53", "argument": "", "width": 32,
            "machine": 0, "exact": 1 << 32, "matters": True, "formula": "", "boundary": "b >= 2**24",
            "shape_boundary": "", "text": ""}
    return {"buffer": buffer, "layout": layout, "property": "address", "verdict": "counterexample", "cause": cause,
            "overflow": [site] if cause == "overflow" else [], "reason": "", "time_s": 1.0, "extracted": "",
            "expected": "", "difference": "",
            "counterexample": {"shape": dict(SHAPE), "coords": {"batch_id": 1, "head_id": 0}, "lane": 0,
                               "access_pc": 0x3eb0, "address": {"extracted": 0, "expected": 1}, "minimal": True},
            "routing": {"host": "h", "reachable": True}}


def _kernel(checks, file="/somewhere/gfx942/bwd_hd128_bf16_a16_rtne.co"):
    return {"file": file, "kernel": "_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE", "arch": "gfx942", "checks": checks,
            "host_limits": []}


def _unknown(buffer, layout):
    return {"buffer": buffer, "layout": layout, "property": "bounds", "verdict": "unknown",
            "reason": "check budget spent", "time_s": 1.0, "counterexample": None}


def _proved(buffer, layout):
    return {"buffer": buffer, "layout": layout, "property": "address", "verdict": "proved", "reason": None,
            "time_s": 1.0, "counterexample": None}


def test_fingerprint_names_the_check_not_the_path_pc_or_shape():
    a = _kernel([_cex("lse", "bhsd")])
    b = _kernel([_cex("lse", "bhsd", pc=0x2b60)], file="/elsewhere/bwd_hd128_bf16_a16_rtne.co")
    b["checks"][0]["counterexample"]["shape"]["batch"] = 3
    assert fingerprint(a, a["checks"][0]) == fingerprint(b, b["checks"][0]) == \
        "gfx942/bwd_hd128_bf16_a16_rtne.co:_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE:lse/bhsd:address:counterexample:overflow"
    c = _kernel([_cex("lse", "bhsd")], file="/x/copy_of_it.co")    # another code object, the same symbol
    assert fingerprint(c, c["checks"][0]) != fingerprint(a, a["checks"][0])
    assert fingerprint(a, _unknown("k", "bshd")).endswith(":k/bshd:bounds:unknown")


def test_baseline_splits_new_unchanged_and_gone_and_fails_only_on_new():
    old = _kernel([_cex("lse", "bhsd"), _cex("d", "bhsd"), _proved("q", "bhsd")])
    new = _kernel([_cex("lse", "bhsd"), _cex("lse", "sbhd", cause="formula"), _proved("q", "bhsd"),
                   _proved("d", "bhsd")])
    base = {fingerprint(old, c): c["verdict"] for c in old["checks"] if c["verdict"] != "proved"}
    g = gate([new], base, [], TODAY)
    assert [fp.split(":")[2] for fp in g["unchanged"]] == ["lse/bhsd"]
    assert [fp.split(":")[2] for fp in g["new"]] == ["lse/sbhd"] == [fp.split(":")[2] for fp in g["failing"]]
    assert [fp.split(":")[2] for fp in g["gone"]] == ["d/bhsd"]
    assert new["checks"][1]["baseline"] == "new" and new["checks"][0]["baseline"] == "unchanged"
    assert gate_status(g, [new]) == 1
    assert gate_status(gate([old], base, [], TODAY), [old]) == 0      # nothing new: passes
    text = "\n".join(gate_text(g))
    assert "1 failing (new and not accepted) of 2 finding(s): 1 new, 1 unchanged, 0 of them accepted; " \
           "1 gone since the baseline" in text and "FAILING " in text
    plain = "\n".join(gate_text(gate([new], None, [], TODAY)))        # no baseline: new/unchanged say nothing
    assert "gate (no baseline: every finding counts): 2 failing (not accepted) of 2 finding(s), 0 accepted" in plain


def test_baseline_findings_of_checks_not_made_are_not_gone():
    """A baseline from `verify` (address and bounds) read by an address-only scan: its bounds
    findings were not looked for, so they are "unchecked", not "gone"; a fixed one is gone."""
    old = _kernel([_cex("lse", "bhsd"), _unknown("k", "bshd"), _cex("d", "bhsd")])
    new = _kernel([_cex("lse", "bhsd"), _proved("d", "bhsd")])
    base = {fingerprint(old, c): c["verdict"] for c in old["checks"]}
    g = gate([new], base, [], TODAY)
    assert [fp.split(":")[2] for fp in g["gone"]] == ["d/bhsd"]
    assert [fp.split(":")[2:4] for fp in g["unchecked"]] == [["k/bshd", "bounds"]]
    assert "1 baseline finding(s) of checks this run did not make (not gone)" in "\n".join(gate_text(g))


def test_a_new_undecided_check_fails_with_status_2():
    k = _kernel([_unknown("k", "bshd")])
    g = gate([k], {}, [], TODAY)
    assert gate_status(g, [k]) == 2


def _accepted(tmp_path, text):
    f = tmp_path / "accepted.yaml"
    f.write_text(text)
    return load_accepted(str(f))


def test_accepted_findings_are_marked_and_never_fail(tmp_path):
    acc = _accepted(tmp_path, """accepted:
  - kernel: "gfx942/bwd_hd128_*_a16_*"
    buffer: lse
    layout: sbhd
    reason: latent under the wheel's host (SBHD only with batch 1)
    expires: 2027-06-30
  - kernel: "_ZN5aiter*"
    cause: overflow
    reason: tracked upstream
  - kernel: "gfx950/*"
    reason: nothing of gfx950 here
""")
    k = _kernel([_cex("lse", "bhsd"), _cex("lse", "sbhd", cause="formula"), _unknown("k", "bshd")])
    g = gate([k], None, acc, TODAY)
    assert k["checks"][0]["accepted"] == {"reason": "tracked upstream", "entry": 2}
    assert k["checks"][1]["accepted"]["entry"] == 1
    assert [fp.split(":")[2] for fp in g["failing"]] == ["k/bshd"]       # no entry accepts it
    assert gate_status(g, [k]) == 2
    assert [e["entry"] for e in g["stale"]] == [3]
    assert "stale accepted entry 3 (gfx950/*): matches no finding" in "\n".join(gate_text(g))


def test_an_expired_entry_accepts_nothing_and_is_reported(tmp_path):
    acc = _accepted(tmp_path, "accepted:\n  - kernel: '*'\n    reason: until the fix lands\n    expires: 2026-12-01\n")
    k = _kernel([_cex("lse", "bhsd")])
    g = gate([k], None, acc, TODAY)
    assert "accepted" not in k["checks"][0] and len(g["failing"]) == 1
    assert g["expired"] == [{"entry": 1, "kernel": "*", "reason": "until the fix lands", "expires": "2026-12-01"}]
    assert g["stale"] == []


@pytest.mark.parametrize("text,words", [
    ("accepted:\n  - kernel: '*'\n", "accepted entry 1: reason is required"),
    ("accepted:\n  - kernel: '*'\n    reason: '  '\n", "accepted entry 1: reason is required"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    buffre: lse\n", "unknown key 'buffre'"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: next week\n", "expires must be a date YYYY-MM-DD"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    layout: [sbhd]\n", "layout must be a string"),
    ("- kernel: '*'\n", "expected one key, accepted"),
    ("accepted: [\n", "not YAML"),
    ("accepted: !!python/object/apply:os.system ['true']\n", "not YAML"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: 2026-13-40\n", "not YAML"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: 2099-01-01 10:00:00\n", "expires must be a date"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: 20990101\n", "expires must be a date"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: 2099-W01-1\n", "expires must be a date"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: " + "9" * 5000 + "\n", "not YAML"),
    ("accepted: " + "[" * 50000 + "]" * 50000 + "\n", "not YAML"),
    ("accepted:\n  - kernel: nomatch\n    kernel: '*'\n    reason: r\n", "given twice"),
    ("accepted: []\naccepted: []\n", "given twice"),
    ("a: &x [1, 2]\naccepted: *x\n", "aliases are not allowed"),
    ("accepted:\n  - kernel: '*'\n    reason: r\n    expires: [&a [lol, lol], &b [*a, *a]]\n", "aliases"),
])
def test_bad_accepted_files_are_one_line_naming_the_file(tmp_path, text, words):
    f = tmp_path / "acc.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_accepted(str(f))
    assert words in str(e.value) and str(f) in str(e.value) and len(str(e.value)) < 400 and "\n" not in str(e.value)


@pytest.mark.parametrize("data", [b"reason: caf\xe9\n", b"\xff\xfe" + "accepted: []".encode("utf-16-le")])
def test_accepted_files_that_are_not_utf8_or_not_regular_are_refused(tmp_path, data):
    f = tmp_path / "acc.yaml"
    f.write_bytes(data)
    with pytest.raises(InputError, match="not UTF-8"):
        load_accepted(str(f))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)                           # would block a reader forever
    with pytest.raises(InputError, match="not a regular file"):
        load_accepted(str(fifo))
    with pytest.raises(InputError, match="not a regular file"):
        load_baseline(str(fifo))


def test_every_entry_that_matches_is_in_use_and_output_cannot_be_forged(tmp_path):
    acc = _accepted(tmp_path, "accepted:\n  - kernel: '*'\n    reason: first\n  - kernel: '*'\n    reason: second\n"
                              "  - kernel: \"none\\nFAKE LINE\"\n    reason: \"r\\x1b[31m\"\n")
    k = _kernel([_cex("lse", "bhsd")])
    g = gate([k], None, acc, TODAY)
    assert k["checks"][0]["accepted"]["entry"] == 1 and [e["entry"] for e in g["stale"]] == [3]
    text = "\n".join(gate_text(g))
    assert "\nFAKE LINE" not in text and "\x1b" not in text and "none\\nFAKE LINE" in text


K = '"file": "k.co", "arch": "gfx942", "kernel": "_Zk",'


@pytest.mark.parametrize("text,words", [("{", "not JSON"), ('{"tool": "other"}', "not an addrsim --json report"),
                                        ("[1, 2]", "not an addrsim --json report"),
                                        ('{"tool": "addrsim", "kernels": [{%s "checks": [{"buffer": "lse", '
                                         '"layout": "sbhd", "verdict": 5}]}]}' % K, "a known verdict"),
                                        ('{"tool": "addrsim", "kernels": [{%s "checks": [{"buffer": "lse", '
                                         '"layout": "sbhd", "verdict": [1]}]}]}' % K, "a known verdict"),
                                        ('{"tool": "addrsim", "kernels": [{%s "checks": [{"buffer": "lse", '
                                         '"layout": "sbhd", "verdict": "counterexample", "cause": {}}]}]}' % K,
                                         "a known verdict"),
                                        ('{"tool": "addrsim", "kernels": [{%s "checks": [{"buffer": null, '
                                         '"layout": "sbhd", "verdict": "proved"}]}]}' % K, "a string buffer"),
                                        ('{"tool": "addrsim", "kernels": [{"arch": "gfx942", "kernel": 5, '
                                         '"file": "k.co", "checks": []}]}', "a string file, arch and kernel"),
                                        ('{"tool": "addrsim", "kernels": [{"arch": "gfx942", "kernel": "_Zk", '
                                         '"checks": []}]}', "a string file, arch and kernel")])
def test_bad_baselines_are_one_line_naming_the_file(tmp_path, text, words):
    f = tmp_path / "old.json"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_baseline(str(f))
    assert words in str(e.value) and str(f) in str(e.value)
    with pytest.raises(InputError, match="cannot read"):
        load_baseline(str(tmp_path / "missing.json"))


def test_sarif_carries_baseline_state_absent_results_and_suppressions(tmp_path):
    old = _kernel([_cex("lse", "bhsd"), _cex("d", "sbhd", cause="formula")])
    new = _kernel([_cex("lse", "bhsd"), _cex("dq", "bhsd", pc=0x2c84), _unknown("k", "bshd"), _proved("d", "sbhd")])
    base = {fingerprint(old, c): c["verdict"] for c in old["checks"]}
    acc = _accepted(tmp_path, "accepted:\n  - kernel: '*'\n    buffer: dq\n    reason: fix in review\n")
    g = gate([new], base, acc, TODAY)
    log = to_sarif([{"kernels": [new]}], "0.1.0", gate=g)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)
    res = log["runs"][0]["results"]
    states = [(r["ruleId"], r.get("baselineState")) for r in res]
    assert states == [("addrsim/wrap", "unchanged"), ("addrsim/wrap", "new"), ("addrsim/undecided", "new"),
                      ("addrsim/formula", "absent")]
    assert res[1]["suppressions"] == [{"kind": "external", "status": "accepted", "justification": "fix in review"}]
    assert "suppressions" not in res[0]
    assert "d/sbhd" in res[3]["message"]["text"]


def test_junit_shows_an_accepted_finding_as_skipped(tmp_path):
    acc = _accepted(tmp_path, "accepted:\n  - kernel: '*'\n    buffer: lse\n    reason: tracked\n")
    k = _kernel([_cex("lse", "bhsd"), _cex("d", "bhsd")])
    gate([k], None, acc, TODAY)
    root = ET.fromstring(to_junit([{"kernels": [k]}]))
    assert root.find(".//testcase[@name='lse/bhsd']/skipped").get("message") == \
        "accepted counterexample (entry 1): tracked"
    assert root.find(".//testcase[@name='d/bhsd']/failure") is not None


# ---------------------------------------------------------------------------- the command

@pytest.mark.slow
def test_scan_with_a_baseline_fails_only_on_what_is_new(real_kernel, tmp_path):
    """The README kernel's LSE in BHSD and SBHD: against a baseline without the SBHD finding the
    gate fails on it alone (exit 1); accepting it with a reason passes (exit 0), and an entry
    for another kernel is stale."""
    d = tmp_path / "k"
    d.mkdir()
    shutil.copy(real_kernel, d / real_kernel.name)
    run = lambda *a: subprocess.run([sys.executable, "-m", "addrsim", "scan", "--no-progress", str(d),  # noqa: E731
                                     "--buffer", "lse", "--layout", "bhsd", "--layout", "sbhd",
                                     "--cache-dir", str(tmp_path / "cache"), *map(str, a)],
                                    capture_output=True, text=True)
    first = run("--json", tmp_path / "all.json")
    assert first.returncode == 1, first.stderr
    doc = json.loads((tmp_path / "all.json").read_text())
    old = copy.deepcopy(doc)
    old["kernels"][0]["checks"] = [c for c in old["kernels"][0]["checks"] if c["layout"] != "sbhd"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    p = run("--baseline", tmp_path / "old.json", "--sarif", tmp_path / "g.sarif")
    assert p.returncode == 1, p.stderr
    assert "gate: 1 failing (new and not accepted) of 2 finding(s): 1 new, 1 unchanged" in p.stdout
    assert "FAILING gfx942/bwd_hd128_bf16_a16_rtne.co:_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE:lse/sbhd:address:counterexample:formula" in p.stdout
    assert "NEW since the baseline: lse/sbhd" in p.stdout
    states = {r["ruleId"]: r.get("baselineState") for r in json.loads((tmp_path / "g.sarif").read_text())
              ["runs"][0]["results"] if r["ruleId"] != "addrsim/host-cast"}
    assert states == {"addrsim/wrap": "unchanged", "addrsim/formula": "new"}
    (tmp_path / "acc.yaml").write_text("accepted:\n  - kernel: 'gfx942/bwd_hd128_bf16_a16_rtne.co'\n"
                                       "    layout: sbhd\n    reason: latent under the wheel's host\n"
                                       "  - kernel: 'gfx950/*'\n    reason: old entry\n")
    p = run("--baseline", tmp_path / "old.json", "--accepted", tmp_path / "acc.yaml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gate: 0 failing" in p.stdout and "accepted (entry 1: latent under the wheel's host): lse/sbhd" in p.stdout
    assert "stale accepted entry 2 (gfx950/*)" in p.stdout
    bad = run("--accepted", tmp_path / "old.json")
    assert bad.returncode == 3 and bad.stderr.count("\n") == 1 and str(tmp_path / "old.json") in bad.stderr


def test_sarif_splits_a_root_cause_whose_findings_are_only_partly_accepted(tmp_path):
    """Accepting lse/sbhd alone (README's example entry) must not leave d/sbhd, which shares
    the formula root cause, unsuppressed and unseen, nor suppress it."""
    k = _kernel([_cex("lse", "sbhd", cause="formula"), _cex("d", "sbhd", cause="formula")])
    k["checks"][0]["counterexample"]["shape"]["batch"] = 1          # lse/sbhd is the smaller
    acc = _accepted(tmp_path, "accepted:\n  - kernel: '*'\n    buffer: lse\n    layout: sbhd\n    reason: latent\n")
    g = gate([k], None, acc, TODAY)
    res = to_sarif([{"kernels": [k]}], "0.1.0", gate=g)["runs"][0]["results"]
    assert [(r["properties"]["checks"], "suppressions" in r) for r in res] == [(["d/sbhd"], False),
                                                                              (["lse/sbhd"], True)]
    assert [r["properties"]["smallest"]["check"] for r in res] == ["d/sbhd", "lse/sbhd"]
    assert "(lse/sbhd)" not in res[0]["message"]["text"]


def test_junit_fails_exactly_what_the_gate_fails(tmp_path):
    """Issue 40: with a baseline, unchanged findings pass the gate, so JUnit marks them skipped
    with the reason (accepted ones too); its failures + errors equal the gate's failing count."""
    acc = _accepted(tmp_path, "accepted:\n  - kernel: '*'\n    buffer: dq\n    reason: tracked\n")
    old = _kernel([_cex("lse", "bhsd"), _unknown("k", "bshd"), _cex("d", "bhsd")])
    new = _kernel([_cex("lse", "bhsd"), _unknown("k", "bshd"), _cex("d", "sbhd", cause="formula"),
                   _unknown("v", "bshd"), _cex("dq", "bhsd"), _proved("q", "bhsd")])
    base = {fingerprint(old, c): c["verdict"] for c in old["checks"]}
    g = gate([new], base, acc, TODAY)
    root = ET.fromstring(to_junit([{"kernels": [new]}]))
    assert int(root.get("failures")) + int(root.get("errors")) == len(g["failing"]) == 2
    assert root.find(".//testcase[@name='lse/bhsd']/skipped").get("message") == \
        "unchanged since the baseline: counterexample (overflow)"
    assert root.find(".//testcase[@name='dq/bhsd']/skipped").get("message").startswith("accepted counterexample")
    assert root.find(".//testcase[@name='d/sbhd']/failure") is not None
    assert gate_status(g, [new]) == 1


def test_a_listing_of_a_kernel_is_gated_as_that_kernel():
    """Issue 40: a listing checked with --like K.co carries K's name, so its findings meet K's
    baseline: the one the patch fixes is gone, the other unchanged, nothing new (exit 0)."""
    k = _kernel([_cex("lse", "sbhd", cause="formula"), _cex("lse", "bhsd")])
    base = {fingerprint(k, c): c["verdict"] for c in k["checks"]}
    patched = _kernel([_proved("lse", "sbhd"), _cex("lse", "bhsd")], file="/tmp/work/bwd_fix.s")
    patched.update(source="listing", like="/somewhere/gfx942/bwd_hd128_bf16_a16_rtne.co")
    g = gate([patched], base, [], TODAY)
    assert (len(g["new"]), len(g["unchanged"]), len(g["gone"])) == (0, 1, 1)
    assert gate_status(g, [patched]) == 0


def test_a_patch_that_keeps_a_check_failing_another_way_is_shown_and_fails_when_worse(tmp_path):
    """Issue 40 (two fresh-user trials): a wrong patch that leaves lse/sbhd failing with the
    same cause (formula) but another offset is another bug under the same name: counted new,
    the gate fails (exit 1).  A smallest shape that moved up (both proven minimal) is shown,
    unchanged; one that moved below the baseline's proven-minimal counterexample fails where
    the baseline held: new.  A shape moved by a minimisation budget (not minimal) says nothing."""
    k = _kernel([_cex("lse", "sbhd", cause="formula"), _cex("lse", "bhsd"), _cex("d", "bhsd", pc=0x2c00),
                 _cex("dq", "bhsd", pc=0x2d00)])
    k["checks"][0]["difference_shape"] = "-4*batch_id*nhead_q*(seqlen_q - 1)"
    path = tmp_path / "base.json"
    path.write_text(json.dumps({"tool": "addrsim", "kernels": [k]}))
    base = load_baseline(str(path))
    wrong = copy.deepcopy(k)
    wrong["checks"][0]["difference_shape"] = "4*batch_id*nhead_q*(256 - seqlen_q)"
    wrong["checks"][1]["counterexample"]["shape"]["batch"] = 3                        # up: minimal on both sides
    wrong["checks"][2]["counterexample"].update(minimal=False, shape=dict(SHAPE, batch=7))   # not minimal now
    wrong["checks"][3]["counterexample"]["shape"]["batch"] = 1                        # below the baseline's least
    g = gate([wrong], base, [], TODAY)
    assert sorted(fp.split(":")[2] for fp in g["failing"]) == ["dq/bhsd", "lse/sbhd"] and gate_status(g, [wrong]) == 1
    assert sorted(fp.split(":")[2] for fp in g["unchanged"]) == ["d/bhsd", "lse/bhsd"]
    how = {fp.split(":")[2]: h for fp, h in g["changed"]}
    assert how["lse/sbhd"] == ("extracted - expected was -4*batch_id*nhead_q*(seqlen_q - 1), now "
                               "4*batch_id*nhead_q*(256 - seqlen_q)")
    assert how["lse/bhsd"].startswith("smallest shape was batch=2 ") and "now batch=3 " in how["lse/bhsd"]
    assert set(how) == {"lse/sbhd", "lse/bhsd", "dq/bhsd"}
    text = "\n".join(gate_text(g))
    assert "2 new (2 of them failing another way under a baseline finding's name), 2 unchanged (1 of them failing another way, not worse)" in text
    assert "counted new" in text and "not worse: unchanged" in text
    root = ET.fromstring(to_junit([{"kernels": [wrong]}]))
    assert "fails another way: smallest shape was" in root.find(".//testcase[@name='lse/bhsd']/skipped").get("message")
    assert int(root.get("failures")) == 2
    sarif = to_sarif([{"kernels": [wrong]}], "0.1.0", gate=g)
    states = {r["properties"]["checks"][0]: r.get("baselineState") for r in sarif["runs"][0]["results"]}
    assert states == {"lse/sbhd": "new", "lse/bhsd": "updated", "d/bhsd": "unchanged", "dq/bhsd": "new"}
    same = gate([copy.deepcopy(k)], base, [], TODAY)                      # the unpatched kernel: nothing changed
    assert same["changed"] == [] and len(same["unchanged"]) == 4 and gate_status(same, [k]) == 0


def test_the_gates_order_is_the_minimisations():
    from addrsim.prove.query import ORDER
    from addrsim.report import gate as G
    assert G.ORDER == ORDER
