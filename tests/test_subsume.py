"""A claim proved on a wider domain answers a narrower one (issue 39, direction 3).

Specification: a routed rerun of a check (the same kernel, buffer and layout with one host
entry point's routing added to the domain) asks, at every access, the kernel check's claim
under the kernel check's conditions plus the routing's.  A claim the kernel check proved under
conditions C is proved under any superset of C without a query; a query whose conditions do not
include all of C (a forged or stale record) is decided again, and a wrong kernel is still
refuted.  examples/lsed_three_paths.s reads LSE on three paths (proved in BHSD, one query per
path); examples/lsed_bas_shortcut.s borrows Q's batch stride (refuted in SBHD).
"""
import pytest

from addrsim.engine.explore import explore
from addrsim.ir import expr as X
from addrsim.loader import codeobj
from addrsim.loader.disasm import disassemble
from addrsim.model.models import load_models
from addrsim.prove import check as C
from addrsim.prove.machines import initial_machine
from addrsim.prove.replay import Subject
from addrsim.prove.targets import pointers_in

from test_examples import MODEL, build


def _kernel(name, tmp_path):
    co_path = build(name, tmp_path)
    co = codeobj.load(co_path)
    k = co.kernels[0]
    code = disassemble(co_path)[k.symbol]
    ms = load_models([MODEL])
    m, _ = initial_machine(k, co.arch, ms)
    ex = explore(code, m, lambda a: pointers_in(a.base), {"Lse", "D"})
    return Subject(k, co.arch, code, ms), ex


def _counting(monkeypatch):
    calls = []
    real = C.decide_query

    def counted(*a, **kw):
        calls.append(a[1])
        return real(*a, **kw)
    monkeypatch.setattr(C, "decide_query", counted)
    return calls


def test_claims_proved_on_the_kernels_domain_answer_the_same_conditions_without_a_query(tmp_path, monkeypatch):
    sub, ex = _kernel("lsed_three_paths", tmp_path)
    calls = _counting(monkeypatch)
    first = C.check(sub, ex, "lse", "bhsd")
    assert first.verdict == "proved" and first.proved_cases and calls
    n = len(calls)
    again = C.check(sub, ex, "lse", "bhsd", proved=frozenset(first.proved_cases))
    assert again.verdict == "proved" and len(calls) == n          # no query asked


def test_a_record_with_a_condition_the_query_lacks_is_decided_again(tmp_path, monkeypatch):
    """A proof under C plus a condition the query does not have says nothing about the query."""
    sub, ex = _kernel("lsed_three_paths", tmp_path)
    first = C.check(sub, ex, "lse", "bhsd")
    extra = X.digest(X.ult(X.Sym("seqlen_q", 64, "shape"), X.Const(7, 64)))
    forged = frozenset((dk, cs | {extra}) for dk, cs in first.proved_cases)
    calls = _counting(monkeypatch)
    again = C.check(sub, ex, "lse", "bhsd", proved=forged)
    assert again.verdict == "proved" and calls


def test_a_wrong_kernel_is_refuted_whatever_proofs_of_other_claims_are_passed(tmp_path):
    """lsed_bas_shortcut in SBHD: records of its BHSD proofs (other claims: another layout's
    strides) and forged records of its own claims under more conditions leave it refuted."""
    sub, ex = _kernel("lsed_bas_shortcut", tmp_path)
    bhsd = C.check(sub, ex, "lse", "bhsd")
    plain = C.check(sub, ex, "lse", "sbhd")
    assert plain.verdict == "counterexample"
    extra = X.digest(X.ult(X.Sym("batch", 64, "shape"), X.Const(2, 64)))
    own = {(X.digest(claim), frozenset(X.digest(c) for c in conds) | {extra})
           for _, conds, claim, _, _ in plain.cases}
    again = C.check(sub, ex, "lse", "sbhd", proved=frozenset(bhsd.proved_cases) | frozenset(own))
    assert again.verdict == "counterexample"
    assert again.counterexample.shape == plain.counterexample.shape


@pytest.mark.parametrize("layout", ["bhsd", "sbhd"])
def test_the_routed_verdicts_are_those_of_a_rerun_without_the_records(tmp_path, monkeypatch, layout):
    """api.verify's routing (reruns with the kernel check's records) is the routing of reruns
    that decide every query again."""
    import addrsim.api as api
    co = build("lsed_bas_shortcut", tmp_path)

    def routing():
        rep = api.verify(co, buffers=["lse", "d"], layouts=[layout], model_files=[MODEL], properties=["address"])
        return [(c["buffer"], c["verdict"], c.get("routing"), (c.get("counterexample") or {}).get("shape"))
                for c in rep["kernels"][0]["checks"]]
    with_records = routing()
    real = api.check
    monkeypatch.setattr(api, "check", lambda *a, proved=frozenset(), **kw: real(*a, **kw))
    assert routing() == with_records
