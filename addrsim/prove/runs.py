"""Concrete runs kept in the query store by what they compute from, not by the kernel.

Owns :class:`Run`, :func:`run_of`, :func:`recall`, :func:`remember` and :func:`result_key`.
May import addrsim.engine.

Store coverage (:mod:`addrsim.prove.coverage`) and replays (:mod:`addrsim.prove.replay`) run
waves of the kernel on the concrete interpreter, sliced (:mod:`addrsim.engine.slice`).  Two
kernels whose sliced programs have the same digest
(:func:`addrsim.engine.slice.sliced_program`: the stepped instructions' text without their
addresses), run from the same starting states (``ConcreteLanes.state_digest``), make the same
run wherever their stretches of unstepped instructions do the same to every register the run
read after them (:meth:`addrsim.engine.slice.SlicedProgram.seen_effects`, the registers
recorded by :class:`addrsim.engine.slice.LiveTrace`).  A rounding sibling (rtz after rtne:
the bf16 conversions differ, and no address reads them) is such a kernel.

So a run that completed sliced is kept as two entries: under the run's key, how often each
wave entered each entry of the program and the registers it read after each stretch
(``("runs", packed visits, live)``); under :func:`result_key` (the run's key, what these
stretches do to those registers, and what the caller derived the result from), the result.
Another kernel reads the result only when its own stretches do the same to the same
registers and its stretches' lengths keep the run within the instruction budget (the budget
counts every instruction, stepped or not: :meth:`addrsim.engine.slice.SlicedProgram.steps`).
"""
from __future__ import annotations

import base64
import hashlib
import zlib
from array import array
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from addrsim.engine.slice import SlicedProgram


@dataclass(frozen=True)
class Run:
    """A keyed run: its program, its key (hex digest) and the instruction budget of one wave."""

    prog: SlicedProgram
    key: str
    steps: int


def run_of(prog: Optional[SlicedProgram], machines: Sequence, steps: int, tag: str) -> Optional[Run]:
    """The :class:`Run` of ``machines`` (one per wave, their starting states) over ``prog``
    within ``steps`` instructions a wave, ``tag`` naming what runs it; None when there is no
    program or a starting value is neither a constant nor opaque."""
    states = [m.state_digest() for m in machines]
    if prog is None or None in states:
        return None
    text = f"{tag} {prog.digest} {states} {steps}"
    return Run(prog, hashlib.blake2b(text.encode(), digest_size=20).hexdigest(), steps)


def _packed(values: List[int]) -> str:
    return base64.b64encode(zlib.compress(array("Q", values).tobytes())).decode()


def _unpacked(text: str) -> List[int]:
    a = array("Q")
    a.frombytes(zlib.decompress(base64.b64decode(text, validate=True)))
    return a.tolist()


def result_key(run: Run, live: Dict[int, Sequence[str]], what: str) -> tuple:
    """The store key of a result of ``run``: the run's key, what this code's stretches do to
    the registers the run read after them (``live``, by entry), and ``what`` (the caller's
    own inputs, as text)."""
    regs = [sorted(live.get(e, ())) for e in range(len(run.prog.first))]
    text = f"{run.key} {run.prog.seen_effects(regs)} {regs} {what}"
    return ("run-result", hashlib.blake2b(text.encode(), digest_size=20).hexdigest())


def remember(store, run: Run, visits: List[List[int]], live: Dict[int, set], what: str, result) -> None:
    """Keep ``result`` of ``run``, whose waves entered the code's instructions ``visits``
    times (per wave, by instruction index) and read the registers ``live`` after each
    stretch (by entry).  ``result`` must be a value the store keeps (JSON: ints, strings,
    lists, None)."""
    regs = {e: sorted(r) for e, r in live.items()}
    store[("runs", run.key)] = ("runs", [_packed([v[n] for n in run.prog.start]) for v in visits],
                                [[e, r] for e, r in sorted(regs.items())])
    store[result_key(run, regs, what)] = ("run-result", result)


def recall(store, run: Run, what: str):
    """(result,) of a run of another kernel (or an earlier one) that this code makes too, or
    None: no entry, a damaged one, stretches that do something else to a register that run
    read after them, or stretches that take a wave past the run's instruction budget."""
    got = store.get(("runs", run.key))
    if not (isinstance(got, tuple) and len(got) == 3 and got[0] == "runs"):
        return None
    try:
        waves = [_unpacked(v) for v in got[1]]
        live = {int(e): [str(r) for r in regs] for e, regs in got[2]}
    except (ValueError, TypeError, zlib.error):
        return None
    if any(len(v) != len(run.prog.length) or run.prog.steps(v) > run.steps for v in waves):
        return None
    hit = store.get(result_key(run, live, what))
    if not (isinstance(hit, tuple) and len(hit) == 2 and hit[0] == "run-result"):
        return None
    return (hit[1],)
