"""The verdict of a check, and the one way a counterexample or a witness is built.

Owns :class:`Verdict`, :class:`Cause`, :class:`Counterexample`, :class:`Witness`,
:class:`ReplayFailure`, :class:`Check` and :func:`counterexample` (the builder every prover stage
uses).  May import addrsim.ir and addrsim.model.  Verdict and Cause are ``str`` enums: they
compare equal to their words ("proved", "overflow") and serialise as them, so the JSON report
(:func:`addrsim.report.json.check_json`, from which text, SARIF and JUnit render) is unchanged.

Offsets and addresses are bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List, Mapping, Optional


class _Word(str, Enum):
    """A closed set of words: prints and formats as the word itself."""

    def __str__(self):
        return str.__str__(self)

    def __format__(self, spec):
        return str.__format__(str(self), spec)


class Verdict(_Word):
    """``proved``: every access, every shape of the domain, with a replayed witness;
    ``counterexample``: a replayed failing shape; ``unknown``: undecided (the reason says
    why: solver budget, a replay that did not confirm); ``unsupported``: an instruction,
    idiom or control flow on the address path addrsim does not model; ``unreachable``: no
    shape of the domain reaches the access (the assumptions that exclude every shape are
    named)."""

    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"
    UNSUPPORTED = "unsupported"
    UNREACHABLE = "unreachable"


class Cause(_Word):
    """Why a counterexample fails: ``overflow`` (proved over unbounded integers, refuted in
    hardware arithmetic), ``formula`` (wrong over the integers too), ``loop`` (a later
    iteration is wrong), ``allocation`` / ``num_records`` (bounds: outside the tensor, or
    clamped by the V#), ``base`` (the buffer addressed through another pointer argument, or a
    base built from two), ``layout`` (one workgroup's stores leave its slice, store a byte
    twice or leave one of its rows unwritten: :mod:`addrsim.prove.coverage`); ``unclassified``
    when int mode could not decide."""

    BASE = "base"
    LAYOUT = "layout"
    OVERFLOW = "overflow"
    FORMULA = "formula"
    LOOP = "loop"
    ALLOCATION = "allocation"
    NUM_RECORDS = "num_records"
    UNCLASSIFIED = ""


@dataclass(frozen=True)
class ReplayFailure:
    """Why a solver model was not confirmed on the concrete interpreter.  ``kind``:
    ``not-reached`` (the replay did not reach the access), ``budget`` (past the replay's step
    budget), ``unsupported`` (an instruction the concrete machine cannot run), ``mismatch``
    (the concrete offset disagrees with the model: an engine bug), ``evaluation`` (the model
    lacks a value)."""

    kind: str
    reason: str

    def __str__(self):
        return self.reason


@dataclass
class Witness:
    """A shape of the domain where the proved access runs: ``offset`` is its byte offset from
    workgroup (0, 0), equal to the expected one; ``replayed_on`` says how it was confirmed."""

    shape: Dict[str, int]
    coords: Dict[str, int]
    lane: int
    offset: int
    replayed_on: str = "this kernel"

    def json(self) -> dict:
        return {"shape": self.shape, "coords": self.coords, "lane": self.lane, "offset": self.offset,
                "replayed_on": self.replayed_on}


@dataclass
class Counterexample:
    """A failing shape: ``coords`` (batch_id, head_id and the tile id), the kernel-argument
    values, both byte offsets from workgroup (0, 0) (``extracted`` the kernel's, ``expected``
    the model's; for bounds the access's offset from the pointer and the allocation's extent),
    the lane and the access's address (pc)."""

    shape: Dict[str, int]
    coords: Dict[str, int]
    kernargs: Dict[str, int]
    extracted: int
    expected: int
    lane: int
    access: int
    minimal: bool = True
    arrays: Dict[str, Dict[int, int]] = field(default_factory=dict)   # array -> {index: value}
    replayed_on: str = ""            # "" for this kernel, else the sibling kernel whose replay is reused
    memory_bytes: int = 0            # device memory every tensor of the family needs at this shape (bytes)
    cause: str = ""                  # bounds: allocation | num_records
    iteration: int = 1               # the loop iteration whose access is wrong (loop counterexamples)


@dataclass
class Check:
    """Verdict for one (buffer, layout).  Offsets and addresses are bytes."""

    buffer: str
    layout: str
    verdict: Verdict                  # proved | counterexample | unknown | unsupported | unreachable
    extracted: str = ""
    expected: str = ""
    difference: str = ""
    reason: Optional[str] = None
    counterexample: Optional[Counterexample] = None
    time_s: float = 0.0
    accesses: List[int] = field(default_factory=list)
    division_proofs: list = field(default_factory=list)
    arith: str = "bv"
    prop: str = "address"             # address | bounds
    cause: Cause = Cause.UNCLASSIFIED  # of a counterexample
    overflow: list = field(default_factory=list)   # addrsim.prove.wraps.WrapSite, first one first
    smt2: str = ""                    # path of the SMT-LIB2 file of an undecided obligation
    loops: bool = False               # proved for every iteration of the loops that access the buffer
    offset_sym: object = None         # sympy: extracted byte offset in kernel-argument terms (display, diff)
    shape_offset_sym: object = None   # sympy: the same in shape terms, the layout's contract substituted
    problem: object = None            # the models.Problem the check was decided over
    cases: list = field(default_factory=list)   # (Target, conds, claim, address, address at (0, 0)) per query
    failing: object = None            # the case whose query was refuted (counterexample)
    witness: object = None            # Witness of a proved check
    routing: object = None            # addrsim.prove.domain.Routing: does the host reach a failing shape?
    unreachable: list = field(default_factory=list)   # the assumptions that exclude every shape
    rows: Optional[dict] = None       # LSE address: the slice offsets the kernel reads at a small shape (differential.rows_read)
    spent_ru: int = 0                 # resource units the check's queries charged (the same in every run)
    proved_cases: set = field(default_factory=set)   # (claim digest, frozenset of condition digests) proved (prove.check)
    refuted_cases: list = field(default_factory=list)  # (claim digest, condition digests, model) refuted at a proven minimum
    undecided_cases: list = field(default_factory=list)  # (claim digest, condition digests, reason) where it stopped unknown
    routed_records: dict = field(default_factory=dict)   # host entry point -> Records of its routed rerun (api)

    def records(self) -> "Records":
        return Records(frozenset(self.proved_cases), tuple(self.refuted_cases), tuple(self.undecided_cases))


@dataclass(frozen=True)
class Records:
    """What checks decided, by claim fingerprint (addrsim.prove.check.fingerprint), for another
    check with the same claims under more conditions to reuse (prove.check.check's ``known``):
    ``proved`` (claim digest, frozenset of condition digests); ``refuted`` (claim digest,
    condition digests, a proven-minimal model in canonical names); ``undecided`` (claim digest,
    condition digests, why the check stopped unknown there)."""

    proved: frozenset = frozenset()
    refuted: tuple = ()
    undecided: tuple = ()

    def plus(self, other: "Records") -> "Records":
        return Records(self.proved | other.proved, self.refuted + other.refuted, self.undecided + other.undecided)


def counterexample(prob, model: Mapping[str, int], kernargs: Dict[str, int], extracted: int, expected: int,
                   access: int, replayed_on: str = "", shape: Optional[Dict[str, int]] = None,
                   arrays: bool = True) -> Counterexample:
    """The Counterexample of solver ``model`` (symbol -> value; arrays as ``name + "[]"`` ->
    {byte offset: value}) for problem ``prob`` (an addrsim.model.models.Problem): the shape
    (``shape``, default the model's reported shape: :meth:`Problem.shape_of`), the workgroup
    coordinates and lane from the model, the arrays by element index, and the two byte
    offsets given."""
    grid = prob.grid
    ids = {s.name: model.get(s.name, 0) for s in grid.values()}
    coords = {"batch_id": ids[grid["z"].name], "head_id": ids[grid["y"].name], grid["x"].name: ids[grid["x"].name]}
    arr = {k[:-2]: {off // 4: v for off, v in sorted(d.items())} for k, d in model.items()
           if k.endswith("[]")} if arrays else {}
    return Counterexample(prob.shape_of(model) if shape is None else shape, coords, kernargs, extracted, expected,
                          model.get(LANE, 0), access, True, arr, replayed_on)


LANE = "tid_x"      # the lane's symbol (addrsim.prove.machines.LANE)
