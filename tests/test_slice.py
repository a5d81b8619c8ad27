"""The replay slice (issue 14, item 4: replay only what the access depends on along its path).

A concrete replay executes only the instructions the access's address and the path to it can
depend on (addrsim/engine/slice.py); everything else leaves its registers marked skipped, and
reading one makes the replay run again unsliced.  Specifications:

* the plan's defining property on synthetic code: the address chain, the branches and their
  conditions run; data, other tensors' loads and arithmetic nobody reads are skipped;
* a sliced replay gives the unsliced replay's accesses, every lane, for every memory
  instruction of every example kernel (and of the real kernel: slow tier), without a miss;
* a wrong plan cannot give a wrong address: it raises SliceMiss, and run_concrete answers
  with the unsliced run.
"""
from dataclasses import replace

import pytest

from addrsim.engine import explore as E
from addrsim.engine.machine import SliceMiss, Unsupported
from addrsim.engine.slice import OPAQUE, RUN, SKIP, ReplayPlan, replay_plan
from addrsim.loader.disasm import Instr
from addrsim.model.schema import load_models
from addrsim.prove.differential import environment, load_subject
from addrsim.prove.machines import concrete_machine

from test_examples import EX, MODEL, build

SHAPE = dict(batch=2, nhead_q=2, nhead_k=2, seqlen_q=256, seqlen_k=256)


def ins(addr, mnemonic, ops, mods=(), target=None):
    return Instr(addr, mnemonic, tuple(ops.split(", ")) if ops else (), tuple(mods), f"{mnemonic} {ops}", target)


def test_plan_runs_the_address_chain_and_skips_the_rest():
    """A loop over key tiles: the V# and the lane offset feed the LSE load (the target); the
    loop counter feeds the back edge; the MFMA, the K load and an unused VALU add do not."""
    code = [
        ins(0x00, "s_load_dwordx4", "s[8:11], s[0:1], 0x0"),                 # LSE V#
        ins(0x08, "s_load_dword", "s16, s[0:1], 0x10"),                      # seqlen (loop bound)
        ins(0x10, "v_lshlrev_b32_e32", "v1, 2, v0"),                         # lane offset
        ins(0x14, "v_add_u32_e32", "v9, v5, v6"),                            # read by nobody
        ins(0x18, "s_mov_b32", "s20, 0"),                                    # tile counter
        ins(0x1c, "buffer_load_dwordx4", "v[12:15], v2, s[24:27], 0", ["offen"]),   # K tile (loop head)
        ins(0x24, "v_mfma_f32_32x32x8_bf16", "a[0:15], v[12:13], v[14:15], a[0:15]"),
        ins(0x2c, "s_add_u32", "s20, s20, 64"),
        ins(0x30, "s_cmp_lt_u32", "s20, s16"),
        ins(0x34, "s_cbranch_scc1", "0x1c", target=0x1c),
        ins(0x38, "buffer_load_dword", "v3, v1, s[8:11], 0", ["offen"]),      # LSE: the access
        ins(0x40, "s_endpgm", ""),
    ]
    plan = replay_plan(code, 0x38)
    mode = {c.addr: plan.mode[k] for k, c in enumerate(code)}
    assert [a for a, m in mode.items() if m == RUN] == [0x00, 0x08, 0x10, 0x18, 0x2c, 0x30, 0x34, 0x38]
    assert mode[0x14] == mode[0x1c] == mode[0x24] == SKIP
    assert ("v", 9) in plan.regs[3] and ("a", 15) in plan.regs[6]      # what a skip leaves unknown
    assert plan.executed == 8
    assert replay_plan(code, 0x1234) is None                 # no such instruction
    # the K tile feeds an address the access reads: its load result is data, so it is made
    # opaque, not stepped (its own address is not computed)
    code[10] = ins(0x38, "buffer_load_dword", "v3, v12, s[8:11], 0", ["offen"])
    plan = replay_plan(code, 0x38)
    assert plan.mode[5] == OPAQUE and plan.mode[2] == SKIP


def _subject(tmp_path, name):
    return load_subject(build(name, tmp_path), buffers=("lse", "d", "q", "k"), ms=load_models([MODEL]))


def _machine(sub, layout="bhsd", shape=SHAPE):
    prob = sub.problem(layout)
    ids = {s.name: 1 for s in prob.grid.values()}
    ids[prob.grid["x"].name] = 0
    # any arguments do: the two runs are compared with each other, not with the models
    env = environment(sub, prob, shape, ids, 0)
    return lambda: concrete_machine(sub.kernel, sub.arch, sub.ms, dict(env), dict(ids), 0)


def _outcome(code, fresh, pc, plan, occurrence=1):
    """The per-lane (address, active, in range) values of the access, or the exception's type."""
    try:
        accs = E._run_concrete(code, fresh(), pc, 60_000, occurrence, plan)
    except (Unsupported, E.ReplayBudget) as e:
        return type(e).__name__
    if accs is None:
        return None
    return [tuple(getattr(v, "value", repr(v)) for v in (a.address, a.active, a.in_range)) for a in accs]


EXAMPLES = sorted(p.stem for p in EX.glob("*.s"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_sliced_replay_equals_unsliced_on_every_example_access(tmp_path, name):
    sub = _subject(tmp_path, name)
    fresh = _machine(sub)
    pcs = [i.addr for i in sub.code if i.mnemonic.startswith(("buffer_", "global_"))]
    assert pcs
    for pc in pcs:
        for occurrence in (1, 2):
            plan = replay_plan(sub.code, pc)
            sliced = _outcome(sub.code, fresh, pc, plan, occurrence)      # a SliceMiss fails the test
            assert sliced == _outcome(sub.code, fresh, pc, None, occurrence), (name, hex(pc), occurrence)
            assert plan.executed < len(sub.code)


def test_a_wrong_plan_misses_and_the_replay_runs_unsliced(tmp_path, monkeypatch):
    """Skip the instruction that computes the lane's row (v_and_b32 v1, 63, v0): the sliced
    run reads v1, a skipped register, and raises; run_concrete then answers unsliced."""
    sub = _subject(tmp_path, "lse_loop")
    fresh = _machine(sub)
    load = next(i.addr for i in sub.code if i.mnemonic.startswith("buffer_load"))
    row = next(k for k, i in enumerate(sub.code) if i.mnemonic.startswith("v_and_b32"))
    good = replay_plan(sub.code, load)
    assert good.mode[row] == RUN
    mode, regs = list(good.mode), list(good.regs)
    mode[row], regs[row] = SKIP, (("v", 1),)
    bad = ReplayPlan(tuple(mode), tuple(regs))
    with pytest.raises(SliceMiss):
        E._run_concrete(sub.code, fresh(), load, 60_000, 1, bad)
    monkeypatch.setattr(E, "replay_plan", lambda code, pc: bad)
    accs = E.run_concrete(sub.code, fresh(), load)
    assert [a.address.value for a in accs] == [a[0] for a in _outcome(sub.code, fresh, load, None)]


@pytest.mark.slow
def test_sliced_replay_equals_unsliced_on_the_real_kernel(real_kernel):
    """bwd_hd128_bf16_a16_rtne, SBHD: every load in the first 400 instructions (Q, LSE, ...),
    a K load in the first main loop (iterations 1 and 2), the dK and dV stores after the loops.  The sliced run
    needs no second run and executes a small part of the kernel."""
    sub = load_subject(real_kernel, buffers=("lse", "q", "k", "dk", "dv"))
    fresh = _machine(sub, "sbhd")
    # 0x83c8 dK store, 0x97f8 dV store, 0x5114 the first K load of the first main loop
    for pc, occurrence in ((0x83c8, 1), (0x97f8, 1), (0x5114, 1), (0x5114, 2)):
        plan = replay_plan(sub.code, pc)
        assert plan.executed < len(sub.code) // 10, (hex(pc), plan.executed)
        sliced = _outcome(sub.code, fresh, pc, plan, occurrence)
        assert isinstance(sliced, list) and sliced == _outcome(sub.code, fresh, pc, None, occurrence), hex(pc)
    for i in sub.code[:400]:
        if i.mnemonic.startswith("buffer_load"):
            plan = replay_plan(sub.code, i.addr)
            assert _outcome(sub.code, fresh, i.addr, plan) == _outcome(sub.code, fresh, i.addr, None), hex(i.addr)


# ----------------------------------------------------------------------------- the sliced program (coverage store)

def _loop_code(extra: int = 0, lane_shift: str = "2", skipped_dst: str = "v9"):
    """The loop of test_plan_runs_the_address_chain_and_skips_the_rest, with ``extra`` more
    unread VALU adds before the loop (every later address moves by 4 each)."""
    d = 4 * extra
    code = [ins(0x00, "s_load_dwordx4", "s[8:11], s[0:1], 0x0"),
            ins(0x08, "s_load_dword", "s16, s[0:1], 0x10"),
            ins(0x10, "v_lshlrev_b32_e32", f"v1, {lane_shift}, v0"),
            ins(0x14, "v_add_u32_e32", f"{skipped_dst}, v5, v6")]
    code += [ins(0x18 + 4 * k, "v_add_u32_e32", "v9, v7, v8") for k in range(extra)]
    code += [ins(0x18 + d, "s_mov_b32", "s20, 0"),
             ins(0x1c + d, "buffer_load_dwordx4", "v[12:15], v2, s[24:27], 0", ["offen"]),
             ins(0x24 + d, "v_mfma_f32_32x32x8_bf16", "a[0:15], v[12:13], v[14:15], a[0:15]"),
             ins(0x2c + d, "s_add_u32", "s20, s20, 64"),
             ins(0x30 + d, "s_cmp_lt_u32", "s20, s16"),
             ins(0x34 + d, "s_cbranch_scc1", f"{0x1c + d:#x}", target=0x1c + d),
             ins(0x38 + d, "buffer_store_dword", "v3, v1, s[8:11], 0", ["offen"]),
             ins(0x40 + d, "s_endpgm", "")]
    return code


def _program(code):
    from addrsim.engine.slice import accesses_plan, sliced_program
    store = [i.addr for i in code if i.mnemonic.startswith("buffer_store")]
    return sliced_program(code, accesses_plan(code, store), store)


def test_a_sliced_program_does_not_depend_on_addresses_or_unstepped_stretches():
    """Three more unread adds before the loop (the rounding siblings differ so: conversions no
    address reads) leave the digest as it was, every address moved; the entries' lengths say
    how many instructions each stretch has, so the run's step count follows."""
    a, b = _program(_loop_code()), _program(_loop_code(extra=3))
    assert a.digest == b.digest and len(a.first) == len(b.first)
    assert a.first != b.first and a.length != b.length
    visits = [1] * len(a.length)
    assert b.steps(visits) == a.steps(visits) + 3


def test_a_sliced_program_changes_with_what_the_run_computes():
    """Another stepped instruction (the lane's row shifted by 3) or other recorded accesses:
    another digest.  A stretch that writes another register keeps the digest: what stretches
    do is compared on the registers a run reads after them (seen_effects)."""
    from addrsim.engine.slice import accesses_plan, sliced_program
    base = _program(_loop_code())
    assert _program(_loop_code(lane_shift="3")).digest != base.digest
    other = _program(_loop_code(skipped_dst="v10"))
    assert other.digest == base.digest
    e = base.entry[0x14]                             # the stretch of the unread add
    live = [[] for _ in base.first]
    assert other.seen_effects(live) == base.seen_effects(live)
    live[e] = ["v10"]                                # a run that read v10 after it: not the same run
    assert other.seen_effects(live) != base.seen_effects(live)
    code = _loop_code()
    plan = accesses_plan(code, [0x38])
    assert sliced_program(code, plan, []).digest != sliced_program(code, plan, [0x38]).digest


def test_a_live_trace_names_the_registers_read_after_each_stretch():
    """Stretch 1 writes v9 and leaves v1; a stepped read of v1 makes v1 live after stretch 1,
    never v9.  s5 written whole by a stepped instruction after stretch 1 is live only after
    the stretches between that write and its read; a value a stretch itself gives is live
    after that stretch (an opaque load result the run reads)."""
    from addrsim.engine.slice import LiveTrace
    prog = _program(_loop_code())
    t = LiveTrace(prog)
    s1, s2 = [k for k in prog.start if k not in (0, 1, 2)][:2]
    e1, e2 = t.entry_at[s1], t.entry_at[s2]
    t.skipped(s1, [("v", 9)])
    t.read("v1")
    t.wrote("s5")
    t.skipped(s2, [("v", 20)])
    t.read("s5")
    t.read("v20")
    assert t.live == {e1: {"v1"}, e2: {"s5", "v20"}}


def test_a_stored_judgement_is_read_only_where_this_code_runs_within_the_budget():
    """What prove.coverage stores for one shape (through prove.runs): read back with this
    code's address of the access; refused when this code's stretches would take the run past
    its instruction budget, when a stretch does something else to a register the stored run
    read after it, or when the entry is damaged."""
    from addrsim.prove import coverage as C
    from addrsim.prove import runs as R
    prog = _program(_loop_code())
    run, ptrs = R.Run(prog, "r", 1000), {0x38: "Lse"}
    what = ("lse", "Lse", {"rows": 1}, 4096, {"batch": 2}, {"b": 1})
    visits = [[0] * 12]
    for k in prog.start:
        visits[0][k] = 1
    fault = C.Fault("lse", "twice", {"batch": 2}, {"b": 1}, 64, 0, 64, 1, 3, 0x38, 4, (0, 3))
    store = {}
    C.keep_fault(store, run, ptrs, what, fault, visits, {})
    assert C.stored_fault(store, run, ptrs, what) == (fault,)
    moved = R.Run(_program(_loop_code(extra=2)), "r", 1000)       # the same run, its access 8 bytes on
    assert C.stored_fault(store, moved, {0x40: "Lse"}, what) == (replace(fault, pc=0x40),)
    C.keep_fault(store, run, ptrs, what, None, visits, {})
    assert C.stored_fault(store, run, ptrs, what) == (None,)
    e = prog.entry[0x14]
    C.keep_fault(store, run, ptrs, what, fault, visits, {e: {"v9"}})    # a run that read v9 after the add
    assert C.stored_fault(store, run, ptrs, what) == (fault,)
    assert C.stored_fault(store, R.Run(_program(_loop_code(skipped_dst="v10")), "r", 1000), ptrs, what) is None
    assert C.stored_fault(store, R.Run(prog, "r", len(prog.length) - 1), ptrs, what) is None   # past the budget
    store[("runs", "r")] = ("runs", ["not base64 zlib"], [])
    assert C.stored_fault(store, run, ptrs, what) is None
