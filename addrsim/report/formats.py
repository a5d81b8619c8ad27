"""Report formats for CI: SARIF 2.1.0 and JUnit XML, made from addrsim's JSON reports.

Both functions take a list of the dicts that :func:`addrsim.api.verify` returns (one per
code object, ``{"tool", "version", "kernels": [...]}``, see README.md) and only read them.

**SARIF** (:func:`to_sarif`) follows the *Static Analysis Results Interchange Format (SARIF)
Version 2.1.0* OASIS Standard (with Errata 01) and validates against its JSON schema
(``sarif-schema-2.1.0.json``).  The log holds one run (§3.14) whose tool driver (§3.18,
§3.19) lists one rule, a ``reportingDescriptor`` (§3.49), per buffer that appears in the
reports, with id ``addrsim/<buffer>``.  Each check that did not prove becomes a result
(§3.27):

* ``counterexample``: level ``error``; the message gives the kernel, the buffer, the layout,
  the smallest failing shape, ``batch_id``/``head_id`` and the byte offsets (from the (0, 0)
  slice) that the kernel computes and that the layout expects.
* ``unknown``, ``unsupported`` (and any other verdict but ``proved``): level ``warning``; the
  message gives the reason.
* ``proved``: no result.

A result's location (§3.28) names the code object file as its physical location
(``artifactLocation.uri``, §3.4, §3.29: a relative URI reference, or a ``file:`` URI for an
absolute path; with ``root`` given, a path under it is relative to the base id ``SRCROOT``,
§3.14.14), the instruction address of the failing access where known (``address``, §3.32),
and the kernel symbol as a logical location of kind ``function`` (§3.33).  Its property bag
(§3.8) carries arch, buffer, layout, verdict, shape, coordinates, access_pc and the
formulas.  GitHub code scanning and other SARIF viewers read this log.

**JUnit XML** (:func:`to_junit`) is the de-facto format that Jenkins (JUnit plugin) and
GitLab (``artifacts:reports:junit``) read: a ``<testsuites>`` root, one ``<testsuite>`` per
code object file (``name`` = the file's base name, ``<properties>`` with ``arch`` and the
full ``file`` path), one ``<testcase>`` per kernel x buffer x layout (``classname`` = the
kernel symbol, ``name`` = ``buffer/layout``, ``time`` = the check's seconds).  A
counterexample is a ``<failure>``, an unknown or unsupported verdict an ``<error>`` whose
``type`` is the verdict, and a proof a passed test case.  It is written with junitparser.
"""
from __future__ import annotations

from addrsim.prove.verdict import Verdict
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union
from urllib.parse import quote

from junitparser import Error, Failure, JUnitXml, TestCase, TestSuite

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

def _rule(buffer: str) -> dict:
    words = [w for w in re.split(r"[^0-9A-Za-z]+", buffer) if w]
    if buffer.endswith("-bounds"):
        b = buffer[:-len("-bounds")]
        return {
            "id": f"addrsim/{buffer}",
            "name": "".join(w[:1].upper() + w[1:] for w in words[:-1]) + "InBounds",
            "shortDescription": {"text": f"{b.upper()} accesses stay inside the tensor and the V#'s num_records"},
            "fullDescription": {"text": (
                f"Every checked access of the {b} buffer that passes the V# range check lies inside the "
                f"tensor's allocation, and every access inside the workgroup's own slice passes the range "
                f"check (otherwise it silently reads 0). When not, addrsim reports the smallest shape.")},
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["correctness", "memory-safety"]},
        }
    return {
        "id": f"addrsim/{buffer}",
        "name": "".join(w[:1].upper() + w[1:] for w in words) + "BaseAddress",
        "shortDescription": {"text": f"{buffer.upper()} base address matches the host layout"},
        "fullDescription": {"text": (
            f"Every access of the {buffer} buffer computes, for every shape within the bounds, "
            f"the byte address that the host layout gives. When it does not, addrsim reports the "
            f"smallest shape on which the addresses differ.")},
        "defaultConfiguration": {"level": "error"},
        "properties": {"tags": ["correctness", "memory-address"]},
    }


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


def _message(kernel: dict, check: dict) -> str:
    sym, buf, lay, verdict = kernel.get("kernel"), check.get("buffer"), check.get("layout"), check.get("verdict")
    if verdict != Verdict.COUNTEREXAMPLE:
        return (f"Kernel {sym}: the {buf} address in layout {lay} could not be checked "
                f"({verdict}): {_reason(check)}.")
    cex = check.get(Verdict.COUNTEREXAMPLE)
    if cex and check.get("property") == "bounds":
        return (f"Kernel {sym}: a {buf} access in layout {lay} is out of bounds. "
                f"Smallest failing shape: {_shape_text(cex.get('shape'))}, at {_coords_text(cex)} "
                f"(lane {cex.get('lane')}): {_reason(check)}.")
    if not cex:
        return (f"Kernel {sym} computes a wrong {buf} address in layout {lay} "
                f"(the report holds no counterexample){': ' + check['reason'] if check.get('reason') else ''}.")
    ext, exp = _offsets(cex)
    where = f" (lane {cex['lane']}" if cex.get("lane") is not None else ""
    pc = _pc_text(cex.get("access_pc"))
    if pc:
        where += f", access at {pc}" if where else f" (access at {pc}"
    where += ")" if where else ""
    return (f"Kernel {sym} computes a wrong {buf} address in layout {lay}. "
            f"Smallest failing shape: {_shape_text(cex.get('shape'))}. "
            f"At {_coords_text(cex)}{where} the kernel's byte offset from the (0,0) slice is {ext}, "
            f"the {lay} layout expects {exp}.")


def _properties(kernel: dict, check: dict) -> dict:
    props = {"arch": kernel.get("arch"), "file": kernel.get("file"), "kernel": kernel.get("kernel"),
             "buffer": check.get("buffer"), "layout": check.get("layout"), "verdict": check.get("verdict"),
             "reason": check.get("reason"), "extracted_formula": check.get("extracted"),
             "expected_formula": check.get("expected"), "difference": check.get("difference")}
    rt = check.get("routing") or {}
    if check.get("verdict") == Verdict.COUNTEREXAMPLE:
        props["finding"] = "latent" if rt.get("reachable") is False else "reachable"
        props["host"] = rt.get("host")
        props["masked_by"] = "; ".join(rt.get("masked_by") or []) or None
    cex = check.get(Verdict.COUNTEREXAMPLE)
    if cex:
        ext, exp = _offsets(cex)
        props.update({"shape": cex.get("shape"), **_coords(cex), "lane": cex.get("lane"),
                      "access_pc": _pc_text(cex.get("access_pc")),
                      "extracted_offset": ext, "expected_offset": exp})
    return {k: v for k, v in props.items() if v is not None and v != ""}


def _result(kernel: dict, check: dict, rule_index: int, root: Optional[PathLike]) -> dict:
    physical = {"artifactLocation": _artifact_location(str(kernel.get("file")), root)}
    cex = check.get(Verdict.COUNTEREXAMPLE) or {}
    pc = _pc(cex.get("access_pc"))
    if pc is not None and pc >= 0:
        physical["address"] = {"absoluteAddress": pc, "kind": "instruction"}
    sym = str(kernel.get("kernel"))
    return {
        "ruleId": f"addrsim/{check.get('buffer')}" + ("-bounds" if check.get("property") == "bounds" else ""),
        "ruleIndex": rule_index,
        # a latent kernel bug (no host entry point launches a failing shape) is a warning
        "level": "error" if check.get("verdict") == Verdict.COUNTEREXAMPLE
                 and (check.get("routing") or {}).get("reachable") is not False else "warning",
        "message": {"text": _message(kernel, check)},
        "locations": [{
            "physicalLocation": physical,
            "logicalLocations": [{"name": sym, "fullyQualifiedName": sym, "kind": "function"}],
        }],
        "partialFingerprints": {
            "addrsimCheck/v1": f"{os.path.basename(str(kernel.get('file')))}:{sym}:"
                               f"{check.get('buffer')}:{check.get('layout')}"
                               + (":bounds" if check.get("property") == "bounds" else "")},
        "properties": _properties(kernel, check),
    }


def to_sarif(reports: List[dict], tool_version: str, *, root: Optional[PathLike] = None,
             information_uri: str = INFORMATION_URI) -> dict:
    """The reports as one SARIF 2.1.0 log (a JSON-ready dict), one run.

    Rules (§3.19.23): one per buffer that appears in any check, in order of appearance.
    Results (§3.14.23, always present, empty when everything proved): one per check whose
    verdict is not ``proved``; a reachable ``counterexample`` is level ``error``, a latent one
    (properties ``finding``, ``masked_by``) and the other verdicts ``warning``
    (§3.27.10).  ``root``: make the files under it relative URIs with ``uriBaseId``
    ``SRCROOT`` (§3.14.14), as GitHub code scanning wants; other files keep a relative path
    as a relative URI and an absolute one as a ``file:`` URI."""
    rules: List[dict] = []
    index: Dict[str, int] = {}
    results: List[dict] = []
    for kernel, check in _checks(reports):
        buf = str(check.get("buffer")) + ("-bounds" if check.get("property") == "bounds" else "")
        if buf not in index:
            index[buf] = len(rules)
            rules.append(_rule(buf))
        if check.get("verdict") == Verdict.PROVED:
            continue
        results.append(_result(kernel, check, index[buf], root))
    run = {
        "tool": {"driver": {"name": "addrsim", "version": str(tool_version),
                            "informationUri": information_uri, "rules": rules}},
        "results": results,
    }
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
    if cex:
        msg = (f"counterexample at {_shape_text(cex.get('shape'))}: {_coords_text(cex)}: "
               f"byte offset from (0,0) extracted {ext}, expected {exp}")
    else:
        msg = f"counterexample (none in the report): {_reason(check)}"
    lines = []
    if cex:
        lines.append(f"shape: {_shape_text(cex.get('shape'))}")
        lines.append(f"coordinates: {_coords_text(cex)}"
                     + (f" lane={cex['lane']}" if cex.get("lane") is not None else "")
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
    the verdict as type; ``proved`` -> a passed test case."""
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
        if verdict == Verdict.COUNTEREXAMPLE:
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
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def write_sarif(path: PathLike, reports: List[dict], version: str, **kwargs) -> None:
    """Write :func:`to_sarif` ``(reports, version, **kwargs)`` to ``path`` as indented UTF-8
    JSON (``-``: standard output)."""
    _write_text(path, json.dumps(to_sarif(reports, version, **kwargs), indent=2, ensure_ascii=False) + "\n")


def write_junit(path: PathLike, reports: List[dict]) -> None:
    """Write :func:`to_junit` ``(reports)`` to ``path`` (``-``: standard output)."""
    _write_text(path, to_junit(reports))
