"""Every loop iteration (issue 4): the per-iteration address step must be the same for every
(batch_id, head_id), an inductive invariant over the loop's back edge.

examples/lse_loop.s advances the LSE V# base by 64 rows * 4 bytes per query tile;
examples/lse_loop_head_step.s by 256 + 4*head_id bytes (right in iteration 1, wrong after)."""
import pytest

from addrsim.api import verify

from test_examples import MODEL, build


@pytest.mark.parametrize("layout", ["bhsd", "bshd", pytest.param("sbhd", marks=pytest.mark.slow)])
def test_uniform_step_is_proved_for_every_iteration(tmp_path, layout):
    rep = verify(build("lse_loop", tmp_path), buffers=["lse"], layouts=[layout], model_files=[MODEL],
                 properties=["address"])
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "proved", c["reason"]
    assert c["all_iterations"] is True


@pytest.mark.parametrize("layout", ["bhsd", pytest.param("sbhd", marks=pytest.mark.slow)])
def test_head_dependent_step_is_refuted_in_iteration_2(tmp_path, layout):
    rep = verify(build("lse_loop_head_step", tmp_path), buffers=["lse"], layouts=[layout], model_files=[MODEL],
                 properties=["address"])
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "counterexample", c["reason"]
    assert c["cause"] == "loop"
    assert "iteration 2" in c["reason"] and "s8@" in c["reason"] and "s9@" in c["reason"]
    x = c["counterexample"]
    sh, ids = x["shape"], x["coords"]
    assert ids["head_id"] >= 1 and sh["seqlen_q"] > 64           # a second tile exists
    # iteration 2 of head h is shifted by 4*h bytes: replayed on the concrete interpreter
    assert x["address"]["extracted"] - x["address"]["expected"] == 4 * ids["head_id"]
    assert x["replayed_on"] == "this kernel, iteration 2" and x["iteration"] == 2


def test_first_iteration_alone_would_pass(tmp_path):
    """Without the loop check the bug is invisible: iteration 1 is right for every head."""
    from addrsim.loader import codeobj
    from addrsim.loader.disasm import disassemble
    from addrsim.engine.explore import explore
    from addrsim.model.models import load_models
    from addrsim.prove.check import check
    from addrsim.prove.replay import Subject
    from addrsim.prove.machines import initial_machine
    from addrsim.prove.targets import pointers_in
    co_path = build("lse_loop_head_step", tmp_path)
    co = codeobj.load(co_path)
    k = co.kernels[0]
    code = disassemble(co_path)[k.symbol]
    ms = load_models([MODEL])
    m, _ = initial_machine(k, co.arch, ms)
    ex = explore(code, m, lambda a: pointers_in(a.base), {"Lse"})
    ex.heads.clear()       # forget the loop entry states: only iteration 1 is checked
    c = check(Subject(k, co.arch, code, ms), ex, "lse", "bhsd")
    assert c.verdict == "proved"


def test_bounds_of_later_iterations_are_not_claimed(tmp_path):
    """lse_loop with seqlen_q >= 64: the first tile's 64 rows are in bounds, and the loop
    induction proves addresses, not bounds: the bounds check says that the later iterations
    are not checked, naming the loop, instead of "proved"."""
    rep = verify(build("lse_loop", tmp_path), buffers=["lse"], layouts=["bhsd"], model_files=[MODEL],
                 properties=["bounds"], bounds={"seqlen_q": (64, 1 << 20)})
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "unsupported", c["reason"]
    assert "iterations after the first of loop 0x" in c["reason"] and "not checked" in c["reason"]


def test_backward_exit_branch_is_an_exit_not_a_loop(tmp_path):
    """lse_loop_exit_before: the loop leaves by a backward s_cbranch_scc0 to an exit block
    placed before it and closes with an unconditional s_branch.  The graph has one loop (the
    back edge's target dominates it), the exit branch is an exit, and D, read in the exit
    block after any number of iterations, is proved like LSE."""
    from addrsim.engine.cfg import cfg_of
    from addrsim.loader.disasm import disassemble
    co = build("lse_loop_exit_before", tmp_path)
    code = next(iter(disassemble(co).values()))
    g = cfg_of(code)
    (lp,) = g.loops
    by_mn = {i.mnemonic: i for i in code}
    assert (lp.head, lp.latch) == (by_mn["s_branch"].target, code[-1].addr)        # the last s_branch
    exit_ = by_mn["s_cbranch_scc0"]
    assert exit_.target < exit_.addr and (exit_.addr, exit_.target) not in g.back
    assert g.exits(exit_.addr, exit_.target) == [lp] and not lp.irreducible
    rep = verify(co, buffers=["lse", "d"], layouts=["bhsd", "sbhd"], model_files=[MODEL], properties=["address"])
    got = {(c["buffer"], c["layout"]): c for c in rep["kernels"][0]["checks"]}
    for key, c in got.items():
        assert c["verdict"] == "proved", (key, c["reason"])
    assert got[("lse", "bhsd")]["all_iterations"] is True


def test_back_edges_are_dominated_branches():
    """The graph's defining property on synthetic code: a branch is a back edge exactly when
    its target dominates it; a backward branch into a block reached around the loop is not
    one, and the ranks order every other edge forwards."""
    from addrsim.engine.cfg import cfg_of
    from addrsim.loader.disasm import Instr

    def ins(addr, mn, target=None):
        return Instr(addr, mn, (), (), mn, target)
    # 0: cbranch -> 20 (skip the first loop)
    # 4: first loop body, 8: cbranch_scc1 -> 4 (back edge), 12: branch -> 28
    # 16: exit block shared by both loops (before the second loop), 20: second loop head,
    # 24: cbranch_scc0 -> 16 (backward exit), 28: branch -> 20 (back edge), 32: endpgm
    code = [ins(0, "s_cbranch_scc1", 20), ins(4, "s_add_u32"), ins(8, "s_cbranch_scc1", 4),
            ins(12, "s_branch", 16), ins(16, "s_branch", 32), ins(20, "s_add_u32"),
            ins(24, "s_cbranch_scc0", 16), ins(28, "s_branch", 20), ins(32, "s_endpgm")]
    g = cfg_of(code)
    assert g.back == {(8, 4), (28, 20)}
    assert [(lp.head, lp.latch, sorted(lp.body)) for lp in g.loops] == [(4, 8, [4, 8]), (20, 28, [20, 24, 28])]
    assert g.exits(24, 16) == [g.loops[1]] and g.exits(8, 12) == [g.loops[0]]
    succ = {0: [20, 4], 4: [8], 8: [4, 12], 12: [16], 16: [32], 20: [24], 24: [16, 28], 28: [20], 32: []}
    for a, ts in succ.items():
        for t in ts:
            assert (a, t) in g.back or g.rank[a] < g.rank[t], (a, t)


def test_irreducible_cycle_is_flagged():
    """A cycle entered at two places (no header dominates it) is still cut at a retreating
    edge, so exploration ends, and is flagged: the loop check refuses it (unsupported)."""
    from addrsim.engine.cfg import cfg_of
    from addrsim.loader.disasm import Instr

    def ins(addr, mn, target=None):
        return Instr(addr, mn, (), (), mn, target)
    # 0: cbranch -> 8 (into the middle), 4: A, 8: B, 12: cbranch -> 4, 16: endpgm
    code = [ins(0, "s_cbranch_scc1", 8), ins(4, "s_add_u32"), ins(8, "s_add_u32"),
            ins(12, "s_cbranch_scc1", 4), ins(16, "s_endpgm")]
    g = cfg_of(code)
    assert len(g.loops) == 1 and g.loops[0].irreducible


def test_a_reference_workgroup_that_skips_the_access_is_read_from_the_formula(monkeypatch):
    """Group mode: at a counterexample's shape the reference workgroup (0, 0) may not reach
    the access (sequence 0 has too few rows for the tile), while the counterexample's own
    workgroup does.  The claim compares the access with the address *expression* at (0, 0),
    so the replay keeps the concrete address of its own workgroup and evaluates the
    reference on the expression, with the concrete run's pointer base; both unreached is
    still a failure."""
    from types import SimpleNamespace
    import addrsim.prove.replay as R
    from addrsim.ir import expr as X
    from addrsim.ir.expr import Const, Sym
    reached = {1: [(Const(0x5000_0000_0040, 64), Const(1, 1))] * 64}       # (address, in range) per lane
    monkeypatch.setattr(R, "_run", lambda sub, inp, ids, lane, pc, occurrence=1, store=None:
                        reached.get(ids["batch_id"], []))
    t = SimpleNamespace(access=SimpleNamespace(instr=SimpleNamespace(addr=0x7dc4)))
    inp = R._Inputs({}, {"Lse": 0x5000_0000_0000}, {}, [])
    got = R._both_workgroups(None, inp, {"batch_id": 1, "head_id": 0}, {"batch_id": 0, "head_id": 0}, 3, t, 1)
    assert isinstance(got, R._RefNotReached) and got.address == 0x5000_0000_0040
    assert "reference workgroup (0, 0)" in got.failure.reason
    lane = Sym("lane", 32, "lane")
    a00 = X.add(X.zext(Sym("Lse", 48, "ptr"), 64), X.zext(X.mul(lane, Const(4, 32)), 64))
    pair, note = R._reference_on_formula(got, a00, {"lane": 3, "Lse": 0x77}, inp)
    assert pair == [0x5000_0000_0040, 0x5000_0000_000c]       # the run's base, not the model's
    assert "workgroup (0, 0) does not reach" in note
    reached.clear()
    none = R._both_workgroups(None, inp, {"batch_id": 1, "head_id": 0}, {"batch_id": 0, "head_id": 0}, 3, t, 1)
    assert isinstance(none, R.ReplayFailure) and none.kind == "not-reached"


# ----------------------------------------------------------------------------- many paths
# examples/lse_loop_branchy.s: fourteen branches that cannot merge put 23 paths on the back
# edge (529 pairs, past MAX_PAIRS: the loop was "unknown"); every path moves the V# base alike.

@pytest.mark.parametrize("layout", ["bhsd", pytest.param("sbhd", marks=pytest.mark.slow)])
def test_paths_that_move_the_base_alike_are_proved_as_one(tmp_path, layout):
    rep = verify(build("lse_loop_branchy", tmp_path), buffers=["lse"], layouts=[layout], model_files=[MODEL],
                 properties=["address"])
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "proved", c["reason"]
    assert c["all_iterations"] is True


def test_a_path_whose_step_reads_head_id_is_not_merged_with_the_others(tmp_path):
    """examples/lse_loop_branchy_head_step.s: the paths through the arm that adds 4*head_id
    reach the back edge apart from the right ones.  Taking every path as the first one's
    group (a right path) would prove it."""
    rep = verify(build("lse_loop_branchy_head_step", tmp_path), buffers=["lse"], layouts=["bhsd"],
                 model_files=[MODEL], properties=["address"])
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "counterexample", c["reason"]
    assert c["cause"] == "loop" and "s8@" in c["reason"]
    x = c["counterexample"]
    assert x["address"]["extracted"] - x["address"]["expected"] == 4 * x["coords"]["head_id"] != 0
    assert x["replayed_on"].startswith("this kernel, iteration")


def test_paths_are_grouped_by_every_value_the_obligation_reads():
    """Back-edge states group by all cone registers' values (digests: equal structure, not
    identity); a group's claim is first tried under no path condition, then each pair's own
    obligation is built, only when asked."""
    from types import SimpleNamespace
    from addrsim.engine import loops as L
    from addrsim.ir import expr as X
    from addrsim.ir.expr import Const, Sym
    s = Sym("s8@0x10", 32, "carried")
    def state(step, cond):
        return SimpleNamespace(sgpr={8: X.add(s, Const(step, 32))}, vgpr={}, path=[cond])
    c = [Sym(f"c{i}", 1, "arg") for i in range(3)]
    backs = [state(256, c[0]), state(256, c[1]), state(260, c[2])]
    memo = {}
    groups = L._groups(backs, lambda b: (X.digest(L._value(b, "s8@0x10"), memo),))
    assert [len(g) for g in groups] == [2, 1]
    built = []
    def one(p, q):
        built.append((p.path, q.path))
        return ([*p.path, *q.path], Const(1, 1), "step", 0, None)
    every = lambda p, q: True                              # noqa: E731
    ob = L._merged(groups[0], groups[0], one, every)
    assert ob[0] == [] and built == [([], [])]            # the claim under no path condition
    assert [o[0] for o in ob[4]()] == [[c[0], c[0]], [c[0], c[1]], [c[1], c[0]], [c[1], c[1]]]
    assert L._merged(groups[1], groups[1], one, every)[0] == [c[2], c[2]]      # one pair: its own paths
    # after the claim under no path condition, pairs whose paths cannot hold together are left
    # out; a single such pair gives no obligation
    same = lambda p, q: p is q                             # noqa: E731
    assert [o[0] for o in L._merged(groups[0], groups[0], one, same)[4]()] == [[c[0], c[0]], [c[1], c[1]]]
    assert L._merged(groups[1], [backs[0]], one, same) is None
    assert L._diagonal_first(groups)[:2] == [(groups[0], groups[0]), (groups[1], groups[1])]
