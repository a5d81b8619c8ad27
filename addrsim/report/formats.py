"""Report formats for CI: SARIF 2.1.0 and JUnit XML, made from addrsim's JSON reports.

Both functions take a list of the dicts that :func:`addrsim.api.verify` returns (one per
code object, ``{"tool", "version", "kernels": [...]}``, see README.md) and only read them.

**SARIF** (:func:`to_sarif`) follows the *Static Analysis Results Interchange Format (SARIF)
Version 2.1.0* OASIS Standard (with Errata 01) and validates against its JSON schema
(``sarif-schema-2.1.0.json``).  The log holds one run (§3.14) whose tool driver (§3.18,
§3.19) lists one rule, a ``reportingDescriptor`` (§3.49), per kind of root cause that
appears (:data:`RULES`: ``addrsim/wrap``, ``addrsim/host-cast``, ``addrsim/formula``,
``addrsim/loop``, ``addrsim/bounds``, ``addrsim/unclassified``) and ``addrsim/undecided``.
Each root cause of a kernel (:mod:`addrsim.report.causes`) is one result (§3.27), at the
instruction that causes it (``address``, §3.32; ``region.startLine`` for listing input) in
the code object file (``artifactLocation``, §3.4: a relative URI reference, a ``file:`` URI
for an absolute path, or relative to ``SRCROOT`` under ``root``, §3.14.14), with the kernel
symbol as a logical location of kind ``function`` (§3.33); its message gives the checks it
breaks, the smallest shape, the boundary and the fix, its property bag (§3.8) the same as
data.  Each check left unknown, unsupported or unreachable is a ``warning`` with its reason.
Against a baseline each result has a ``baselineState`` (§3.27.24) and findings gone since
are ``absent`` results; accepted findings carry ``suppressions`` (§3.27.23).  GitHub code
scanning and other SARIF viewers read this log.

**JUnit XML** (:func:`to_junit`) is the de-facto format that Jenkins (JUnit plugin) and
GitLab (``artifacts:reports:junit``) read: a ``<testsuites>`` root, one ``<testsuite>`` per
code object file (``name`` = the file's base name, ``<properties>`` with ``arch`` and the
full ``file`` path), one ``<testcase>`` per kernel x buffer x layout (``classname`` = the
kernel symbol, ``name`` = ``buffer/layout``, ``time`` = the check's seconds).  A
counterexample is a ``<failure>``, an unknown or unsupported verdict an ``<error>`` whose
``type`` is the verdict, and a proof a passed test case.  It is written with junitparser.
"""
from __future__ import annotations

from addrsim.files import atomic_open
from addrsim.prove.verdict import Verdict
from addrsim.report.causes import check_name, root_causes, smallest_check, smallest_of
from addrsim.report.gate import cause_state, fingerprint
from addrsim.report.text import lane_text
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union
from urllib.parse import quote

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
#: tool.driver.informationUri (SARIF §3.19.17): where a reader learns about the tool.
INFORMATION_URI = "https://pypi.org/project/addrsim/"
#: The uriBaseId of paths made relative to ``root`` (the name GitHub code scanning uses).
SRCROOT = "SRCROOT"

PathLike = Union[str, os.PathLike]


# ---------------------------------------------------------------------------- common

def _checks(reports: Iterable[dict]):
    """Yield (kernel entry, check) for every check of every report, in report order."""
    for rep in reports:
        for k in rep.get("kernels", []):
            for c in k.get("checks", []):
                yield k, c


def _pc(value) -> Optional[int]:
    """access_pc as an int: the report holds an int, hand-made ones may hold "0x3eb0"."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 0)
    except ValueError:
        return None


def _pc_text(value) -> Optional[str]:
    pc = _pc(value)
    if pc is not None:
        return f"{pc:#x}"
    return None if value is None else str(value)


def _shape_text(shape: Optional[dict]) -> str:
    """``batch=2 nhead_q=16 ...`` in the report's order (batch first)."""
    return " ".join(f"{k}={v}" for k, v in (shape or {}).items())


def _coords(cex: dict) -> Dict[str, object]:
    coords = cex.get("coords") or {}
    return {k: coords[k] for k in ("batch_id", "head_id") if k in coords}


def _coords_text(cex: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in _coords(cex).items())


def _offsets(cex: dict) -> Tuple[object, object]:
    addr = cex.get("address") or {}
    return addr.get("extracted"), addr.get("expected")


def _reason(check: dict) -> str:
    return check.get("reason") or "no reason given"


# ---------------------------------------------------------------------------- SARIF

RULES = {
    "wrap": ("Wrap32", "A 32-bit operation on the address path wraps inside device memory",
             "An instruction that builds a buffer address keeps only 32 bits of a value that grows past 2**32 "
             "for a shape whose tensors fit in the device's memory: the kernel reads or writes another slice."),
    "host cast": ("HostCast", "The host's u32 cast truncates a kernel argument",
                  "The host passes a stride or size cast to 32 bits; past the boundary the kernel receives a "
                  "truncated value. A limit of the argument ABI: the host must refuse or reroute such shapes."),
    "formula": ("WrongFormula", "The offset is wrong over the integers too",
                "The kernel computes a slice offset from a stride that is right for some layouts only (a "
                "borrowed stride): wrong without any wraparound."),
    "loop": ("LoopStep", "A loop's per-iteration step depends on the workgroup",
             "A later iteration of a loop that accesses the buffer is wrong for some (batch_id, head_id)."),
    "bounds": ("OutOfBounds", "An access leaves its allocation or its V#'s range",
               "An access that passes the V# range check lies outside the tensor's allocation, or an access "
               "inside the workgroup's own slice is clamped by the V# (read as 0, a write dropped)."),
    "unclassified": ("Counterexample", "A wrong address of undecided cause",
                     "A counterexample whose cause (overflow or formula) was not decided."),
    "undecided": ("Undecided", "A check addrsim could not decide",
                  "The check ended unknown, unsupported or unreachable; the message gives the reason."),
}
_CAUSE_RULE = {"overflow": "wrap", "formula": "formula", "loop": "loop", "allocation": "bounds",
               "num_records": "bounds"}


def _rule(kind: str) -> dict:
    name, short, full = RULES[kind]
    return {"id": _rule_id(kind), "name": name, "shortDescription": {"text": short},
            "fullDescription": {"text": full},
            "defaultConfiguration": {"level": "warning" if kind in ("undecided", "host cast") else "error"},
            "properties": {"tags": ["correctness", "memory-address"]}}


def _rule_id(kind: str) -> str:
    return "addrsim/" + kind.replace(" ", "-")


def _artifact_location(file: str, root: Optional[PathLike]) -> dict:
    """artifactLocation (SARIF §3.4) of a code object file."""
    if root is not None:
        try:
            rel = Path(os.path.abspath(file)).relative_to(os.path.abspath(root))
            return {"uri": quote(rel.as_posix()), "uriBaseId": SRCROOT}
        except ValueError:
            pass
    p = Path(file)
    if p.is_absolute():
        return {"uri": p.as_uri()}
    return {"uri": quote(p.as_posix())}


def _location(kernel: dict, root, pc: Optional[int], line: Optional[int]) -> dict:
    """A result's location: the code object (or listing) file, the instruction address and
    the listing line where known, and the kernel symbol as a function."""
    physical = {"artifactLocation": _artifact_location(str(kernel.get("file")), root)}
    if pc is not None and pc >= 0:
        physical["address"] = {"absoluteAddress": pc, "kind": "instruction"}
    if line:
        physical["region"] = {"startLine": int(line)}
    sym = str(kernel.get("kernel"))
    return {"physicalLocation": physical,
            "logicalLocations": [{"name": sym, "fullyQualifiedName": sym, "kind": "function"}]}


def _cause_message(kernel: dict, r: dict) -> str:
    sym = kernel.get("kernel")
    sm = r.get("smallest") or {}
    parts = [f"Kernel {sym}: {r['title']}."]
    if r["checks"]:
        parts.append(f"Breaks {', '.join(r['checks'])} ({r['reach']}"
                     + (f": masked by {'; '.join(r['masked_by'])}" if r.get("masked_by") else "") + ").")
    if sm:
        parts.append(f"Smallest shape: {_shape_text(sm.get('shape'))} ({sm.get('check')}"
                     + ("" if sm.get("minimal", True) else ", not proven minimal") + ").")
    if r["boundary"]:
        parts.append("Boundary: " + "; ".join(f"{lay}: {b}" for lay, b in r["boundary"].items()) + ".")
    if r.get("fix"):
        parts.append(f"Fix: {r['fix']}.")
    return " ".join(parts)


def _cause_result(kernel: dict, r: dict, rule_index: int, root, gate: Optional[dict]) -> dict:
    """One SARIF result for a root cause (:mod:`addrsim.report.causes`)."""
    where = r.get("where") or {}
    cex = (smallest_check(kernel, r) or {}).get(Verdict.COUNTEREXAMPLE) or {}
    pc = where.get("pc") if where.get("pc") is not None else _pc(cex.get("access_pc"))
    line = where.get("line") or (cex.get("access_line") if where.get("pc") is None else None)
    level = {"reachable": "error", "host": "note"}.get(r["reach"], "warning")
    res = {"ruleId": _rule_id(r["kind"]), "ruleIndex": rule_index, "level": level,
           "message": {"text": _cause_message(kernel, r)},
           "locations": [_location(kernel, root, pc, line)],
           "partialFingerprints": {"addrsimCause/v1": f"{kernel.get('arch')}:{kernel.get('kernel')}:{r['kind']}:"
                                                       + ",".join(sorted(r["checks"]) or [r["title"]])},
           "properties": {k: r[k] for k in ("kind", "checks", "boundary", "smallest", "reach", "masked_by", "fix",
                                                    "findings")
                          if r.get(k) not in (None, "", [], {})}}
    res["properties"].update(arch=kernel.get("arch"), kernel=kernel.get("kernel"))
    _gate_marks(res, r.get("findings") or [], gate, kernel)
    return res


def _by_acceptance(kernel: dict, r: dict, gate: Optional[dict]) -> List[dict]:
    """The root cause ``r`` as one result, or as two when only some of its findings are
    accepted: the accepted checks (suppressed) and the others, so that a suppression never
    hides a finding nobody accepted."""
    fps = r.get("findings") or []
    accepted = set((gate or {}).get("accepted") or [])
    mine = [i for i, fp in enumerate(fps) if fp in accepted]
    if not mine or len(mine) == len(fps) or len(fps) != len(r["checks"]):
        return [r]
    rest = [i for i in range(len(fps)) if i not in mine]
    out = []
    for idx in (rest, mine):
        names = {r["checks"][i] for i in idx}
        cs = [c for c in kernel.get("checks") or [] if c.get("verdict") == Verdict.COUNTEREXAMPLE
              and check_name(c) in names]
        out.append(dict(r, checks=[r["checks"][i] for i in idx], findings=[fps[i] for i in idx],
                        smallest=smallest_of(cs) or r.get("smallest")))
    return out


def _gate_marks(res: dict, fps: List[str], gate: Optional[dict], kernel: dict) -> None:
    """baselineState (§3.27.24) and suppressions (§3.27.23, accepted findings) of a result
    whose findings are ``fps`` (:func:`addrsim.report.gate.cause_state`)."""
    if not gate:
        return
    state, accepted = cause_state({"findings": fps}, gate)
    if state is not None and fps:
        res["baselineState"] = state
    if fps and len(accepted) == len(fps):
        reasons = {c["accepted"]["reason"] for c in kernel.get("checks", [])
                   if c.get("accepted") and fingerprint(kernel, c) in fps}
        res["suppressions"] = [{"kind": "external", "status": "accepted", "justification": "; ".join(sorted(reasons))}]


def _undecided_result(kernel: dict, check: dict, rule_index: int, root, gate: Optional[dict]) -> dict:
    """One SARIF result for a check that ended unknown, unsupported or unreachable."""
    sym = kernel.get("kernel")
    res = {"ruleId": _rule_id("undecided"), "ruleIndex": rule_index, "level": "warning",
           "message": {"text": f"Kernel {sym}: {check_name(check)} could not be decided ({check.get('verdict')}): "
                               f"{_reason(check)}."},
           "locations": [_location(kernel, root, None, None)],
           "partialFingerprints": {"addrsimCheck/v1": fingerprint(kernel, check)},
           "properties": {"arch": kernel.get("arch"), "kernel": sym, "buffer": check.get("buffer"),
                          "layout": check.get("layout"), "property": check.get("property", "address"),
                          "verdict": check.get("verdict"), "reason": _reason(check)}}
    _gate_marks(res, [fingerprint(kernel, check)], gate, kernel)
    return res


def _absent_result(fp: str, index: Dict[str, int], rules: List[dict]) -> dict:
    """A finding of the baseline not found again (baselineState "absent")."""
    parts = fp.split(":")
    kind = _CAUSE_RULE.get(parts[5], "unclassified") if len(parts) > 5 else "undecided"
    if kind not in index:
        index[kind] = len(rules)
        rules.append(_rule(kind))
    sym = parts[1] if len(parts) > 1 else fp
    return {"ruleId": _rule_id(kind), "ruleIndex": index[kind], "level": "note", "baselineState": "absent",
            "message": {"text": f"Gone since the baseline: {fp}."},
            "locations": [{"logicalLocations": [{"name": sym, "fullyQualifiedName": sym, "kind": "function"}]}],
            "partialFingerprints": {"addrsimCheck/v1": fp}}


def to_sarif(reports: List[dict], tool_version: str, *, root: Optional[PathLike] = None,
             information_uri: str = INFORMATION_URI, gate: Optional[dict] = None) -> dict:
    """The reports as one SARIF 2.1.0 log (a JSON-ready dict), one run.

    Rules (§3.19.23): one per root-cause kind that appears (``addrsim/wrap``,
    ``addrsim/host-cast``, ``addrsim/formula``, ``addrsim/loop``, ``addrsim/bounds``,
    ``addrsim/unclassified``) and ``addrsim/undecided``.  Results (§3.14.23, always present):
    one per root cause of each kernel (:func:`addrsim.report.causes.root_causes`: level
    ``error`` when the host reaches it, ``warning`` when latent or not known, ``note`` for a
    host cast), located at its instruction (address, and listing line for listing input),
    then one ``warning`` per check left unknown, unsupported or unreachable.  With ``gate``
    (:func:`addrsim.report.gate.gate`): ``baselineState`` on each result, one ``absent``
    result per finding gone since the baseline, and ``suppressions`` for accepted findings (a
    root cause with some of its findings accepted is two results, :func:`_by_acceptance`).
    ``root``: make the files under it relative URIs with ``uriBaseId`` ``SRCROOT``
    (§3.14.14), as GitHub code scanning wants."""
    rules: List[dict] = []
    index: Dict[str, int] = {}
    results: List[dict] = []

    def rule(kind: str) -> int:
        if kind not in index:
            index[kind] = len(rules)
            rules.append(_rule(kind))
        return index[kind]

    for rep in reports:
        for kernel in rep.get("kernels", []):
            for r in kernel.get("root_causes") or root_causes(kernel):
                for part in _by_acceptance(kernel, r, gate):
                    results.append(_cause_result(kernel, part, rule(r["kind"]), root, gate))
            for c in kernel.get("checks", []):
                if c.get("verdict") not in (Verdict.PROVED, Verdict.COUNTEREXAMPLE):
                    results.append(_undecided_result(kernel, c, rule("undecided"), root, gate))
    for fp in (gate or {}).get("gone") or []:
        results.append(_absent_result(fp, index, rules))
    run = {"tool": {"driver": {"name": "addrsim", "version": str(tool_version),
                               "informationUri": information_uri, "rules": rules}},
           "results": results}
    if root is not None:
        base = Path(os.path.abspath(root)).as_uri()
        run["originalUriBaseIds"] = {SRCROOT: {"uri": base if base.endswith("/") else base + "/"}}
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


# ---------------------------------------------------------------------------- JUnit

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text) -> str:
    """Text XML 1.0 can hold: characters it forbids become '?'."""
    return _XML_BAD.sub("?", str(text))


def _failure(check: dict) -> Failure:
    cex = check.get(Verdict.COUNTEREXAMPLE) or {}
    ext, exp = _offsets(cex)
    absolute = check.get("cause") in ("base", "layout")       # the reason says what is wrong, not two offsets
    if cex and absolute:
        msg = f"counterexample at {_shape_text(cex.get('shape'))}: {_coords_text(cex)}: {_reason(check)}"
    elif cex:
        msg = (f"counterexample at {_shape_text(cex.get('shape'))}: {_coords_text(cex)}: "
               f"byte offset from (0,0) extracted {ext}, expected {exp}")
    else:
        msg = f"counterexample (none in the report): {_reason(check)}"
    lines = []
    if cex:
        lines.append(f"shape: {_shape_text(cex.get('shape'))}")
        lines.append(f"coordinates: {_coords_text(cex)}"
                     + (f" {lane_text(cex['lane'])}" if cex.get("lane") is not None else "")
                     + (f" (access at {_pc_text(cex.get('access_pc'))})" if cex.get("access_pc") is not None else ""))
        lines.append(f"byte offset from (0,0): extracted {ext}, expected {exp}")
        if cex.get("kernargs"):
            lines.append("kernel arguments: " + ", ".join(f"{k}={v}" for k, v in cex["kernargs"].items()))
    for key in ("extracted", "expected", "difference"):
        if check.get(key):
            lines.append(f"{key}: {check[key]}")
    f = Failure(_x(msg), Verdict.COUNTEREXAMPLE)
    if lines:
        f.text = _x("\n".join(lines))
    return f


def _error(check: dict) -> Error:
    e = Error(_x(_reason(check)), _x(check.get("verdict")))
    lines = [f"{key}: {check[key]}" for key in ("extracted", "expected") if check.get(key)]
    if lines:
        e.text = _x("\n".join(lines))
    return e


def to_junit(reports: List[dict]) -> str:
    """The reports as JUnit XML text (UTF-8 declaration, indented).

    One ``<testsuite>`` per code object file, in order of appearance (a file met in two
    reports gets one suite), named by the file's base name, with the ``arch`` (comma-joined
    if the kernels differ) and ``file`` properties; one ``<testcase>`` per check:
    ``classname`` the kernel symbol, ``name`` ``buffer/layout``, ``time`` the check's
    ``time_s``.  ``counterexample`` -> ``<failure type="counterexample">`` (message: smallest
    shape, coordinates and both byte offsets; body: details and formulas), ``unknown`` /
    ``unsupported`` (any verdict but ``proved``) -> ``<error>`` with the reason as message and
    the verdict as type; ``proved`` -> a passed test case; a finding accepted by the gate
    (:mod:`addrsim.report.gate`) or unchanged since its baseline -> ``<skipped>`` with the
    reason, so the file fails exactly the findings the gate fails."""
    files: Dict[str, Tuple[List[str], List[TestCase]]] = {}
    for kernel, check in _checks(reports):
        arches, cases = files.setdefault(str(kernel.get("file")), ([], []))
        arch = kernel.get("arch")
        if arch and str(arch) not in arches:
            arches.append(str(arch))
        t = check.get("time_s")
        case = TestCase(_x(f"{check.get('buffer')}/{check.get('layout')}"
                           + (" bounds" if check.get("property") == "bounds" else "")), _x(kernel.get("kernel")),
                        float(t) if t is not None else None)
        verdict = check.get("verdict")
        if check.get("accepted") and verdict != Verdict.PROVED:
            acc = check["accepted"]
            case.result = [Skipped(_x(f"accepted {verdict} (entry {acc['entry']}): {acc['reason']}"))]
        elif check.get("baseline") == "unchanged" and verdict != Verdict.PROVED:
            # the gate passes it: CI's colour is the gate's (issue 40)
            case.result = [Skipped(_x(f"unchanged since the baseline: {verdict}"
                                      + (f" ({check['cause']})" if check.get("cause") else "")
                                      + (f"; fails another way: {check['baseline_change']}"
                                         if check.get("baseline_change") else "")))]
        elif verdict == Verdict.COUNTEREXAMPLE:
            case.result = [_failure(check)]
        elif verdict != Verdict.PROVED:
            case.result = [_error(check)]
        cases.append(case)
    root = JUnitXml("addrsim")
    for file, (arches, cases) in files.items():
        suite = TestSuite(_x(os.path.basename(file)))
        # <properties> first: the Ant/Jenkins JUnit schema puts it before the test cases
        suite.add_property("arch", _x(",".join(arches)))
        suite.add_property("file", _x(file))
        for case in cases:
            suite.add_testcase(case)
        suite.update_statistics()
        root.add_testsuite(suite)
    root.update_statistics()
    buf = io.BytesIO()
    root.write(buf, pretty=True)
    return buf.getvalue().decode("utf-8")


# ---------------------------------------------------------------------------- writers

def _write_text(path: PathLike, text: str) -> None:
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    with atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def write_sarif(path: PathLike, reports: List[dict], version: str, **kwargs) -> None:
    """Write :func:`to_sarif` ``(reports, version, **kwargs)`` to ``path`` as indented UTF-8
    JSON (``-``: standard output)."""
    _write_text(path, json.dumps(to_sarif(reports, version, **kwargs), indent=2, ensure_ascii=False) + "\n")


def write_junit(path: PathLike, reports: List[dict]) -> None:
    """Write :func:`to_junit` ``(reports)`` to ``path`` (``-``: standard output)."""
    _write_text(path, to_junit(reports))
