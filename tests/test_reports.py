"""SARIF 2.1.0 and JUnit XML output (addrsim.report.formats) on hand-made reports.

tests/data/sarif-schema-2.1.0.json is the OASIS SARIF 2.1.0 (Errata 01) JSON schema
("id": https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json,
sha256 c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e), vendored because CI
reaches no network but package registries.  It is a JSON Schema draft-04 document.
"""
import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from addrsim.report.formats import to_junit, to_sarif, write_junit, write_sarif

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
FILE = "/opt/kernels/bwd_hd128_bf16_a16_rtne.co"
SYM = "_ZN5aiter28fmha_bwd_hd128_bf16_a16_rtneE"
SHAPE = {"batch": 2, "nhead_q": 16, "nhead_k": 1, "seqlen_q": 1048576, "seqlen_k": 1048576,
         "hdim_q": 128, "hdim_v": 128}


def _check(buffer, layout, verdict, **kw):
    c = {"buffer": buffer, "layout": layout, "verdict": verdict, "extracted": "4*head_id*seq_len",
         "expected": "batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed", "difference": "", "reason": None,
         "counterexample": None, "time_s": 0.25}
    c.update(kw)
    return c


def make_reports(file=FILE):
    cex = {"shape": dict(SHAPE), "coords": {"batch_id": 1, "head_id": 0},
           "kernargs": {"seq_len": 1048576, "BAs": 0}, "address": {"extracted": 0, "expected": 67108864},
           "lane": 0, "grid": {"batch_id": 1, "head_id": 0, "tid": 0}, "access_pc": 16048}  # 0x3eb0
    site = {"kind": "instruction", "pc": 0x2b54, "instruction": "s_mul_i32 s62, s4, s53", "argument": "",
            "width": 32, "machine": 0, "exact": 1 << 32, "matters": True, "formula": "256*batch_id*nhead_q*seqlen_q",
            "boundary": "batch_id*nhead_q*seqlen_q >= 2**24",
            "shape_boundary": "nhead_q*seqlen_q*(batch - 1) >= 2**24", "text": "s_mul_i32 s62, s4, s53 at 0x2b54"}
    checks = [
        _check("lse", "sbhd", "proved", time_s=0.08),
        _check("lse", "bhsd", "counterexample", counterexample=cex, time_s=1.81, cause="overflow", overflow=[site],
               routing={"host": "h", "reachable": True}),
        _check("d", "bhsd", "unsupported", reason="no buffer access whose V# base is the d argument was found",
               time_s=0.5),
    ]
    return [{"tool": "addrsim", "version": "0.1.0",
             "kernels": [{"file": file, "kernel": SYM, "arch": "gfx942", "explore_s": 0.3, "paths": 4,
                          "checks": checks}]}]


def validate(log):
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    jsonschema.Draft4Validator(schema).validate(log)


# ---------------------------------------------------------------------------- SARIF

def test_sarif_valid_against_the_oasis_schema():
    log = to_sarif(make_reports(), "0.1.0")
    validate(log)
    assert log["version"] == "2.1.0"
    assert log["$schema"] == "https://json.schemastore.org/sarif-2.1.0.json"
    json.dumps(log)  # JSON-ready


def test_schema_validation_is_not_vacuous():
    log = to_sarif(make_reports(), "0.1.0")
    bad = copy.deepcopy(log)
    bad["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)
    bad = copy.deepcopy(log)
    del bad["runs"][0]["tool"]["driver"]["name"]
    with pytest.raises(jsonschema.ValidationError):
        validate(bad)


def test_sarif_driver_and_rules():
    run = to_sarif(make_reports(), "0.1.0")["runs"][0]
    assert len(to_sarif(make_reports(), "0.1.0")["runs"]) == 1
    driver = run["tool"]["driver"]
    assert driver["name"] == "addrsim"
    assert driver["version"] == "0.1.0"
    assert driver["informationUri"].startswith("https://")
    # one rule per kind of root cause that appears, and one for checks left undecided
    assert [r["id"] for r in driver["rules"]] == ["addrsim/wrap", "addrsim/undecided"]
    assert driver["rules"][0]["shortDescription"]["text"] == \
        "A 32-bit operation on the address path wraps inside device memory"


def test_sarif_results_levels_and_rule_ids():
    run = to_sarif(make_reports(), "0.1.0")["runs"][0]
    results = run["results"]
    assert len(results) == 2  # one root cause, one undecided check; proved gives none
    assert [(r["ruleId"], r["level"]) for r in results] == [("addrsim/wrap", "error"), ("addrsim/undecided", "warning")]
    rules = run["tool"]["driver"]["rules"]
    for r in results:
        assert rules[r["ruleIndex"]]["id"] == r["ruleId"]


def test_sarif_one_result_per_root_cause():
    """Two checks broken by one wrap site are one result that names both."""
    reps = make_reports()
    checks = reps[0]["kernels"][0]["checks"]
    checks.append(copy.deepcopy(checks[1]))
    checks[-1]["buffer"] = "d"
    results = to_sarif(reps, "0.1.0")["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["addrsim/wrap", "addrsim/undecided"]
    assert results[0]["properties"]["checks"] == ["lse/bhsd", "d/bhsd"]
    assert "Breaks lse/bhsd, d/bhsd (reachable)" in results[0]["message"]["text"]


def test_sarif_counterexample_message_location_properties():
    cex = to_sarif(make_reports(), "0.1.0")["runs"][0]["results"][0]
    text = cex["message"]["text"]
    assert text.startswith(f"Kernel {SYM}: 32-bit wrap at 0x2b54: s_mul_i32 s62, s4, s53.")
    assert "Smallest shape: batch=2 nhead_q=16 nhead_k=1 seqlen_q=1048576 seqlen_k=1048576 hdim_q=128 " \
           "hdim_v=128 (lse/bhsd)." in text
    assert "Boundary: bhsd: nhead_q*seqlen_q*(batch - 1) >= 2**24." in text
    assert "Fix: keep the product in 64 bits" in text
    loc = cex["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"] == {"uri": "file:///opt/kernels/bwd_hd128_bf16_a16_rtne.co"}
    assert loc["physicalLocation"]["address"] == {"absoluteAddress": 0x2b54, "kind": "instruction"}
    assert loc["logicalLocations"] == [{"name": SYM, "fullyQualifiedName": SYM, "kind": "function"}]
    p = cex["properties"]
    assert p["arch"] == "gfx942" and p["kind"] == "wrap" and p["reach"] == "reachable"
    assert p["smallest"]["shape"] == SHAPE
    assert p["boundary"] == {"bhsd": "nhead_q*seqlen_q*(batch - 1) >= 2**24"}


def test_sarif_listing_line_is_the_region():
    reps = make_reports()
    reps[0]["kernels"][0]["checks"][1]["overflow"][0]["line"] = 1234
    loc = to_sarif(reps, "0.1.0")["runs"][0]["results"][0]["locations"][0]
    assert loc["physicalLocation"]["region"] == {"startLine": 1234}


def test_sarif_unsupported_message_has_reason():
    res = to_sarif(make_reports(), "0.1.0")["runs"][0]["results"][1]
    assert res["message"]["text"] == (
        f"Kernel {SYM}: d/bhsd could not be decided (unsupported): "
        "no buffer access whose V# base is the d argument was found.")
    assert "address" not in res["locations"][0]["physicalLocation"]
    assert res["properties"]["verdict"] == "unsupported"


def test_sarif_access_pc_as_hex_string_and_unknown_verdict():
    reps = make_reports()
    checks = reps[0]["kernels"][0]["checks"]
    checks[1]["counterexample"]["access_pc"] = "0x3eb0"
    checks[1]["overflow"] = []              # no wrap site located: the access locates the result
    checks.append(_check("d", "bshd", "unknown", reason="solver timeout"))
    log = to_sarif(reps, "0.1.0")
    validate(log)
    results = log["runs"][0]["results"]
    assert [r["level"] for r in results] == ["error", "warning", "warning"]
    assert results[0]["locations"][0]["physicalLocation"]["address"]["absoluteAddress"] == 0x3eb0
    assert "solver timeout" in results[2]["message"]["text"]


def test_sarif_relative_path_and_root():
    log = to_sarif(make_reports("kernels/bwd hd128.co"), "0.1.0")
    validate(log)
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == \
        {"uri": "kernels/bwd%20hd128.co"}
    log = to_sarif(make_reports(), "0.1.0", root="/opt")
    validate(log)
    run = log["runs"][0]
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == \
        {"uri": "kernels/bwd_hd128_bf16_a16_rtne.co", "uriBaseId": "SRCROOT"}
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": "file:///opt/"}}


def test_sarif_all_proved_has_empty_results():
    reps = make_reports()
    reps[0]["kernels"][0]["checks"] = [reps[0]["kernels"][0]["checks"][0]]
    log = to_sarif(reps, "0.1.0")
    validate(log)
    assert log["runs"][0]["results"] == []
    assert log["runs"][0]["tool"]["driver"]["rules"] == []


# ---------------------------------------------------------------------------- JUnit

def test_junit_structure():
    root = ET.fromstring(to_junit(make_reports()))
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    assert suite.get("name") == "bwd_hd128_bf16_a16_rtne.co"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    assert suite[0].tag == "properties"  # before the test cases, as the JUnit XSD orders them
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"arch": "gfx942", "file": FILE}
    cases = suite.findall("testcase")
    assert len(cases) == 3
    assert [c.get("name") for c in cases] == ["lse/sbhd", "lse/bhsd", "d/bhsd"]
    assert {c.get("classname") for c in cases} == {SYM}
    assert [float(c.get("time")) for c in cases] == [0.08, 1.81, 0.5]
    assert list(cases[0]) == []  # proved: passed
    assert len(root.findall(".//failure")) == 1
    assert len(root.findall(".//error")) == 1


def test_junit_failure_and_error_content():
    root = ET.fromstring(to_junit(make_reports()))
    failure = root.find(".//testcase[@name='lse/bhsd']/failure")
    assert failure.get("type") == "counterexample"
    msg = failure.get("message")
    assert "batch=2" in msg
    assert msg == ("counterexample at batch=2 nhead_q=16 nhead_k=1 seqlen_q=1048576 seqlen_k=1048576 "
                   "hdim_q=128 hdim_v=128: batch_id=1 head_id=0: byte offset from (0,0) extracted 0, "
                   "expected 67108864")
    assert "access at 0x3eb0" in failure.text
    assert "expected: batch_id*nhead_q*Hs_lsed + head_id*Hs_lsed" in failure.text
    error = root.find(".//testcase[@name='d/bhsd']/error")
    assert error.get("type") == "unsupported"
    assert error.get("message") == "no buffer access whose V# base is the d argument was found"


def test_junit_one_suite_per_file_and_bad_characters():
    reps = make_reports() + make_reports("/opt/kernels/other.co")
    reps[1]["kernels"][0]["checks"][2]["reason"] = "odd \x01 byte & <tag>"
    root = ET.fromstring(to_junit(reps))
    assert [s.get("name") for s in root.findall("testsuite")] == ["bwd_hd128_bf16_a16_rtne.co", "other.co"]
    assert root.get("tests") == "6"
    assert root.findall("testsuite")[1].find(".//error").get("message") == "odd ? byte & <tag>"


# ---------------------------------------------------------------------------- writers

def test_writers(tmp_path):
    s, j = tmp_path / "out.sarif", tmp_path / "out.xml"
    write_sarif(s, make_reports(), "0.1.0")
    write_junit(j, make_reports())
    log = json.loads(s.read_text(encoding="utf-8"))
    validate(log)
    assert len(log["runs"][0]["results"]) == 2
    assert len(ET.parse(j).getroot().findall(".//testcase")) == 3


def test_writers_dash_is_stdout(capsys):
    write_sarif("-", make_reports(), "0.1.0")
    assert json.loads(capsys.readouterr().out)["runs"][0]["results"][0]["ruleId"] == "addrsim/wrap"
    write_junit("-", make_reports())
    assert ET.fromstring(capsys.readouterr().out.encode()).tag == "testsuites"
