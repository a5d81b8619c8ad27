"""The query cache on disk (addrsim.prove.store): what it keeps, what it never keeps, and that a
second process reads the first one's answers."""
import json
import os
import subprocess
import sys

import pytest

from addrsim.prove.store import Store, _dec, _enc, _well_formed, open_store, store_path
from addrsim.prove.verdict import Counterexample, ReplayFailure, Witness

from test_examples import MODEL, build

BOUNDS = ["--bound", "nhead_q=1:8", "--bound", "nhead_k=1:8", "--bound", "seqlen_q=1:4096",
          "--bound", "seqlen_k=1:4096", "--bound", "batch=1:16"]


def test_values_round_trip():
    cex = Counterexample({"batch": 2}, {"batch_id": 1, "head_id": 0, "kv_tile": 0}, {"BAs": 7}, 12, 8, 3, 0x40,
                         False, {"seqstart_q": {0: 0, 1: 64}}, "", 1 << 30, "overflow", 2)
    model = {"batch": 2, "Lse[]": {0: 5, 4: 9}}
    for v in (("refuted", model, None, True, "(check-sat)", 5000), cex, Witness({"batch": 2}, {"batch_id": 1}, 5, 256),
              ReplayFailure("budget", "not replayed: more than 60000 instructions"), ("int", "abc"), None):
        assert _dec(json.loads(json.dumps(_enc(v)))) == v


def test_answers_within_a_resource_budget_are_kept_but_not_wall_clock_ones(tmp_path):
    """Budgets are resource units and the budget is part of the key, so "unknown" is a fact
    about (query, budget) and is kept; an answer cut by the wall-clock safety net is not."""
    s = open_store(tmp_path)
    s["q1"] = ("unknown", None, "solver gave up (max. resource limit exceeded) within 10 Mru", True, None, 10**7)
    s["q2"] = ("proved", None, None, True, None, 1200)
    s[("int", "q3")] = "unknown"
    s[("witness-model", "q4")] = "no witness found: wall-clock limit: the solver passed the wall-clock safety limit"
    s["q5"] = ("unknown", None, "wall-clock limit: the solver passed the wall-clock safety limit", True, None, 7)
    again = open_store(tmp_path)
    assert set(again) == {"q1", "q2", ("int", "q3")} and again.earlier("q2")
    assert again["q1"][-1] == 10**7          # the units it cost, charged again on a hit


def test_every_shape_the_prover_stores_is_read_back(tmp_path):
    """Each kind of entry a check writes is read back by the next run, none rejected: the
    (proved, units) of a claim on the domain alone or a V# bit proved 0 were rejected as
    malformed (26 lines of the README kernel's run, "ignored" on every warm run)."""
    s = open_store(tmp_path)
    entries = {"a": ("proved", None, None, True, None, 1200), "b": (True, 0), "c": (False, 657817),
               "d": ("core", ["batch <= 1"]), "e": ("report", {"kernels": []})}
    for k, v in entries.items():
        s[k] = v
    again = open_store(tmp_path)
    assert again.rejected == 0 and {k: again[k] for k in entries} == entries
    for bad in ((True, -1), (True, True), (1, 5)):
        assert not _well_formed(bad)


def test_a_torn_line_is_skipped(tmp_path):
    s = open_store(tmp_path)
    s["q"] = ("proved", None, None, True, None, 1200)
    with open(s.path, "a") as fh:
        fh.write('{"k": "half')
    assert dict(open_store(tmp_path)) == {"q": ("proved", None, None, True, None, 1200)}


def test_an_edited_line_is_not_believed(tmp_path):
    s = open_store(tmp_path)
    s["q"] = ("refuted", {"batch": 3}, None, True, None, 1200)
    line = s.path.read_text()
    forged = line.replace('"refuted"', '"proved"')            # the checksum no longer matches
    unsigned = '{"k":"q2","v":{"t":["proved",null,null,true,null,1200]}}\n'
    s.path.write_text(forged + unsigned)
    assert dict(open_store(tmp_path)) == {}


def test_a_cache_that_cannot_be_used_is_in_memory(tmp_path):
    (tmp_path / "f").write_text("x")
    for d in (tmp_path / "f", "/proc/nope", "/proc"):
        s = open_store(d)
        s["q"] = ("proved", None, None, True, None, 1200)                # never raises
        assert s["q"][0] == "proved"
    d = tmp_path / "dir"
    p = store_path(d)
    p.mkdir(parents=True)                                         # the cache file is a folder
    s = open_store(d)
    s["q"] = ("proved", None, None, True, None, 1200)
    assert s.path is None


def _verify(co, cache, out, layouts=("sbhd", "bhsd"), stderr=None):
    env = dict(os.environ)
    env.pop("ADDRSIM_NO_CACHE", None)
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(co), "--model", MODEL, *BOUNDS,
                        "--buffer", "lse", *[x for lay in layouts for x in ("--layout", lay)], "--check", "address",
                        "--cache-dir", str(cache), "--json", str(out)], capture_output=True, text=True, env=env)
    assert p.returncode in (0, 1), p.stderr
    if stderr is not None:
        stderr.append(p.stderr)
    return json.loads(out.read_text())


def _essence(rep):
    out = []
    for k in rep["kernels"]:
        for c in k["checks"]:
            x, w = c["counterexample"], c["witness"]
            out.append((c["buffer"], c["layout"], c["verdict"], c.get("cause"),
                        x and (x["shape"], x["coords"], x["address"]), w and (w["shape"], w["coords"], w["offset"])))
    return out


def test_a_second_process_reads_the_first_ones_answers(tmp_path):
    co = build("lsed_bas_shortcut", tmp_path)
    first = _verify(co, tmp_path / "cache", tmp_path / "a.json")
    (f,) = (tmp_path / "cache").glob("queries-*.jsonl")
    answers = lambda: [x for x in f.read_text().splitlines() if not x.startswith('{"k":"report:')]  # noqa: E731
    kept = len(answers())
    assert kept > 0
    # the layouts in the other order: another report (not read back whole), the same queries
    second = _verify(co, tmp_path / "cache", tmp_path / "b.json", layouts=("bhsd", "sbhd"))
    assert sorted(_essence(second)) == sorted(_essence(first))   # the same verdicts, shapes and witnesses
    assert len(answers()) == kept                        # nothing decided again (the new report aside)
    sb = {c["layout"]: c for c in second["kernels"][0]["checks"]}
    assert sb["sbhd"]["counterexample"]["replayed_on"] == "an earlier run of the same query"
    assert sb["bhsd"]["witness"]["replayed_on"].startswith("an earlier run")


# ----------------------------------------------------------------------------- sibling kernels

def test_canonical_names_do_not_depend_on_where_the_code_lies():
    """Loop-carried and opaque symbols are renamed by rank: a sibling whose code moved (its
    loop heads at other addresses, other opaque numbers) gets the same query key, and the
    renaming is a bijection (distinct symbols keep distinct names)."""
    from addrsim.ir import expr as X
    from addrsim.prove.query import query_key

    def query(h1, h2, n):
        a, b = X.Sym(f"v3@{h1:#x}", 32, "carried"), X.Sym(f"v3@{h2:#x}", 32, "carried")
        o = X.Sym(f"opaque{n}", 32, "opaque")
        s = X.Sym("seqlen_q", 32, "shape")
        return X.eq(X.add(a, o), X.add(b, s)), [X.ult(a, b)]

    c1, k1 = query(0x100, 0x200, 7)
    c2, k2 = query(0x108, 0x208, 9)
    n1, n2 = X.canonical_names([c1] + k1), X.canonical_names([c2] + k2)
    assert sorted(n1.values()) == sorted(n2.values()) == ["opaque#0", "v3@L0", "v3@L1"]
    assert query_key(("t",), c1, k1, n1) == query_key(("t",), c2, k2, n2)
    assert query_key(("t",), c1, k1) != query_key(("t",), c2, k2)        # the raw names differ
    swapped, ks = query(0x200, 0x100, 7)                                   # the heads' roles exchanged
    assert query_key(("t",), swapped, ks, X.canonical_names([swapped] + ks)) != query_key(("t",), c1, k1, n1)
    model = {"v3@0x100": 5, "opaque7": 1, "batch": 2, "Lse[]": {0: 4}}
    back = {c: n for n, c in n1.items()}
    assert X.rename_model(X.rename_model(model, n1), back) == model


def test_a_sibling_whose_loop_moved_reuses_the_loop_answers(tmp_path, monkeypatch):
    """The same loop kernel with one instruction inserted before the loop (every loop head
    moves): its loop obligations are read from the cache the first kernel filled, and it is
    still proved in every iteration.  Without the first kernel's answers they are solved."""
    import addrsim.prove.check as C
    from addrsim.api import verify
    from test_listing import objdump, patch

    co = build("lse_loop", tmp_path)
    moved = tmp_path / "moved.txt"
    moved.write_text(patch(objdump(co), "s_load_dword s16, s[0:1], 0x14", "s_nop 0\ns_load_dword s16, s[0:1], 0x14"))
    solved = []
    real = C.solve
    monkeypatch.setattr(C, "solve", lambda *a, **k: solved.append(1) or real(*a, **k))

    def run(path, cache):
        rep = verify(path, ["lse"], ["bhsd"], like=co if path == moved else None, model_files=[MODEL],
                     properties=["address"], cache=cache)
        return rep["kernels"][0]["checks"][0]

    cache = Store()
    first = run(co, cache)
    assert first["verdict"] == "proved" and first["all_iterations"] is True and solved
    solved.clear()
    second = run(moved, cache)
    assert second["verdict"] == "proved" and second["all_iterations"] is True
    assert solved == []
    alone = run(moved, Store())
    assert alone["verdict"] == "proved" and solved


def test_a_routing_core_is_decided_once(monkeypatch):
    """The minimal unsat core of routing conditions is kept in the query cache by its
    structural key (budgeted in resource units, so a function of the key): asked again, by
    this check or a sibling kernel's, it costs no solver call."""
    from addrsim.ir import expr as X
    from addrsim.prove import domain as D

    b = X.Sym("batch", 32, "shape")
    named = [("batch >= 4", X.ule(X.Const(4, 32), b)), ("batch <= 2", X.ule(b, X.Const(2, 32))),
             ("batch >= 1", X.ule(X.Const(1, 32), b))]
    calls = []
    real = D._core
    monkeypatch.setattr(D, "_core", lambda *a: calls.append(1) or real(*a))
    cache = Store()
    assert D.core([], named, cache=cache) == ["batch >= 4", "batch <= 2"]
    assert D.core([], named, cache=cache) == ["batch >= 4", "batch <= 2"] and len(calls) == 1
    assert D.core([], named[::-1], cache=cache) is not None and len(calls) == 2   # order and texts are in the key


def test_a_routing_core_skips_the_solver_where_the_counterexample_satisfies_the_rest(monkeypatch):
    """Routing conditions that mask a kernel counterexample: deleting a condition from the core
    leaves a set the counterexample satisfies (a model of the base), so that set is
    satisfiable and the condition stays, with no solver call (the README kernel's dQ SBHD core
    spent 2.4 of its 3.6 s on such a call, answered "unknown").  The core is the same."""
    from addrsim.backends import z3_run
    from addrsim.ir import expr as X
    from addrsim.prove import domain as D

    b = X.Sym("batch", 32, "shape")
    conds = [X.ule(X.Const(4, 32), b), X.ule(b, X.Const(2, 32))]
    named = [("batch >= 4", conds[0]), ("batch <= 2", conds[1])]
    at_five = lambda idx: all(X.evaluate(conds[i], {"batch": 5}) for i in idx)   # noqa: E731
    checks = []
    real = z3_run.Isolated.check
    monkeypatch.setattr(z3_run.Isolated, "check", lambda self, *a: checks.append(1) or real(self, *a))
    assert D.core([], named) == ["batch >= 4", "batch <= 2"] and len(checks) == 3
    checks.clear()
    assert D.core([], named, holds_at=at_five) == ["batch >= 4", "batch <= 2"] and len(checks) == 2
    checks.clear()
    assert D.core([], named[:1], holds_at=at_five) is None and checks == []   # the model satisfies them all


def test_a_routing_core_asks_the_conditions_the_counterexample_violates_first(monkeypatch):
    """A kernel counterexample at batch 5 (base: batch >= 4) masked by routing: the conditions
    it violates are asked alone of Bitwuzla first (the README kernel's LSE/D SBHD cores: unsat
    in about 700 calls where Z3 gave up at 20 Mru), with no Z3 call; when they are not unsat
    alone, the Z3 core over every condition answers, as before."""
    from addrsim.backends import z3_run
    from addrsim.ir import expr as X
    from addrsim.prove import domain as D

    b, h = X.Sym("batch", 32, "shape"), X.Sym("nhead_q", 32, "shape")
    le2, ge1, ge4 = X.ule(b, X.Const(2, 32)), X.ule(X.Const(1, 32), h), X.ule(X.Const(4, 32), b)
    named = [("nhead_q >= 1", ge1), ("batch <= 2", le2)]
    cex = {"batch": 5, "nhead_q": 1}
    at_cex = lambda idx: all(X.evaluate(named[i][1], cex) for i in idx)   # noqa: E731
    checks = []
    real = z3_run.Isolated.check
    monkeypatch.setattr(z3_run.Isolated, "check", lambda self, *a: checks.append(1) or real(self, *a))
    assert D.core([ge4], named, holds_at=at_cex) == ["batch <= 2"] and checks == []
    # base: batch >= 4 or nhead_q == 0; "batch <= 2" alone leaves nhead_q == 0: both are needed
    either = X.bor(ge4, X.eq(h, X.Const(0, 32)))
    assert D.core([either], named, holds_at=at_cex) == ["nhead_q >= 1", "batch <= 2"] and checks
    # the indices it violates are in the key: a different counterexample is another question
    assert D.core_key([ge4], named, D.CORE_RLIMIT, (1,)) != D.core_key([ge4], named, D.CORE_RLIMIT, ())


def test_a_report_with_nothing_undecided_is_read_back_whatever_the_json_folder(tmp_path):
    """A fresh-user trial (issue 40): the same verify with --json (obligations would go beside
    it) decided every query again.  A report that names no obligation does not depend on the
    obligations folder: it is read back; a report that does is keyed by the folder too."""
    from addrsim.commands.common import smt_free
    co = build("lsed_bas_shortcut", tmp_path)
    first = _verify(co, tmp_path / "cache", tmp_path / "a.json")
    (tmp_path / "elsewhere").mkdir()
    errs = []
    again = _verify(co, tmp_path / "cache", tmp_path / "elsewhere" / "b.json", stderr=errs)
    assert _essence(again) == _essence(first) and "report read from the query cache" in errs[0]
    assert smt_free(first)
    assert not smt_free({"kernels": [{"checks": [{"reason": "budget spent (obligation written to /x/a.smt2)"}]}]})


def test_the_same_command_again_reads_the_whole_report_back(tmp_path):
    """verify with the same file, models and settings: the report of the first run, each kernel
    marked cached, said on stderr; another setting (a layout less) decides again."""
    co = build("lsed_bas_shortcut", tmp_path)
    first = _verify(co, tmp_path / "cache", tmp_path / "a.json")
    errs = []
    again = _verify(co, tmp_path / "cache", tmp_path / "b.json", stderr=errs)
    assert _essence(again) == _essence(first)
    assert all(k["cached"] for k in again["kernels"])
    assert "report read from the query cache" in errs[0]
    other = _verify(co, tmp_path / "cache", tmp_path / "c.json", layouts=("bhsd",), stderr=errs)
    assert not any(k.get("cached") for k in other["kernels"]) and "report read" not in errs[1]


def test_display_formulas_are_stored_and_read_back_the_same(tmp_path, monkeypatch):
    """The sympy formulas of a check (extracted offset, difference, shape form: display only)
    go to the store as trees; a second process-like run with a fresh Store on the same file
    expands none of them and its report equals the first one's, times aside."""
    import addrsim.prove.check as C
    from addrsim.api import verify
    co = build("lsed_bas_shortcut", tmp_path)

    def run():
        rep = verify(co, ["lse"], ["sbhd", "bhsd"], model_files=[MODEL], properties=["address"],
                     cache=open_store(tmp_path / "c"))
        out = []
        for c in rep["kernels"][0]["checks"]:       # the replays say "an earlier run" the second time
            out.append({k: ({x: y for x, y in v.items() if x != "replayed_on"} if isinstance(v, dict) else v)
                        for k, v in c.items() if k != "time_s"})
        return out

    first = run()
    assert any(c["extracted_shape"] for c in first)
    monkeypatch.setattr(C, "formulas", lambda *a, **k: pytest.fail("formulas expanded again"))
    assert run() == first


def test_a_rounding_sibling_reads_the_store_coverage_judgements_and_replays(corpus, monkeypatch):
    """gfx942 hd128 bf16 a16 rtz after rtne: their code differs (rtz is 612 instructions
    shorter: the bf16 conversions no address reads) but the sliced runs of their stores and
    of the replayed accesses are the same (engine.slice.sliced_program, prove.runs), so rtz's
    dK store coverage and its Q counterexample's replay are read from what rtne stored (dK's
    replay runs past its budget, which is not kept), and its checks equal fresh ones."""
    import addrsim.prove.coverage as COV
    import addrsim.prove.replay as REP
    from addrsim.api import verify
    d = corpus / "gfx942" / "fmha_v3_bwd"
    runs = []
    real = REP.run_concrete
    monkeypatch.setattr(REP, "run_concrete", lambda code, m, pc, *a: runs.append(pc) or real(code, m, pc, *a))

    def checks(name, cache):
        rep = verify(d / f"bwd_hd128_bf16_a16_{name}.co", ["q", "dk"], ["bhsd"], properties=["address"], cache=cache)
        return [{k: v for k, v in c.items() if k != "time_s"} for c in rep["kernels"][0]["checks"]]

    alone = checks("rtz", Store())
    q_pc = alone[0]["counterexample"]["access_pc"]
    assert alone[0]["buffer"] == "q" and q_pc in runs
    cache = Store()
    checks("rtne", cache)
    assert any(isinstance(k, tuple) and k[0] == "run-result" for k in cache)
    monkeypatch.setattr(COV, "_stores", lambda *a: pytest.fail("the workgroup was run again"))
    runs.clear()
    assert checks("rtz", cache) == alone
    assert q_pc not in runs
