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
from addrsim.prove.verdict import Records

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
    again = C.check(sub, ex, "lse", "bhsd", known=Records(frozenset(first.proved_cases)))
    assert again.verdict == "proved" and len(calls) == n          # no query asked


def test_a_record_with_a_condition_the_query_lacks_is_decided_again(tmp_path, monkeypatch):
    """A proof under C plus a condition the query does not have says nothing about the query."""
    sub, ex = _kernel("lsed_three_paths", tmp_path)
    first = C.check(sub, ex, "lse", "bhsd")
    extra = X.digest(X.ult(X.Sym("seqlen_q", 64, "shape"), X.Const(7, 64)))
    assert first.proved_cases
    forged = frozenset((dk, cs | {extra}) for dk, cs in first.proved_cases)
    calls = _counting(monkeypatch)
    again = C.check(sub, ex, "lse", "bhsd", known=Records(forged))
    assert again.verdict == "proved" and calls


def test_a_wrong_kernel_is_refuted_whatever_proofs_of_other_claims_are_passed(tmp_path):
    """lsed_bas_shortcut in SBHD: records of its BHSD proofs (other claims: another layout's
    strides) and forged records of its own claims under more conditions leave it refuted."""
    sub, ex = _kernel("lsed_bas_shortcut", tmp_path)
    bhsd = C.check(sub, ex, "lse", "bhsd")
    plain = C.check(sub, ex, "lse", "sbhd")
    assert plain.verdict == "counterexample"
    extra = X.digest(X.ult(X.Sym("batch", 64, "shape"), X.Const(2, 64)))
    own = {(dk, cs | {extra}) for _, dk, cs in (C.fingerprint(claim, conds) for _, conds, claim, _, _ in plain.cases)}
    again = C.check(sub, ex, "lse", "sbhd", known=Records(frozenset(bhsd.proved_cases) | frozenset(own)))
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
    monkeypatch.setattr(api, "check", lambda *a, known=None, **kw: real(*a, **kw))
    assert routing() == with_records


# ----------------------------------------------------------------------------- across buffers

@pytest.mark.parametrize("name,layout,verdict", [("lsed_bas_shortcut", "bhsd", "proved"),
                                                 ("lsed_bas_shortcut", "sbhd", "counterexample")])
def test_d_takes_lse_decisions_of_the_same_claim_and_asks_nothing(tmp_path, monkeypatch, name, layout, verdict):
    """D is addressed like LSE (the same claim in LSE's names, the same conditions): after LSE's
    check, D's is decided without a query, with the verdict, shape and coordinates D's own
    queries give."""
    sub, ex = _kernel(name, tmp_path)
    alone = C.check(sub, ex, "d", layout)
    lse = C.check(sub, ex, "lse", layout)
    calls = _counting(monkeypatch)
    d = C.check(sub, ex, "d", layout, known=lse.records())
    assert alone.verdict == d.verdict == verdict and calls == []
    if verdict == "counterexample":
        assert lse.refuted_cases and d.counterexample.minimal
        assert (d.counterexample.shape, d.counterexample.coords) == (alone.counterexample.shape, alone.counterexample.coords)


def test_a_carried_model_that_breaks_a_condition_is_not_taken(tmp_path):
    """A record of LSE's counterexample whose model fails one of D's conditions (batch 0 is
    outside the domain) is no counterexample of D: D decides the query itself."""
    sub, ex = _kernel("lsed_bas_shortcut", tmp_path)
    lse = C.check(sub, ex, "lse", "sbhd")
    forged = tuple((dk, cs, dict(m, batch=0)) for dk, cs, m in lse.refuted_cases)
    d = C.check(sub, ex, "d", "sbhd", known=Records(refuted=forged))
    assert d.verdict == "counterexample" and d.spent_ru > 0
    assert d.counterexample.shape["batch"] >= 1


def test_a_carried_model_that_does_not_break_the_claim_cannot_refute_a_correct_kernel(tmp_path, monkeypatch):
    """lsed_bas_shortcut is right in BHSD: forged records pairing each of LSE's claims with a
    model that meets every condition of D's query (a shape in the domain, workgroup (1, 1)) are
    checked by evaluation and dropped: D stays proved."""
    sub, ex = _kernel("lsed_bas_shortcut", tmp_path)
    lse = C.check(sub, ex, "lse", "bhsd")
    shape = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 64, "seqlen_k": 64, "hdim_q": 128, "hdim_v": 128,
             "total_q": 128, "total_k": 128, "batch_id": 1, "head_id": 1, "kv_tile": 0, "tid_x": 0, "Lse": 1 << 20}
    forged = []
    for t, conds, claim, _, _ in lse.cases:
        assert C.violates(conds, X.bnot(claim), shape)           # the model meets the conditions
        names, dk, cs = C.fingerprint(claim, conds)
        forged.append((dk, cs, X.rename_model(shape, names)))
    seen = []
    real = C.meets
    monkeypatch.setattr(C, "meets", lambda *a, **kw: seen.append(1) or real(*a, **kw))
    d = C.check(sub, ex, "d", "bhsd", known=Records(refuted=tuple(forged)))
    assert d.verdict == "proved" and seen           # each record was evaluated, and dropped


def test_chains_run_the_donor_first_even_when_it_was_not_asked_for(tmp_path):
    """V like K: V's check follows K's of the same property and layout; V alone still runs K's
    check first (unshown), so V's verdict does not depend on the selection."""
    import addrsim.api as api
    from addrsim.model.models import load_models
    co = codeobj.load(build("lsed_three_paths", tmp_path))
    ms = load_models([MODEL])
    k = co.kernels[0]
    assert api.donor(ms, k, "d") == "lse" and api.donor(ms, k, "lse") is None
    both = api.chains([("address", "bhsd", "lse"), ("address", "bhsd", "d"), ("bounds", "bhsd", "d")], ms, k)
    assert both == [[(0, "address", "bhsd", "lse"), (1, "address", "bhsd", "d")],
                    [(None, "bounds", "bhsd", "lse"), (2, "bounds", "bhsd", "d")]]


@pytest.mark.parametrize("layout", ["bhsd", "sbhd"])
def test_a_buffers_report_is_the_same_whether_or_not_its_donor_was_selected(tmp_path, layout):
    import addrsim.api as api
    co = build("lsed_bas_shortcut", tmp_path)

    def d_check(buffers):
        rep = api.verify(co, buffers=buffers, layouts=[layout], model_files=[MODEL], properties=["address", "bounds"])
        return [{k: v for k, v in c.items() if k != "time_s"} for c in rep["kernels"][0]["checks"] if c["buffer"] == "d"]
    assert d_check(["d"]) == d_check(["lse", "d"])


def test_where_the_donor_stopped_unknown_the_follower_stops_too_and_never_proves(tmp_path, monkeypatch):
    """A record that LSE's check stopped undecided at a claim makes D's check of the same claim
    (a superset of the conditions) unknown with that reason, without a query; one with a
    condition D's query lacks is ignored (D is proved)."""
    sub, ex = _kernel("lsed_bas_shortcut", tmp_path)
    lse = C.check(sub, ex, "lse", "bhsd")
    fps = [C.fingerprint(claim, conds) for _, conds, claim, _, _ in lse.cases]
    left = tuple((dk, cs, "lse bhsd address: query budget spent") for _, dk, cs in fps)
    calls = _counting(monkeypatch)
    d = C.check(sub, ex, "d", "bhsd", known=Records(undecided=left))
    assert d.verdict == "unknown" and "query budget spent" in d.reason and calls == []
    assert [why for _, _, why in d.undecided_cases] == ["lse bhsd address: query budget spent"]
    extra = X.digest(X.ult(X.Sym("batch", 64, "shape"), X.Const(2, 64)))
    d = C.check(sub, ex, "d", "bhsd", known=Records(undecided=tuple((dk, cs | {extra}, why) for dk, cs, why in left)))
    assert d.verdict == "proved"


# ----------------------------------------------------------------------------- fingerprints

_HQ, _HV = X.Sym("hdim_q", 64, "shape"), X.Sym("hdim_v", 64, "shape")
_EIGHT, _ZERO = X.Const(8, 64), X.Const(0, 64)


def _row_claim(ptr: str, hdim: X.Sym) -> X.Expr:
    """A claim about the byte offset of row 1 of a tensor whose row stride is hdim bf16s."""
    p = X.Sym(ptr, 64, "ptr")
    return X.eq(X.add(p, X.mul(hdim, X.Const(2, 64))), X.add(p, X.mul(_HQ, X.Const(2, 64))))


def test_a_symbol_the_conditions_set_equal_to_another_reads_as_its_class():
    """gfx950 psskddv: K's stride has hdim_q, V's hdim_v, and the domain says hdim_q == hdim_v
    (inside a conjunction): V's claim in V's names is K's.  Without that equality (hdim_q <=
    hdim_v only) the claims differ, and no proof or counterexample crosses."""
    same = [X.band(X.eq(_HQ, _HV), X.eq(X.urem(_HQ, _EIGHT), _ZERO))]
    k, v = C.fingerprint(_row_claim("K", _HQ), same), C.fingerprint(_row_claim("V", _HV), same)
    assert k[1:] == v[1:]
    assert v[0] == {"V": "ptr#0"}          # a model is renamed by pointers only: hdim_v keeps its value
    apart = [X.ule(_HQ, _HV)]
    assert C.fingerprint(_row_claim("K", _HQ), apart)[1] != C.fingerprint(_row_claim("V", _HV), apart)[1]


def test_a_merged_branch_true_for_every_value_is_left_out_and_no_other_condition():
    """dK's path on gfx950 keeps ``m <= 1 or (m > 1 and m <= 2)`` with m = min(x, 2) (signed),
    true for every x; dV's path does not have it.  It is left out of the condition digests, so
    a record of dK's answers dV; a disjunction false for some x (x = 5: x < 2 or x < 3) is kept."""
    x = X.Sym("x", 32, "shape")
    one, two, three = (X.Const(n, 32) for n in (1, 2, 3))
    m = X.ite(X.slt(x, two), x, two)
    merged = X.bor(X.sle(m, one), X.band(X.bnot(X.sle(m, one)), X.sle(m, two)))
    partial = X.bor(X.ult(x, two), X.ult(x, three))
    memo: dict = {}
    assert C.always_true(merged, memo) and C.always_true(X.bor(X.sle(m, one), X.bnot(X.sle(m, one))), memo)
    assert not C.always_true(partial, memo) and not C.always_true(X.sle(m, two), memo)   # no "or": never asked
    claim = _row_claim("K", _HQ)
    always = lambda c: C.always_true(c, memo)       # noqa: E731
    assert C.fingerprint(claim, [merged], always)[2] == C.fingerprint(claim, [], always)[2]
    assert C.fingerprint(claim, [merged])[2] != C.fingerprint(claim, [])[2]
    assert C.fingerprint(claim, [partial], always)[2] != C.fingerprint(claim, [], always)[2]


def test_symbols_of_the_conditions_alone_are_renamed_after_the_claims():
    """dK's and dV's lane masks are bits of different opaque values (opaque79/80, opaque31/32),
    in their conditions only: ranked after the claim's symbols, they get the same names, and the
    claim's names do not change."""
    tid = X.Sym("tid_x", 32, "grid")

    def lane_bit(a: int, b: int) -> X.Expr:
        pair = X.concat(X.Sym(f"opaque{a}", 32, "opaque"), X.Sym(f"opaque{b}", 32, "opaque"))
        return X.extract(X.lshr(pair, X.zext(X.and_(tid, X.Const(63, 32)), 64)), 0, 0)
    claim = _row_claim("K", _HQ)
    k, v = C.fingerprint(claim, [lane_bit(80, 79)]), C.fingerprint(claim, [lane_bit(32, 31)])
    assert k[1:] == v[1:]
    assert k[0] == {"K": "ptr#0", "opaque79": "opaque#c0", "opaque80": "opaque#c1"}
    assert C.fingerprint(claim, [])[1] == k[1]


@pytest.mark.slow
def test_gfx950_dv_sbhd_takes_dks_counterexample_with_no_query(corpus, monkeypatch):
    """gfx950 bwd_hd128_bf16_a16_psskddv, SBHD: dV's queries are dK's with hdim_v for hdim_q
    and without one merged branch's condition.  After dK's check (its chain), dV spends no
    units, and gets the counterexample (shape, coordinates, lane) its own queries give."""
    import addrsim.api as api
    co = corpus / "gfx950" / "fmha_v3_bwd" / "bwd_hd128_bf16_a16_psskddv.co"

    def dv():
        rep = api.verify(co, buffers=["dv"], layouts=["sbhd"], properties=["address"])
        return {c["buffer"]: c for c in rep["kernels"][0]["checks"]}["dv"]
    chained = dv()
    real = api.check
    monkeypatch.setattr(api, "check", lambda *a, known=None, **kw: real(*a, **kw))
    alone = dv()
    assert chained["verdict"] == alone["verdict"] == "counterexample"
    assert chained["mru"] == 0 < alone["mru"]
    assert chained["counterexample"]["minimal"] and alone["counterexample"]["minimal"]
    for k in ("shape", "coords", "lane", "grid"):
        assert chained["counterexample"][k] == alone["counterexample"][k], k
