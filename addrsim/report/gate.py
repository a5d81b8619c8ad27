"""The CI gate: findings against a baseline report and a file of accepted findings.

Owns :func:`fingerprint`, :func:`load_baseline`, :func:`load_accepted` and :func:`gate`.  They
read the JSON form of the reports (README.md) and mark it; ``scan --baseline`` and
``--accepted`` use them, and the text, SARIF and JUnit outputs render the marks.  May import
addrsim.prove.verdict and addrsim.errors.

A **finding** is a check that did not prove, named by its fingerprint
``arch/file name:kernel symbol:buffer/layout:property:verdict[:cause]`` (the code object's
name without its folder, no instruction address, no shape: it stays the same when the wheel
moves, a patch shifts the code, or the minimisation finds another shape).  Against a baseline (an earlier ``--json`` report) each
finding is ``new`` or ``unchanged``, and the baseline's findings that are not found again are
``gone``.  An accepted-findings file (YAML, read with YAML's safe subset, no aliases, never evaluated)
lists entries::

    accepted:
      - kernel: "gfx942/bwd_hd128_*_a16_*"   # glob on arch/file name or on the kernel symbol
        buffer: lse                          # optional globs: buffer, layout, property, cause
        layout: sbhd
        reason: "latent: codegen.py sends SBHD to a16 only with batch 1"   # required
        expires: 2027-06-30                  # optional (YYYY-MM-DD): not applied after it

A matching finding is ``accepted`` (with its reason) in every output; an entry that matches
no finding is ``stale``, one past its date ``expired`` (its findings count again).  The gate
fails on findings that are new (or every finding, without a baseline) and not accepted.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from addrsim.errors import InputError
from addrsim.prove.verdict import Verdict

ENTRY_KEYS = {"kernel", "buffer", "layout", "property", "cause", "reason", "expires"}
MATCH_KEYS = ("buffer", "layout", "property", "cause")


VERDICTS = frozenset(str(v) for v in Verdict)
"""The verdict words a report (and a fingerprint) may hold."""


def kernel_label(kernel: dict) -> str:
    """``arch/file name`` of a kernel's code object (no folder): how reports name it.  A
    listing checked with ``--like K.co`` is named as K (its ``like``), so a patched listing is
    gated against K's baseline: what it fixes is gone, the rest unchanged (issue 40).  Several
    listings of one code object in one scan (``named_as`` "listing") are each named by their
    own file, so their findings do not share names."""
    own = kernel.get("named_as") == "listing"      # several listings of one code object in one scan
    return f"{kernel.get('arch')}/{Path(str((None if own else kernel.get('like')) or kernel.get('file', ''))).name}"


def fingerprint(kernel: dict, check: dict) -> str:
    """The finding's name (module docstring): stable across paths, code moves and shapes."""
    fp = (f"{kernel_label(kernel)}:{kernel.get('kernel')}:"
          f"{check['buffer']}/{check['layout']}:{check.get('property', 'address')}:{check['verdict']}")
    return fp + (f":{check.get('cause') or 'unclassified'}" if check["verdict"] == Verdict.COUNTEREXAMPLE else "")


def check_of(fingerprint_text: str) -> str:
    """The check a fingerprint names (``arch/file:symbol:buffer/layout:property``): the text
    before its verdict field."""
    parts = fingerprint_text.split(":")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in VERDICTS:
            return ":".join(parts[:i])
    return fingerprint_text


def findings(kernels: List[dict]) -> Dict[str, Tuple[dict, dict]]:
    """Fingerprint -> (kernel, check) of every check that did not prove."""
    return {fingerprint(k, c): (k, c) for k in kernels for c in k.get("checks") or []
            if c.get("verdict") != Verdict.PROVED}


def another_offset(before: dict, now: dict) -> bool:
    """Two signatures (:func:`signature`) wrong over the integers (a formula cause: only those have a
    ``difference``) with another ``extracted - expected``: another bug where the first was."""
    return bool(before.get("difference")) and bool(now.get("difference")) and before["difference"] != now["difference"]


def worse(before, now: dict) -> bool:
    """Does a finding that fails another way (:func:`change`) fail the gate: another wrong
    offset (a different bug under the same name), or a counterexample below the baseline's
    proven-minimal one (it fails where the baseline held)?"""
    if not isinstance(before, dict):
        return False
    if another_offset(before, now):
        return True
    return below({"verdict": now.get("verdict"), "counterexample": now.get("counterexample")},
                 {"verdict": before.get("verdict"), "counterexample": before.get("counterexample")})


def load_baseline(path: str) -> Dict[str, dict]:
    """Fingerprint -> :func:`signature` of the findings of an earlier ``--json`` report (of
    ``scan`` or ``verify``).  Raises InputError naming the file when it is not one."""
    try:
        data = json.loads(_read(path, "baseline"))
    except OSError as e:
        raise InputError(path, f"cannot read the baseline ({e.strerror})") from None
    except (ValueError, RecursionError) as e:
        raise InputError(path, f"the baseline is not JSON ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(data, dict) or data.get("tool") != "addrsim" or not isinstance(data.get("kernels"), list):
        raise InputError(path, "the baseline is not an addrsim --json report (no \"tool\": \"addrsim\" with kernels)")
    for k in data["kernels"]:
        if not isinstance(k, dict) or not all(isinstance(k.get(f), str) for f in ("file", "arch", "kernel")):
            raise InputError(path, "the baseline is not an addrsim --json report (a kernel without a string "
                                   "file, arch and kernel symbol)")
        checks = k.get("checks")
        if not isinstance(checks, list) or not all(_check_ok(c) for c in checks):
            raise InputError(path, "the baseline is not an addrsim --json report (a kernel without a list of checks "
                                   "with a string buffer and layout and a known verdict)")
    return {fp: signature(c) for fp, (_, c) in findings(data["kernels"]).items()}


def point(x: dict) -> Tuple[int, ...]:
    """A counterexample's place in the minimisation order (shape variables as in
    :data:`addrsim.prove.query.ORDER`, then batch_id, head_id, the other grid ids by name,
    lane): what "least" means for a proven-minimal one."""
    grid = dict(x.get("grid") or x.get("coords") or {})
    ids = [grid.pop("batch_id", 0), grid.pop("head_id", 0)] + [grid[k] for k in sorted(grid)]
    shape = x.get("shape") or {}
    return tuple(shape.get(v, 0) for v in ORDER) + tuple(ids) + (x.get("lane") or 0,)


ORDER = ("batch", "nhead_q", "seqlen_q", "nhead_k", "seqlen_k", "hdim_q", "hdim_v", "total_q", "total_k")
"""The shape variables in minimisation order (:data:`addrsim.prove.query.ORDER`; a test holds them equal)."""


def below(new: dict, old: dict) -> bool:
    """Do both checks (report dicts) have a counterexample, OLD's proven minimal, and NEW's
    strictly below it (:func:`point`)?  Then OLD holds at NEW's counterexample (nothing below
    its least one fails), so NEW fails where OLD does not: a regression under a bug that
    carries over."""
    xn, xo = new.get("counterexample"), old.get("counterexample")
    if new.get("verdict") != Verdict.COUNTEREXAMPLE or old.get("verdict") != Verdict.COUNTEREXAMPLE \
            or not isinstance(xn, dict) or not isinstance(xo, dict) or not xo.get("minimal"):
        return False
    return point(xn) < point(xo)


def signature(check: dict) -> dict:
    """What a finding's check says beyond its fingerprint: ``verdict``, and for a
    counterexample its smallest ``shape``, whether that is proven ``minimal`` and the offset
    ``difference`` in shape terms (a formula cause).  Two signatures of one fingerprint that
    differ (:func:`change`) mean the same check fails another way."""
    cex = check.get("counterexample") if isinstance(check.get("counterexample"), dict) else {}
    shape = cex.get("shape") if isinstance(cex.get("shape"), dict) else None
    return {"verdict": check.get("verdict"), "shape": shape, "minimal": bool(cex.get("minimal", True)),
            "difference": str(check.get("difference_shape") or ""),
            "counterexample": cex if shape is not None else None}


def change(before, now: dict) -> str:
    """How a finding of the baseline (its :func:`signature`; a bare verdict from an older
    caller says nothing more) fails another way now: its offset difference changed, or its
    smallest shape (both proven minimal, so not a minimisation budget's doing); "" when
    neither, or nothing tells.  A patch that keeps a check failing, with the same cause, is
    then shown, not passed as unchanged (issue 40); :func:`worse` says whether it fails."""
    if not isinstance(before, dict):
        return ""
    if another_offset(before, now):
        return f"extracted - expected was {before['difference']}, now {now['difference']}"
    if before.get("shape") and now.get("shape") and before.get("minimal") and now.get("minimal") \
            and before["shape"] != now["shape"]:
        def text(sh):
            return " ".join(f"{k}={v}" for k, v in sh.items())
        return f"smallest shape was {text(before['shape'])}, now {text(now['shape'])}"
    return ""


def _check_ok(c) -> bool:
    return (isinstance(c, dict) and isinstance(c.get("verdict"), str) and c["verdict"] in VERDICTS
            and isinstance(c.get("buffer"), str) and isinstance(c.get("layout"), str)
            and isinstance(c.get("property", "address"), str) and isinstance(c.get("cause", ""), (str, type(None))))


MAX_BYTES = 64 << 20
"""The largest baseline or accepted-findings file read (bytes)."""


def _read(path: str, what: str) -> str:
    """The text of ``path``: a regular file of at most MAX_BYTES, UTF-8.  Raises InputError
    (a FIFO would block, /dev/zero never ends)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(path, f"cannot read the {what}: not a regular file")
    if p.stat().st_size > MAX_BYTES:
        raise InputError(path, f"cannot read the {what}: larger than {MAX_BYTES >> 20} MiB")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(path, f"cannot read the {what}: not UTF-8 text") from None


def load_accepted(path: str) -> List[dict]:
    """The entries of an accepted-findings file (module docstring), each a dict with every
    key of ENTRY_KEYS (None where absent; ``expires`` a date).  Raises InputError naming the
    file and the entry for YAML that is not such a list, a missing or empty reason, an
    unknown key or a date that is not YYYY-MM-DD."""
    import yaml
    try:
        data = yaml.load(_read(path, "accepted findings"), Loader=_strict_loader())
    except OSError as e:
        raise InputError(path, f"cannot read the accepted findings ({e.strerror})") from None
    except (yaml.YAMLError, ValueError, TypeError, RecursionError, MemoryError) as e:
        raise InputError(path, f"not YAML this file may hold ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(data, dict) or set(data) != {"accepted"} or not isinstance(data["accepted"], list):
        raise InputError(path, "expected one key, accepted: a list of entries")
    return [_entry(path, i, e) for i, e in enumerate(data["accepted"], 1)]


def _strict_loader():
    """yaml.SafeLoader without aliases (no alias bombs) and with duplicate keys refused."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("anchors and aliases are not allowed here")
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):
            keys = [self.construct_object(k, deep=True) for k, _ in node.value]
            dup = next((k for i, k in enumerate(keys) if isinstance(k, str) and k in keys[:i]), None)
            if dup is not None:
                raise yaml.YAMLError(f"key {dup!r} given twice")
            return super().construct_mapping(node, deep)
    return Loader


def _entry(path: str, i: int, e) -> dict:
    where = f"accepted entry {i}"
    if not isinstance(e, dict):
        raise InputError(path, f"{where}: not a mapping")
    unknown = sorted(set(map(str, e)) - ENTRY_KEYS)
    if unknown:
        raise InputError(path, f"{where}: unknown key {shown(repr(unknown[0]))} (keys: {', '.join(sorted(ENTRY_KEYS))})")
    for k in ("kernel", "reason"):
        if not isinstance(e.get(k), str) or not e[k].strip():
            raise InputError(path, f"{where}: {k} is required (a non-empty string)")
    for k in MATCH_KEYS:
        if e.get(k) is not None and not isinstance(e[k], str):
            raise InputError(path, f"{where}: {k} must be a string (a glob)")
    exp = e.get("expires")
    if exp is not None and not (type(exp) is _dt.date):
        text = exp if isinstance(exp, str) else ""
        try:
            if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
                raise ValueError(text)
            exp = _dt.date.fromisoformat(text)
        except ValueError:
            raise InputError(path, f"{where}: expires must be a date YYYY-MM-DD, got {shown(exp)}") from None
    out = {k: e.get(k) for k in ENTRY_KEYS}
    out.update(expires=exp, index=i)
    return out


def _matches(entry: dict, kernel: dict, check: dict) -> bool:
    names = (kernel_label(kernel), str(kernel.get("kernel")))
    if not any(fnmatch.fnmatchcase(n, entry["kernel"]) for n in names):
        return False
    values = {"buffer": check["buffer"], "layout": check["layout"], "property": check.get("property", "address"),
              "cause": check.get("cause") or ("unclassified" if check["verdict"] == Verdict.COUNTEREXAMPLE
                                              else check["verdict"])}
    return all(entry[k] is None or fnmatch.fnmatchcase(values[k], entry[k]) for k in MATCH_KEYS)


def gate(kernels: List[dict], baseline: Optional[Dict[str, object]], accepted: List[dict],
         today: Optional[_dt.date] = None) -> dict:
    """Mark each finding of ``kernels`` (in place: ``baseline`` "new"/"unchanged" when a
    baseline is given, ``accepted`` {reason, entry} when an entry applies) and return the
    gate's summary: fingerprints ``new``, ``unchanged``, ``gone`` (in the baseline, and its
    check was made this run with another outcome), ``unchecked`` (in the baseline, its check
    not made this run: another --check, --buffer or --layout, or a kernel not scanned),
    ``accepted``, ``failing`` (new, or any without a baseline, and not accepted), ``changed``
    ([fingerprint, how]: findings of the baseline that fail another way, :func:`change`;
    marked ``baseline_change`` on the check; those :func:`worse` says are counted new and
    fail the gate, the others unchanged), and the entries ``stale``
    (matching nothing) and ``expired``.  ``baseline``: fingerprint -> :func:`signature` (or
    a bare verdict)."""
    today = today or _dt.date.today()
    out = {"baseline": baseline is not None, "findings": 0, "new": [], "unchanged": [], "gone": [], "accepted": [],
           "failing": [], "changed": [], "stale": [], "expired": []}
    used = set()
    for fp, (k, c) in findings(kernels).items():
        out["findings"] += 1
        for mark in ("baseline", "accepted", "baseline_change"):
            c.pop(mark, None)                 # marks of an earlier gate over the same reports
        if baseline is not None:
            c["baseline"] = "unchanged" if fp in baseline else "new"
            out[c["baseline"]].append(fp)
            how = change(baseline[fp], signature(c)) if fp in baseline else ""
            if how:
                c["baseline_change"] = how
                out["changed"].append([fp, how])
                if worse(baseline[fp], signature(c)):
                    c["baseline"] = "new"            # another bug under the same name: it fails the gate
                    out["unchanged"].remove(fp)
                    out["new"].append(fp)
        for e in accepted:
            if not _matches(e, k, c):
                continue
            used.add(e["index"])              # every entry that matches is in use, the first one applies
            if "accepted" not in c and (e["expires"] is None or e["expires"] >= today):
                c["accepted"] = {"reason": e["reason"], "entry": e["index"]}
                out["accepted"].append(fp)
        if "accepted" not in c and c.get("baseline", "new") == "new":
            out["failing"].append(fp)
    if baseline is not None:
        current = set(findings(kernels))
        checked = {check_of(fingerprint(k, c)) for k in kernels for c in k.get("checks") or []}
        missing = sorted(fp for fp in baseline if fp not in current)
        out["gone"] = [fp for fp in missing if check_of(fp) in checked]
        out["unchecked"] = [fp for fp in missing if check_of(fp) not in checked]   # not asked this run: not gone
    for e in accepted:
        view = {"entry": e["index"], "kernel": e["kernel"], "reason": e["reason"]}
        if e["expires"] is not None and e["expires"] < today:
            out["expired"].append(dict(view, expires=e["expires"].isoformat()))
        elif e["index"] not in used:
            out["stale"].append(view)
    return out


def gate_status(summary: dict, kernels: List[dict]) -> int:
    """Exit status of a gated run: 1 when a failing finding is a counterexample, 2 when the
    failing ones are all unknown, unsupported or unreachable, 0 when none fails."""
    failing = set(summary["failing"])
    verdicts = [c["verdict"] for fp, (_, c) in findings(kernels).items() if fp in failing]
    if Verdict.COUNTEREXAMPLE in verdicts:
        return 1
    return 2 if verdicts else 0


def cause_state(cause: dict, summary: dict) -> Tuple[Optional[str], List[str]]:
    """(SARIF baselineState of a root cause: "new" when all its findings are new,
    "unchanged" when none is new or fails another way (``changed``), else "updated"; None
    without a baseline) and the fingerprints of its findings that are accepted."""
    fps = cause.get("findings") or []
    new = [fp for fp in fps if fp in set(summary.get("new") or [])]
    moved = {fp for fp, _ in summary.get("changed") or []}
    state = None
    if summary.get("baseline"):
        state = "new" if fps and len(new) == len(fps) else \
            "unchanged" if not new and not moved.intersection(fps) else "updated"
    return state, [fp for fp in fps if fp in set(summary.get("accepted") or [])]


def shown(value, limit: int = 80) -> str:
    """``value`` for one line of output: control characters escaped, at most ``limit``
    characters (a reason or glob from the accepted file cannot forge lines)."""
    text = str(value).encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


def gate_text(summary: dict) -> List[str]:
    """The text lines of the gate: counts, then every failing, gone, stale and expired item."""
    n = {k: len(v) for k, v in summary.items() if isinstance(v, list)}
    total = summary.get("findings", n["new"] + n["unchanged"])
    if summary.get("baseline"):
        moved = {fp for fp, _ in summary.get("changed") or []}
        other = len(moved & set(summary["new"]))           # another bug under a baseline finding's name
        still = len(moved & set(summary["unchanged"]))     # the same bug, its smallest shape moved up
        head = (f"gate: {n['failing']} failing (new and not accepted) of {total} finding(s): {n['new']} new"
                + (f" ({other} of them failing another way under a baseline finding's name)" if other else "")
                + f", {n['unchanged']} unchanged" + (f" ({still} of them failing another way, not worse)" if still else "")
                + f", {n['accepted']} of them accepted; {n['gone']} gone since the baseline")
    else:
        head = (f"gate (no baseline: every finding counts): {n['failing']} failing (not accepted) of {total} "
                f"finding(s), {n['accepted']} accepted")
    head += f"; accepted entries: {n['stale']} stale, {n['expired']} expired"
    if n.get("unchecked"):
        head += f"; {n['unchecked']} baseline finding(s) of checks this run did not make (not gone)"
    lines = ["", head]
    lines += [f"  FAILING {fp}" for fp in summary["failing"]]
    lines += [f"  gone {fp}" for fp in summary["gone"]]
    new = set(summary.get("new") or [])
    lines += [f"  changed {fp}: {shown(how, 300)} " + ("(another bug under the same name, or failing where the "
                                                        "baseline held: counted new)" if fp in new else
                                                        "(still failing with the same cause, not worse: unchanged)")
              for fp, how in summary.get("changed") or []]
    lines += [f"  stale accepted entry {e['entry']} ({shown(e['kernel'])}): matches no finding; reason was: "
              f"{shown(e['reason'], 200)}" for e in summary["stale"]]
    lines += [f"  expired accepted entry {e['entry']} ({shown(e['kernel'])}, expired {e['expires']}): its findings "
              f"count again" for e in summary["expired"]]
    return lines
