"""`--html FILE`: one self-contained page per run (no network, no script), drawn from the JSON
form of the reports.

Owns :func:`to_html`.  The page holds: the kernels x buffers x layouts matrix coloured by
verdict (each cell's reason in its tooltip); per kernel its summary line and root causes
(:mod:`addrsim.report.causes`), each wrap or host cast with its boundary drawn in the
(nhead_q, seqlen_q) plane at the smallest failing batch against the device's memory (the
family's ``memory`` formula and limit); and the LSE rows each (batch_id, head_id) reads in
each layout over the rows it should read: the kernel's own offsets in hardware arithmetic
(``rows_read`` of the check, :func:`addrsim.prove.differential.rows_read`), or where a report
lacks them the extracted offset in shape variables (``extracted_shape``).  Formulas are read by sympy only when every name in them is a shape variable,
grid id, lane or floor/Mod/ceiling (:func:`_reader`): the page never evaluates other text.
May import addrsim.report.causes and addrsim.report.gate.
"""
from __future__ import annotations

import html
import math
import re
from typing import Callable, Dict, List, Optional

from addrsim.report.causes import SAFE_NAMES, read_formula, root_causes, summary_line
from addrsim.report.gate import kernel_label

COLOURS = {"proved": "#4caf50", "counterexample": "#e53935", "latent": "#fb8c00", "unknown": "#fdd835",
           "unsupported": "#9e9e9e", "unreachable": "#90caf9"}
MARKS = {"proved": "ok", "counterexample": "CEX", "unknown": "?", "unsupported": "unsup", "unreachable": "unr"}
NAMES = SAFE_NAMES | {"ceiling", "batch", "nhead_k", "seqlen_k"}
CSS = """body{font:14px sans-serif;margin:24px;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:center;font-size:12px}th{background:#f3f3f3}
td.k{text-align:left;font-family:monospace}.cause{border:1px solid #ddd;border-radius:6px;padding:8px 12px;
margin:10px 0}.mono{font-family:monospace;font-size:12px}.legend span{display:inline-block;padding:1px 8px;
margin-right:6px;color:#000}h2{margin-top:32px}svg{background:#fff;border:1px solid #ddd}"""


def _e(text) -> str:
    return html.escape(str(text))


def _reader(text: str, names) -> Optional[Callable[..., float]]:
    """A function of ``names`` (keyword arguments) that evaluates the formula ``text``, or
    None when :func:`addrsim.report.causes.read_formula` does not read it over ``names``
    (never evaluated then)."""
    expr = read_formula(text, set(names) & NAMES)
    if expr is None:
        return None
    try:
        import sympy
        f = sympy.lambdify([sympy.Symbol(n) for n in names], expr, "math")
        return lambda **kw: float(f(*[kw.get(n, 0) for n in names]))
    except Exception:   # display only
        return None


def _matrix(kernels: List[dict]) -> str:
    """The kernels x (property, buffer) x layouts table, each cell coloured by its verdict."""
    cols: Dict[tuple, List[str]] = {}
    for k in kernels:
        for c in k["checks"]:
            lays = cols.setdefault((c.get("property", "address"), c["buffer"]), [])
            if c["layout"] not in lays:
                lays.append(c["layout"])
    head1 = "".join(f"<th colspan='{len(l)}'>{_e(b)}{' bounds' if p == 'bounds' else ''}</th>"
                    for (p, b), l in cols.items())
    head2 = "".join(f"<th>{_e(x)}</th>" for l in cols.values() for x in l)
    rows = []
    for k in kernels:
        got = {(c.get("property", "address"), c["buffer"], c["layout"]): c for c in k["checks"]}
        cells = []
        for (p, b), lays in cols.items():
            for lay in lays:
                c = got.get((p, b, lay))
                cells.append(_cell(c))
        rows.append(f"<tr><td class='k'>{_e(kernel_label(k))}</td>{''.join(cells)}</tr>")
    legend = "".join(f"<span style='background:{v}'>{_e(k)}</span>" for k, v in COLOURS.items())
    return (f"<p class='legend'>{legend}</p><div style='overflow-x:auto'><table id='matrix'><tr>"
            f"<th rowspan='2'>kernel</th>{head1}</tr><tr>{head2}</tr>{''.join(rows)}</table></div>")


def _cell(c: Optional[dict]) -> str:
    if c is None:
        return "<td>-</td>"
    v = c["verdict"]
    latent = v == "counterexample" and (c.get("routing") or {}).get("reachable") is False
    x = c.get("counterexample") or {}
    w = c.get("witness") or {}
    tip = c.get("reason") or (" ".join(f"{a}={b}" for a, b in (x.get("shape") or {}).items())) or (
        "every shape of the domain; witness " + " ".join(f"{a}={b}" for a, b in (w.get("shape") or {}).items())
        if v == "proved" else "")
    colour = COLOURS["latent" if latent else v] if (latent or v in COLOURS) else "#fff"
    return f"<td style='background:{colour}' title='{_e(v)}: {_e(tip)}'>{MARKS.get(v, _e(v))}</td>"


PLANE = {"nhead_q": [1 << i for i in range(9)], "seqlen_q": [1 << i for i in range(21)]}
"""The (nhead_q, seqlen_q) points of a boundary plot: powers of two over the shape bounds."""
VARS = ("batch", "nhead_q", "nhead_k", "seqlen_q", "seqlen_k", "hdim_q", "hdim_v")


def _boundary_svg(text: str, smallest: dict, memory: Optional[dict]) -> str:
    """An SVG of the (nhead_q, seqlen_q) plane (log2 axes) at the smallest shape's batch:
    red where ``text`` (``lhs >= rhs`` or ``lhs != 0``, shape variables only) holds and every
    tensor fits the device, green where it does not hold, grey past the device's memory; the
    smallest shape as a black ring.  "" when the boundary cannot be read."""
    parts = [re.fullmatch(r"(.+) (>=|!=) (.+)", p) for p in text.split(" and ")]
    sides = [(_reader(m.group(1), VARS), m.group(2), _reader(m.group(3), VARS)) for m in parts if m]
    mem = _reader(memory["bytes"], VARS) if memory else None
    if not sides or len(sides) < len(parts) or any(l is None or r is None for l, _, r in sides):
        return ""
    sh = smallest["shape"]
    w, h, left, top = 18, 11, 70, 10
    cells = []
    for i, nh in enumerate(PLANE["nhead_q"]):
        for j, sq in enumerate(PLANE["seqlen_q"]):
            pt = dict(sh, nhead_q=nh, seqlen_q=sq, nhead_k=min(sh.get("nhead_k", nh), nh),
                      seqlen_k=sq if sh.get("seqlen_k") == sh.get("seqlen_q") else sh.get("seqlen_k", sq))
            try:
                holds = all(l(**pt) >= r(**pt) if op == ">=" else l(**pt) != r(**pt) for l, op, r in sides)
                fits = mem is None or not memory.get("limit") or mem(**pt) <= memory["limit"]
            except (ArithmeticError, TypeError, ValueError):
                return ""
            colour = "#ddd" if not fits else "#e53935" if holds else "#a5d6a7"
            cells.append(f"<rect x='{left + j * w}' y='{top + (8 - i) * h}' width='{w}' height='{h}' "
                         f"fill='{colour}'><title>nhead_q={nh} seqlen_q={sq}</title></rect>")
    sx = left + math.log2(max(sh.get("seqlen_q", 1), 1)) * w + w / 2
    sy = top + (8 - math.log2(max(sh.get("nhead_q", 1), 1))) * h + h / 2
    ticks = "".join(f"<text x='{left + j * w + 2}' y='{top + 9 * h + 12}' font-size='8'>{j}</text>"
                    for j in range(0, 21, 2))
    ticks += "".join(f"<text x='{left - 14}' y='{top + (8 - i) * h + 9}' font-size='8'>{1 << i}</text>"
                     for i in range(9))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{left + 21 * w + 10}' height='{top + 9 * h + 34}'>"
            f"{''.join(cells)}<circle cx='{sx:.1f}' cy='{sy:.1f}' r='5' fill='none' stroke='#000' stroke-width='2'/>"
            f"{ticks}<text x='{left}' y='{top + 9 * h + 28}' font-size='10'>log2 seqlen_q ({_e(_held(sh))}; "
            f"red: breaks and fits, green: right, grey: past device memory)</text>"
            f"<text x='2' y='{top + 4 * h}' font-size='10'>nhead_q</text></svg>")


def _rows(c: dict):
    """(shape, [(batch_id, head_id, first row or None, passes the range check)], source) of an
    LSE check: the kernel's own slice offsets (``rows_read``, hardware arithmetic) when the
    report has them, else ``extracted_shape`` evaluated at batch 2, nhead_q 2, seqlen_q 64;
    None when neither can be read."""
    got = c.get("rows_read")
    if got and got.get("slices"):
        rows = [(b, h, None if off is None else off / 4, ok) for b, h, off, ok in got["slices"]]
        return got["shape"], rows, "the kernel's address arithmetic (32-bit wraps included)"
    off = _reader(c.get("extracted_shape") or "", VARS + ("batch_id", "head_id", "kv_tile", "tid_x"))
    if off is None:
        return None
    shape = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 64, "seqlen_k": 64, "hdim_q": 128, "hdim_v": 128}
    try:
        rows = [(b, h, off(**shape, batch_id=b, head_id=h, kv_tile=0, tid_x=0) / 4, True)
                for b in range(2) for h in range(2)]
    except (ArithmeticError, TypeError, ValueError):
        return None
    return shape, rows, "the extracted offset read without wraps"


def _held(sh: dict) -> str:
    """What a boundary plane holds fixed besides (nhead_q, seqlen_q): the smallest shape's batch,
    nhead_k (at most nhead_q), seqlen_k (= seqlen_q when the smallest shape has them equal)."""
    kv = "seqlen_k = seqlen_q" if sh.get("seqlen_k") == sh.get("seqlen_q") else f"seqlen_k = {sh.get('seqlen_k')}"
    return f"batch = {sh.get('batch')}, nhead_k = min({sh.get('nhead_k', 1)}, nhead_q), {kv}"


def _rows_word(got) -> str:
    """Whether every slice reads its own rows at the drawn shape (``got``: :func:`_rows`; a
    counterexample's failing shape is usually far larger than the one drawn)."""
    if got is None:
        return ""
    shape, rows, _ = got
    right = all(start == (b * shape["nhead_q"] + h) * shape["seqlen_q"] and ok for b, h, start, ok in rows)
    return "at this shape every slice reads its own rows" if right else "at this shape some slices read other rows"


def _lse_rows_svg(got) -> str:
    """An SVG of the LSE rows each (batch_id, head_id) reads (``got``: :func:`_rows`; blue, red
    where it is not the row it should read or the V# refuses it, none where no lane reads)
    over the rows it should read (grey, the [batch, nhead_q, seqlen_q] fp32 buffer); "" when
    the offsets cannot be read."""
    if got is None:
        return ""
    shape, rows, source = got
    B, H, S = shape["batch"], shape["nhead_q"], shape["seqlen_q"]
    scale = 240.0 / max(B * H * S, 1)
    left, bars = 60, []
    for i, (b, hh, start, ok) in enumerate(rows):
        want = (b * H + hh) * S
        y = 10 + i * 22
        bars.append(f"<rect x='{left + want * scale:.1f}' y='{y}' width='{S * scale:.1f}' height='16' fill='#ccc'/>"
                    f"<text x='4' y='{y + 12}' font-size='10'>b{b} h{hh}</text>")
        if start is not None:
            right = start == want and ok
            bars.append(f"<rect x='{left + start * scale:.1f}' y='{y + 4}' width='{S * scale:.1f}' height='8' "
                        f"fill='{'#1e88e5' if right else '#e53935'}'><title>rows {start:g}..{start + S - 1:g}"
                        f"{'' if ok else ' (refused by the V# range check: reads 0)'}</title></rect>")
    width = left + 240 + S * scale + 40
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{20 + len(rows) * 22}'>"
            f"{''.join(bars)}</svg><div class='mono'>batch={B} nhead_q={H} seqlen_q={S}; from {_e(source)}</div>")


def _cause_html(r: dict, memory: Optional[dict]) -> str:
    """One root cause: its title, checks, boundary per layout (drawn for a wrap or host cast
    whose boundary is in shape variables), smallest shape, reach and fix."""
    sm = r.get("smallest") or {}
    shape = " ".join(f"{a}={b}" for a, b in (sm.get("shape") or {}).items())
    parts = [f"<div class='cause' id='cause-{r['id']}'><b>Root cause {r['id']}: {_e(r['title'])}</b>"]
    if r["checks"]:
        parts.append(f"<div>breaks {_e(', '.join(r['checks']))} ({_e(r['reach'])})</div>")
    drawn = set()
    for lay, b in r["boundary"].items():
        parts.append(f"<div class='mono'>boundary ({_e(lay)}): {_e(b)}</div>")
        if r["kind"] in ("wrap", "host cast", "formula") and sm and b not in drawn:
            drawn.add(b)                  # one drawing per distinct boundary
            parts.append(_boundary_svg(b, sm, memory))
    if sm:
        parts.append(f"<div class='mono'>smallest shape: {_e(shape)} ({_e(sm.get('check'))})</div>")
    if r.get("fix"):
        parts.append(f"<div>fix: {_e(r['fix'])}</div>")
    return "".join(parts) + "</div>"


def _kernel_html(k: dict) -> str:
    """A kernel's section: summary line, root causes, the LSE rows per layout."""
    causes = k.get("root_causes") or root_causes(k)
    out = [f"<h2>{_e(kernel_label(k))}</h2>",
           f"<p class='mono'>{_e(k['kernel'])}; host {_e(k.get('host') or 'none')}</p>",
           f"<p>summary: {_e(k.get('summary') or summary_line(k, causes))}</p>"]
    out += [_cause_html(r, k.get("memory")) for r in causes]
    lse = [c for c in k["checks"] if c["buffer"] == "lse" and c.get("property", "address") == "address"]
    rows = [(c, _rows(c)) for c in lse]
    rows = [(c, got, _lse_rows_svg(got)) for c, got in rows]
    if any(svg for _, _, svg in rows):
        out.append("<h3>LSE rows read per (batch_id, head_id) (blue; red: another slice's rows) "
                   "over the rows it should read (grey)</h3>")
        out += [f"<div>{_e(c['layout'])}: the check is {_e(c['verdict'])}; {_rows_word(got)}<br>{svg}</div>"
                for c, got, svg in rows if svg]
    return "".join(out)


def to_html(report: dict, title: str = "addrsim report") -> str:
    """The page of a run (``report``: ``{"tool", "version", "kernels": [...]}``, the JSON form):
    self-contained HTML5, no script, no external resource."""
    kernels = report.get("kernels") or []
    body = [f"<h1>{_e(title)}</h1>", f"<p>addrsim {_e(report.get('version', ''))}: {len(kernels)} kernel(s)</p>",
            _matrix(kernels)]
    gate = report.get("gate")
    if gate:
        body.append(f"<p id='gate'>gate: {len(gate['failing'])} failing, {len(gate['new'])} new, "
                    f"{len(gate['unchanged'])} unchanged, {len(gate['gone'])} gone, "
                    f"{len(gate['accepted'])} accepted</p>")
    body += [_kernel_html(k) for k in kernels]
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
