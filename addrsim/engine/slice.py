"""The replay slice: which instructions a concrete replay must execute to reach one access.

Owns :class:`ReplayPlan` and :func:`replay_plan`.  May import addrsim.loader, addrsim.isa
and, of its own layer, addrsim.engine.cfg (the graph) and addrsim.engine.machine (register
names).

A concrete replay (:func:`addrsim.engine.explore.run_concrete`) runs one wave from the entry
to the n-th execution of one access.  Through a kernel's main loop that is about 60,000
instructions per workgroup, almost all of them attention arithmetic (MFMA, VALU on loaded
data, LDS traffic) and the other tensors' loads, none of which the access's address or the
path to it depends on.  The plan executes only what can matter:

* every branch, with the registers its condition reads (SCC, VCC, EXEC);
* every instruction that may write EXEC (EXEC is read by every VALU instruction);
* the access itself, with its address operands (V#, VGPR offset or index, soffset);
* backwards from those, every ALU, scalar-load and lane instruction that may write a
  register some executed instruction may still read (a backward liveness fixpoint over the
  control-flow graph, :func:`addrsim.engine.cfg.cfg_of`);
* every instruction without semantics (the machine refuses it, as it would unsliced).

Memory loads other than the access and data instructions (``data`` rows: MFMA, LDS reads,
floating point) never need their inputs: the machine gives their destinations an opaque
value either way.  They run only when they write a register that is still read.

Soundness does not rest on this analysis being exact.  A skipped instruction marks the
registers it may write as *skipped* (:data:`addrsim.engine.machine.SKIPPED`), and the machine
raises :class:`addrsim.engine.machine.SliceMiss` when it reads one; the replay then runs again
without a plan.  So a sliced replay that completes read only values that the unsliced replay
computes identically (every register it read was last written, on the same path, by an
instruction both runs executed), and its accesses are the unsliced run's.  A wrong analysis
costs time (the second run), never a wrong address.  Deliberately aggressive choices rest on
this: a VALU write is taken to overwrite every lane (it keeps inactive lanes' old values
under a partial EXEC; reading such a lane is then a SliceMiss).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from addrsim.isa.table import effects, lookup
from addrsim.loader.disasm import Instr
from addrsim.engine.cfg import cfg_of
from addrsim.engine.machine import parse_register

#: Register file numbering of the GFX9 SGPR space (MI300 ISA guide section 3.1): VCC is
#: s106:s107, M0 is s124, EXEC is s126:s127 (addrsim keeps EXEC apart, as "exec").
_VCC = 106
_M0 = 124
_V0, _A0 = 128, 128 + 512          # bit positions of v0 and a0
SCC_BIT = 1 << 1200
EXEC_BIT = 1 << 1201
_VCC_BITS = (1 << _VCC) | (1 << (_VCC + 1))

#: A register the plan names: ("s"|"v"|"a", index) or "scc".
Reg = object


RUN, OPAQUE, SKIP = 0, 1, 2


@dataclass(frozen=True)
class ReplayPlan:
    """Per instruction ``i`` (index into the code list), ``mode[i]``: RUN (the machine steps
    it), OPAQUE (its result is data whatever it reads, and a later instruction may read it:
    the registers ``regs[i]`` get fresh opaque values, as the machine would give them) or SKIP
    (the registers ``regs[i]``, everything the machine may write for it, are marked skipped).
    Registers are ("s"|"v"|"a", index) pairs, "scc" and "exec"."""

    mode: Tuple[int, ...]
    regs: Tuple[Tuple[Reg, ...], ...]

    @property
    def executed(self) -> int:
        """How many instructions the plan steps (of ``len(self.mode)``)."""
        return sum(1 for m in self.mode if m == RUN)


def _reg_bits(op: str) -> int:
    """Bit mask of the registers operand ``op`` names (0 for a constant or a special
    operand the machine reads as a constant or refuses)."""
    r = parse_register(op)
    if r is None:
        return 0
    if r[0] == "exec":
        return EXEC_BIT
    f, idx, n = r
    base = {"s": 0, "v": _V0, "a": _A0}[f]
    return ((1 << n) - 1) << (base + idx)


def _bits_regs(bits: int) -> Tuple[Reg, ...]:
    out: List[Reg] = []
    if bits & SCC_BIT:
        out.append("scc")
    if bits & EXEC_BIT:
        out.append("exec")
    b = bits & ~(SCC_BIT | EXEC_BIT)
    while b:
        low = b & -b
        k = low.bit_length() - 1
        out.append(("s", k) if k < _V0 else ("v", k - _V0) if k < _A0 else ("a", k - _A0))
        b ^= low
    return tuple(out)


@dataclass(frozen=True)
class _Facts:
    """One instruction as the analysis sees it (bit masks over the register numbering):
    ``may`` it may write, ``kills`` it certainly overwrites, ``uses`` it reads when executed
    as an ordinary instruction, ``access_uses`` as the replayed access; ``always``: executed
    whatever is live; ``inputs``: whether its result depends on what it reads (False for
    data rows and memory loads, whose results are opaque)."""

    may: int
    kills: int
    uses: int
    access_uses: int
    always: bool
    inputs: bool


def _facts(ins: Instr) -> _Facts:
    row = lookup(ins.mnemonic)
    ops = list(ins.operands)
    kind = row.kind
    if kind in ("nop", "store", "end"):
        return _Facts(0, 0, 0, 0, False, False)
    if kind == "branch":
        cond = {"scc0": SCC_BIT, "scc1": SCC_BIT, "vccz": _VCC_BITS, "vccnz": _VCC_BITS,
                "execz": EXEC_BIT, "execnz": EXEC_BIT, "always": 0}.get(row.branch)
        if cond is None:        # a branch form the machine refuses: it reads whatever
            cond = SCC_BIT | EXEC_BIT | _VCC_BITS
        return _Facts(0, 0, cond, cond, True, True)
    eff = effects(row, lambda name: ins.modifier(name) is not None)
    n_dst = eff.n_dst
    if row.sem is not None:
        n_dst = len([t for t in row.sem.outs if t != "scc"])
    dst = 0
    for op in ops[:n_dst]:
        dst |= _reg_bits(op)
    src = 0
    for op in ops[n_dst:]:
        src |= _reg_bits(op)
    may = dst
    if eff.scc and (row.sem is None or "scc" in row.sem.outs or kind == "float"):
        may |= SCC_BIT
    if eff.vcc:
        may |= _VCC_BITS
    if eff.exec:
        may |= EXEC_BIT
    kills = dst & ~EXEC_BIT
    if row.sem is not None and "scc" in row.sem.outs and kind == "salu":
        kills |= SCC_BIT
    uses = src | (dst if row.reads_dst else 0) | EXEC_BIT
    if row.sem is not None and "scc" in row.sem.ins:
        uses |= SCC_BIT
    if kind in ("buffer", "global"):
        # a load returns into its first operand; every other operand addresses the access
        access_uses = EXEC_BIT
        for k, op in enumerate(ops):
            if not (k == 0 and eff.n_dst):
                access_uses |= _reg_bits(op)
        return _Facts(may, kills, 0, access_uses, bool(may & EXEC_BIT), False)
    if kind == "data":
        return _Facts(may, kills, 0, 0, bool(may & EXEC_BIT), False)
    if kind == "unknown":
        reads = src | dst | EXEC_BIT | SCC_BIT
        return _Facts(may, 0, reads, reads, True, True)
    return _Facts(may, kills, uses, uses, bool(may & EXEC_BIT), True)


_CACHE: Dict[tuple, Tuple[List[_Facts], List[List[int]]]] = {}
_PLANS: Dict[tuple, ReplayPlan] = {}
_PROGRAMS: Dict[tuple, object] = {}


def _graph(code: List[Instr]):
    key = tuple((i.addr, i.text) for i in code)
    got = _CACHE.get(key)
    if got is None:
        index = {ins.addr: n for n, ins in enumerate(code)}
        graph = cfg_of(code).succ
        succ = [[index[t] for t in graph.get(ins.addr, ())] for ins in code]
        got = ([_facts(ins) for ins in code], succ)
        if len(_CACHE) >= 8:
            _CACHE.clear()
            _PLANS.clear()
            _PROGRAMS.clear()
        _CACHE[key] = got
    return key, got


def replay_plan(code: List[Instr], stop_addr: int) -> Optional[ReplayPlan]:
    """The plan for replaying ``code`` up to the instruction at ``stop_addr`` (module
    docstring); None when ``stop_addr`` is no instruction of ``code``.  Cached per code and
    access."""
    return accesses_plan(code, (stop_addr,))


def accesses_plan(code: List[Instr], stop_addrs) -> Optional[ReplayPlan]:
    """The plan that runs what any access at ``stop_addrs`` (instruction addresses) and the
    paths to them depend on: :func:`replay_plan` for several accesses at once (a run to the
    end that records each, :func:`addrsim.engine.explore.run_to_end`).  None when one of them
    is no instruction of ``code``.  Cached per code and set of accesses."""
    key, (facts, succ) = _graph(code)
    where = {ins.addr: n for n, ins in enumerate(code)}
    if not stop_addrs or any(a not in where for a in stop_addrs):
        return None
    targets = {where[a] for a in stop_addrs}
    pkey = (key, tuple(sorted(stop_addrs)))
    plan = _PLANS.get(pkey)
    if plan is not None:
        return plan
    n = len(code)
    live_in = [0] * n
    run = [False] * n
    changed = True
    while changed:          # backward liveness to a fixpoint (loops need a few passes)
        changed = False
        for i in range(n - 1, -1, -1):
            out = EXEC_BIT
            for s in succ[i]:
                out |= live_in[s]
            f = facts[i]
            if i in targets:
                r, uses = True, f.access_uses
            else:
                r = f.always or bool(f.may & out)
                uses = f.uses if (r and f.inputs) else 0
            new = (out & ~f.kills) | uses if r else out
            if r != run[i]:
                run[i] = r
                changed = True
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    mode = tuple(RUN if run[i] and (facts[i].inputs or i in targets) else OPAQUE if run[i] else SKIP
                 for i in range(n))
    regs = tuple(() if mode[i] == RUN else _bits_regs(facts[i].may) for i in range(n))
    plan = ReplayPlan(mode, regs)
    _PLANS[pkey] = plan
    return plan


@dataclass(frozen=True)
class SlicedProgram:
    """What a sliced run of some code under a plan computes from, without the instructions'
    addresses (:func:`sliced_program`).  The code is cut into *entries*: each instruction
    the run steps (the plan's RUN, every branch, ``s_endpgm``) is one entry; each maximal
    stretch of instructions it does not step, with no branch target inside it, is another.
    ``digest`` hashes the entries: a stepped instruction by its text (a branch by its
    mnemonic and the entry it jumps to; the recorded accesses marked), a stretch by its
    place alone.  What a stretch does is ``effects[e]``: per register it writes (names of
    :func:`reg_name`), OPAQUE or SKIP, the mode of the last instruction of the stretch that
    writes it (empty for a stepped entry).  ``entry`` maps an instruction address to its entry
    number, ``first`` an entry number to the address of its first instruction (``start``:
    its index in the code), ``length`` an entry to its instruction count."""

    digest: str
    entry: Dict[int, int]
    first: Tuple[int, ...]
    length: Tuple[int, ...]
    start: Tuple[int, ...]
    effects: Tuple[Dict[str, int], ...]

    def steps(self, visits: Sequence[int]) -> int:
        """Instructions a run takes, counted the way the run's budget counts them (every one,
        stepped or not), from how often it entered each entry (``visits``, by entry number)."""
        return sum(v * n for v, n in zip(visits, self.length))

    def seen_effects(self, live: Sequence[Sequence[str]]) -> str:
        """A digest of what the stretches do to the registers a run read after them
        (``live[e]``, by entry number: :class:`LiveTrace`), whether they write them or not."""
        h = hashlib.blake2b(digest_size=20)
        for e, eff in enumerate(self.effects):
            regs = set(live[e]) | ({"exec"} & set(eff))       # EXEC counts always (the plan steps its writers)
            if regs:
                h.update(f"{e} {[(r, eff.get(r, -1)) for r in sorted(regs)]}\n".encode())
        return h.hexdigest()


def reg_name(r: Reg) -> str:
    """"s12", "v3", "a4", "scc" or "exec" for a register of a plan."""
    return r if isinstance(r, str) else f"{r[0]}{r[1]}"


def sliced_program(code: List[Instr], plan: ReplayPlan, recorded) -> SlicedProgram:
    """The :class:`SlicedProgram` of ``code`` under ``plan`` with the accesses at addresses
    ``recorded`` marked.  Two codes with the same digest whose stretches do the same to every
    register a run reads after them (:meth:`SlicedProgram.seen_effects` of that run's
    :class:`LiveTrace`) make the same sliced run from the same starting state, step for step
    on the stepped instructions: the same values (opaque values aside, which are fresh
    symbols whatever their names), the same accesses at the same entries, the same branches
    taken (by induction on the steps: a value a stepped instruction reads was written by a
    stepped instruction, both runs alike, or comes through stretches that do the same to it);
    only the count of instructions that are not stepped differs, by entry
    (:meth:`SlicedProgram.steps`).  The machine reads an instruction's address only to name
    opaque values and wrap sites (``Machine.opaque``, ``origin``), so the text without the
    address is all a stepped instruction's meaning."""
    recorded = frozenset(recorded)
    targets = {i.target for i in code if i.target is not None}
    stepped = [plan.mode[n] == RUN or lookup(ins.mnemonic).kind in ("branch", "end") for n, ins in enumerate(code)]
    entry: Dict[int, int] = {}
    first: List[int] = []
    start: List[int] = []
    length: List[int] = []
    effects: List[Dict[str, int]] = []
    for n, ins in enumerate(code):
        if stepped[n] or not first or stepped[n - 1] or ins.addr in targets:
            first.append(ins.addr)
            start.append(n)
            length.append(0)
            effects.append({})
        entry[ins.addr] = len(first) - 1
        length[-1] += 1
        if not stepped[n]:
            for r in plan.regs[n]:
                effects[-1][reg_name(r)] = plan.mode[n]
    h = hashlib.blake2b(digest_size=20)
    for e, n in enumerate(start):
        ins = code[n]
        if not stepped[n]:
            h.update(b"S\n")
        elif ins.target is not None:
            h.update(f"R {ins.mnemonic} ->{entry.get(ins.target, -1)}\n".encode())
        else:
            h.update(f"R {ins.text}{' *' if ins.addr in recorded else ''}\n".encode())
    return SlicedProgram(h.hexdigest(), entry, tuple(first), tuple(length), tuple(start), tuple(effects))


def program_of(code: List[Instr], stop_addrs) -> Optional[SlicedProgram]:
    """The :class:`SlicedProgram` of :func:`accesses_plan` for ``stop_addrs`` with those
    accesses recorded; None when there is no plan.  Cached per code and set of accesses."""
    key, _ = _graph(code)
    pkey = (key, tuple(sorted(stop_addrs)))
    if pkey not in _PROGRAMS:
        plan = accesses_plan(code, stop_addrs)
        _PROGRAMS[pkey] = None if plan is None else sliced_program(code, plan, stop_addrs)
    return _PROGRAMS[pkey]


class LiveTrace:
    """Which registers a concrete run reads after each stretch of a :class:`SlicedProgram`
    (their value at the stretch's end, whether it wrote them or they passed through): the
    machine reports every register read (``read``: SGPRs and VCC through ``_sword``, VGPRs
    and AGPRs through ``_vword``, SCC where an instruction or a branch reads it; EXEC is never
    written by a stretch, and :meth:`SlicedProgram.seen_effects` counts it always) and the
    whole scalar writes of stepped instructions (``wrote``); :func:`addrsim.engine.explore`
    reports each unstepped instruction (``skipped``).  Every read must be reported; a write
    left out only makes ``live`` larger (a vector write is never counted as a kill: it may
    keep inactive lanes), which costs reuse, not soundness."""

    def __init__(self, prog: SlicedProgram):
        self.entry_at = {n: e for e, n in enumerate(prog.start)}
        self.log: List[int] = []                  # stretches in the order the run entered them
        self.since: Dict[str, int] = {}           # register -> log position its value dates from
        self.live: Dict[int, set] = {}
        self.names: Dict[int, Tuple[str, ...]] = {}   # register names of an unstepped instruction, by index

    def skipped(self, index: int, regs) -> None:
        e = self.entry_at.get(index)
        if e is not None:
            self.log.append(e)
        names = self.names.get(index)
        if names is None:
            names = self.names[index] = tuple(reg_name(r) for r in regs)
        at = len(self.log) - 1
        for r in names:
            self.since[r] = at

    def wrote(self, reg: str) -> None:
        self.since[reg] = len(self.log)

    def read(self, reg: str) -> None:
        k = self.since.get(reg, 0)
        if k < len(self.log):
            for e in self.log[k:]:
                self.live.setdefault(e, set()).add(reg)
            self.since[reg] = len(self.log)
