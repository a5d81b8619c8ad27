"""The query cache on disk (addrsim.prove.store): what it keeps, what it never keeps, and that a
second process reads the first one's answers."""
import json
import os
import subprocess
import sys

from addrsim.prove.store import Store, _dec, _enc, open_store, store_path
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
    again = Store(store_path(tmp_path))
    assert set(again) == {"q1", "q2", ("int", "q3")} and again.earlier("q2")
    assert again["q1"][-1] == 10**7          # the units it cost, charged again on a hit


def test_a_torn_line_is_skipped(tmp_path):
    s = open_store(tmp_path)
    s["q"] = ("proved", None, None, True, None, 1200)
    with open(s.path, "a") as fh:
        fh.write('{"k": "half')
    assert dict(Store(s.path)) == {"q": ("proved", None, None, True, None, 1200)}


def test_an_edited_line_is_not_believed(tmp_path):
    s = open_store(tmp_path)
    s["q"] = ("refuted", {"batch": 3}, None, True, None, 1200)
    line = s.path.read_text()
    forged = line.replace('"refuted"', '"proved"')            # the checksum no longer matches
    unsigned = '{"k":"q2","v":{"t":["proved",null,null,true,null,1200]}}\n'
    s.path.write_text(forged + unsigned)
    assert dict(Store(s.path)) == {}


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


def _verify(co, cache, out):
    env = dict(os.environ)
    env.pop("ADDRSIM_NO_CACHE", None)
    p = subprocess.run([sys.executable, "-m", "addrsim", "verify", str(co), "--model", MODEL, *BOUNDS,
                        "--buffer", "lse", "--layout", "sbhd", "--layout", "bhsd", "--check", "address",
                        "--cache-dir", str(cache), "--json", str(out)], capture_output=True, text=True, env=env)
    assert p.returncode in (0, 1), p.stderr
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
    kept = len(f.read_text().splitlines())
    assert kept > 0
    second = _verify(co, tmp_path / "cache", tmp_path / "b.json")
    assert _essence(second) == _essence(first)          # the same verdicts, shapes and witnesses
    assert len(f.read_text().splitlines()) == kept       # nothing decided again
    sb = {c["layout"]: c for c in second["kernels"][0]["checks"]}
    assert sb["sbhd"]["counterexample"]["replayed_on"] == "an earlier run of the same query"
    assert sb["bhsd"]["witness"]["replayed_on"].startswith("an earlier run")
