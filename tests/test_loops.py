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
