"""The weakened memory limit (model/problem.py ``memory_weak``, prove/query.py ``weakened_query``):
an a32 kernel's queries are asked first with the device-memory limit its a16 twin has (the dQ
accumulator sized at 0 bytes per element on gfx942, 2 on gfx950, not 4), so the a16 kernel's
answers serve it.  A proof there is a proof; a counterexample there is taken only when it
meets the real limit."""
import pytest

from addrsim.ir import expr as X
from addrsim.ir.expr import Sym
from addrsim.model.models import build_problem, load_models

FAMILY = "bwd_hd128_bf16_{}_rtne.co"


def _family(ms, name):
    return next(f for f in ms.families if f["name"] == name)


def test_only_an_a32_family_with_an_a16_twin_has_lower_parameters():
    """Twins share mode, arch, traits, bounds, fixed sizes and grid (model/problem.py
    TWIN_KEYS): the a32 kernels' dQ accumulator (4 bytes) sized as their a16 twin's (0 on
    gfx942: dQ written directly; 2 on gfx950); families without an a16 twin keep theirs."""
    from types import SimpleNamespace
    from addrsim.model.problem import _twin_minima
    ms = load_models()
    low = {n: _twin_minima(SimpleNamespace(fam=_family(ms, n), ms=ms))
           for n in ("v3-a32-nopad", "v3-a16-direct-dq", "gfx950-native-a32", "gfx950-native-a16", "genl-a32-hdpad")}
    assert low == {"v3-a32-nopad": {"acc": 0}, "v3-a16-direct-dq": {}, "gfx950-native-a32": {"acc": 2},
                   "gfx950-native-a16": {"dpad": 0}, "genl-a32-hdpad": {}}     # no memory size names dpad


def test_a_size_that_does_not_grow_with_the_parameter_or_is_overridden_keeps_its_value():
    from types import SimpleNamespace
    from addrsim.model import parse as modelexpr
    from addrsim.model.problem import _at_minima
    names = {"batch": Sym("batch", 64, "shape"), "acc": X.Const(4, 64)}
    b = SimpleNamespace(fam={"memory": {"q": "batch * 2"}}, names=names)
    grows, shrinks = "batch * acc", "batch * 8 / acc"
    at = lambda t, text: _at_minima(b, t, text, modelexpr.parse(text, names), {"acc": 2})  # noqa: E731
    assert X.evaluate(at("dq_acc", grows), {"batch": 3}) == 6
    assert X.evaluate(at("dq_acc", shrinks), {"batch": 3}) == 6          # 3 * 8 / 4: kept, not 3 * 8 / 2
    assert X.evaluate(at("q", grows), {"batch": 3}) == 12                 # the family's own size


def _problems(corpus, layout="bhsd"):
    from addrsim.loader.listing import load_source
    ms, out = load_models(), {}
    for acc in ("a16", "a32"):
        src = load_source(corpus / "gfx942" / "fmha_v3_bwd" / FAMILY.format(acc), None)
        out[acc] = build_problem(ms, src.co.kernels[0], layout, Sym("tid_x", 32, "lane"), {}, src.co.arch)
    return out


@pytest.mark.slow
def test_the_a32_kernels_weakened_limit_is_the_a16_kernels_limit(corpus):
    """a16 writes dQ directly (acc 0: its limit has no accumulator term, nothing weaker); the
    a32 kernel's weakened limit is the same expression as a16's, so their queries share keys."""
    p = _problems(corpus)
    assert p["a16"].memory_weak is None and p["a16"].weakened() is None
    fits, weak, bounds = p["a32"].weakened()
    a16_fits = next(a.expr for a in p["a16"].assumptions if a.layer == "memory")
    assert X.digest(weak) == X.digest(a16_fits) != X.digest(fits)
    assert sum(c is fits for c in p["a32"].domain) == 1 and bounds == p["a32"].bounds


@pytest.mark.slow
def test_the_weakened_limit_is_implied_by_the_real_one_and_not_the_reverse(corpus):
    from addrsim.prove.query import proved_within, ranges_of
    p = _problems(corpus)["a32"]
    fits, weak, _ = p.weakened()
    others = [c for c in p.domain if c is not fits]
    ranges = ranges_of(p)
    assert proved_within(others + [fits], weak, ranges, 3_000_000, "bv")[0]
    assert not proved_within(others + [weak], fits, ranges, 3_000_000, "bv")[0]


def _checks(rep):
    return [{k: v for k, v in c.items() if k not in ("time_s", "mru")} for c in rep["kernels"][0]["checks"]]


@pytest.mark.slow
def test_the_a32_kernel_reads_the_a16_kernels_answers(corpus, monkeypatch):
    """K and LSE in BHSD: after the a16 kernel, the a32 kernel decides no query of its own for
    them (the same claims and conditions but the memory limit), and its checks equal those of
    the a32 kernel alone: the same verdicts, shapes, workgroups and lanes."""
    import addrsim.prove.check as C
    from addrsim.api import verify
    from addrsim.prove.store import Store
    d = corpus / "gfx942" / "fmha_v3_bwd"
    asked = []
    real = C.decide_query
    monkeypatch.setattr(C, "decide_query", lambda *a, **k: asked.append(1) or real(*a, **k))

    def run(acc, cache):
        return verify(d / FAMILY.format(acc), ["k", "lse"], ["bhsd"], properties=["address"], cache=cache)
    alone = run("a32", Store())
    assert asked and [c["verdict"] for c in alone["kernels"][0]["checks"]] == ["counterexample"] * 2
    cache = Store()
    run("a16", cache)
    asked.clear()
    assert _checks(run("a32", cache)) == _checks(alone)
    assert not asked


@pytest.mark.slow
def test_a_weak_counterexample_outside_the_real_memory_limit_is_not_taken(corpus, monkeypatch):
    """With 30 GiB the a32 kernel's Q in BHSD is proved: the 32-bit wrap needs 37.5e9 bytes
    with its fp32 dQ accumulator (28.4e9 without).  The weakened query finds that wrap, which
    breaks the real limit, so the real query decides: the check is the one made without the
    weakened phase."""
    import addrsim.prove.check as C
    from addrsim.api import verify
    from addrsim.model.problem import Problem
    from addrsim.prove.store import Store
    co = corpus / "gfx942" / "fmha_v3_bwd" / FAMILY.format("a32")
    weak = []
    real = C._decided
    monkeypatch.setattr(C, "_decided", lambda ctx, *a: _spy(real, weak, ctx, *a))

    def run():
        return verify(co, ["q"], ["bhsd"], properties=["address"], cache=Store(), memory_gib=30)
    with_weak = run()
    assert weak and weak[0] == "refuted"
    assert with_weak["kernels"][0]["checks"][0]["verdict"] == "proved"
    monkeypatch.setattr(Problem, "weakened", lambda self: None)
    weak.clear()
    assert _checks(run()) == _checks(with_weak) and not weak


def _spy(real, seen, ctx, *a):
    """``real`` (check._decided), recording the verdicts of the weakened queries."""
    r = real(ctx, *a)
    if a[-1] == "the weak":
        seen.append(r[0])
    return r


@pytest.mark.slow
def test_an_edited_a32_kernel_is_not_proved_by_the_a16_kernels_answers(corpus, tmp_path):
    """Q in SBHD is proved for both kernels.  The a32 listing with Q's offset built as
    2 * head * Hs_q (``s_add_u32 s55, s61, s61``: the batch term dropped), after the a16
    kernel stored its proofs, is a counterexample: the weakened queries of the edited
    address are not the a16 kernel's."""
    from addrsim.api import verify
    from addrsim.prove.store import Store
    from test_mutations import edit, objdump
    d = corpus / "gfx942" / "fmha_v3_bwd"
    a32 = d / FAMILY.format("a32")
    cache = Store()
    first = verify(d / FAMILY.format("a16"), ["q"], ["sbhd"], properties=["address"], cache=cache)
    assert first["kernels"][0]["checks"][0]["verdict"] == "proved"
    listing = tmp_path / "edited.s"
    listing.write_text(edit(objdump(a32), 0x2B70, "s_add_u32 s55, s61, s62", "s_add_u32 s55, s61, s61"))
    rep = verify(listing, ["q"], ["sbhd"], like=a32, properties=["address"], cache=cache)
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "counterexample", c.get("reason")


@pytest.mark.parametrize("weak_answer, real_asked, expected", [
    (None, False, None),                        # nothing breaks the claim with more memory: nothing with less
    ({"x": 7}, False, {"x": 7}),                 # the weak model meets x <= 10: it is the answer
    ({"x": 15}, True, {"x": 9}),                 # it needs more memory than the real limit: the real query decides
    ("undecided: budget", True, {"x": 9}),       # undecided there: the real query decides
])
def test_witness_and_host_limit_queries_take_the_weak_answer_only_when_it_holds_here(monkeypatch, weak_answer,
                                                                                     real_asked, expected):
    """prove/replay.weak_first (witness models, host-cast limits) on a synthetic query: the
    real memory condition x <= 10, the weakened one x <= 20, the claim x < 5."""
    import addrsim.prove.replay as R
    x = Sym("x", 64, "shape")
    real, weak = X.ule(x, X.Const(10, 64)), X.ule(x, X.Const(20, 64))
    claim = X.ult(x, X.Const(5, 64))
    monkeypatch.setattr(R, "weakened_query", lambda conds, prob: ([weak if c is real else c for c in conds], {}))
    asked = []

    def ask(conds, ranges):
        asked.append(weak in conds)
        return weak_answer if weak in conds else {"x": 9}
    assert R.weak_first([real], claim, None, {}, ask) == expected
    assert asked == [True, False] if real_asked else asked == [True]
