"""The operator registry: every IR operator declared once, with its exact meaning.

Owns: :data:`OPS` (name -> :class:`OpSpec`) and :func:`require_backend`, the check each
backend (:mod:`addrsim.backends`, the constructors of :mod:`addrsim.ir.expr`) runs on its
table when it is imported.  Imports nothing of addrsim.

An operator's *exact meaning* is a function on unsigned Python integers,
``meaning(values, arg_widths, params, result_width) -> value`` with the result in
``[0, 2**result_width)``: SMT-LIB's fixed-size bit-vector theory (unsigned wraparound, udiv by 0
all ones, urem by 0 the dividend), which is how the CDNA3/CDNA4 ALUs truncate results (AMD
Instinct MI300 ISA Reference Guide, sections 4 "Scalar ALU operations" and 6 "Vector ALU
operations").  It is the concrete backend: constant folding, the concrete interpreter and the
property test of every other backend all use it.

Binary32 operators act on bit patterns, round to nearest even (the MODE register's reset
value, ISA guide section 3.4 "Mode register").  ``f32_rcp`` is the *nominal* reciprocal
(correctly rounded); the hardware's V_RCP_F32 is accurate to 1 ULP only (ISA guide, VOP1
opcode table), so proofs never rely on its value (:mod:`addrsim.prove.idioms`).

``sel`` (an s_load_dword from an int32 array the kernel reads, such as a sequence-start
array) has no meaning on values alone: it reads memory, which the evaluator supplies.

Width rules (``shape``): ``same`` (operands and result of one width), ``pred`` (operands of
one width, 1-bit result), ``shift`` (like ``same``; a shift amount >= width gives 0, or the
sign for ``ashr``), ``ite`` (1-bit condition, two operands of the result's width), ``widen``
(one operand, wider result: ``params`` empty), ``extract`` (``params`` = (hi, lo), result
``hi - lo + 1`` bits), ``concat`` (result is the sum of the operand widths), ``f32`` (32-bit
operands and result), ``memory`` (``sel``: a Sym naming the array and a 64-bit byte offset;
32-bit result).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional


def mask(width: int) -> int:
    """All-ones value of ``width`` bits."""
    return (1 << width) - 1


def to_signed(value: int, width: int) -> int:
    """Two's-complement reading of an unsigned ``width``-bit integer."""
    value &= mask(width)
    return value - (1 << width) if value >> (width - 1) else value


def f32_value(bits: int) -> float:
    """The binary32 number whose bit pattern is the low 32 bits of ``bits``."""
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def f32_bits(x: float) -> int:
    """The binary32 bit pattern of ``x`` rounded to nearest even (infinities on overflow)."""
    try:
        return struct.unpack("<I", struct.pack("<f", x))[0]
    except OverflowError:
        return 0x7F800000 if x > 0 else 0xFF800000


def _f32_rcp(bits: int) -> int:
    x = f32_value(bits)
    if x == 0.0:
        return 0xFF800000 if (bits >> 31) else 0x7F800000
    if math.isinf(x):
        return 0x80000000 if x < 0 else 0
    if math.isnan(x):
        return 0x7FC00000
    return f32_bits(1.0 / x)


def _u32_from_f32(bits: int) -> int:
    """V_CVT_U32_F32: truncation toward zero, NaN and negatives 0, saturating at 2**32 - 1."""
    x = f32_value(bits)
    if math.isnan(x) or x <= 0.0:
        return 0
    if x >= 4294967296.0:
        return 0xFFFFFFFF
    return int(x)


@dataclass(frozen=True)
class OpSpec:
    """One IR operator: ``name``, ``arity``, width rule ``shape`` (module docstring), and
    ``meaning`` (exact, on unsigned integers; None for ``sel``, which reads memory)."""

    name: str
    arity: int
    shape: str
    meaning: Optional[Callable]
    doc: str


def _spec(name, arity, shape, doc, meaning=None):
    return OpSpec(name, arity, shape, meaning, doc)


_SPECS = (
    _spec("add", 2, "same", "a + b mod 2**w", lambda a, ws, p, w: (a[0] + a[1]) & mask(w)),
    _spec("sub", 2, "same", "a - b mod 2**w", lambda a, ws, p, w: (a[0] - a[1]) & mask(w)),
    _spec("mul", 2, "same", "a * b mod 2**w (the low half)", lambda a, ws, p, w: (a[0] * a[1]) & mask(w)),
    _spec("mulhu", 2, "same", "high half of the unsigned 2w-bit product",
          lambda a, ws, p, w: ((a[0] * a[1]) >> w) & mask(w)),
    _spec("mulhs", 2, "same", "high half of the signed 2w-bit product",
          lambda a, ws, p, w: ((to_signed(a[0], w) * to_signed(a[1], w)) >> w) & mask(w)),
    _spec("and", 2, "same", "bitwise and", lambda a, ws, p, w: a[0] & a[1]),
    _spec("or", 2, "same", "bitwise or", lambda a, ws, p, w: a[0] | a[1]),
    _spec("xor", 2, "same", "bitwise exclusive or", lambda a, ws, p, w: a[0] ^ a[1]),
    _spec("not", 1, "same", "bitwise complement", lambda a, ws, p, w: ~a[0] & mask(w)),
    _spec("shl", 2, "shift", "a << b; 0 when b >= w",
          lambda a, ws, p, w: (a[0] << a[1]) & mask(w) if a[1] < w else 0),
    _spec("lshr", 2, "shift", "a >> b (logical); 0 when b >= w", lambda a, ws, p, w: a[0] >> a[1] if a[1] < w else 0),
    _spec("ashr", 2, "shift", "a >> b (arithmetic); the sign when b >= w",
          lambda a, ws, p, w: (to_signed(a[0], w) >> min(a[1], w - 1)) & mask(w)),
    _spec("zext", 1, "widen", "zero extension", lambda a, ws, p, w: a[0]),
    _spec("sext", 1, "widen", "sign extension", lambda a, ws, p, w: to_signed(a[0], ws[0]) & mask(w)),
    _spec("extract", 1, "extract", "bits hi..lo", lambda a, ws, p, w: (a[0] >> p[1]) & mask(w)),
    _spec("concat", 2, "concat", "a in the high bits, b in the low bits", lambda a, ws, p, w: (a[0] << ws[1]) | a[1]),
    _spec("ite", 3, "ite", "b if c else e", lambda a, ws, p, w: a[1] if a[0] else a[2]),
    _spec("eq", 2, "pred", "a == b", lambda a, ws, p, w: int(a[0] == a[1])),
    _spec("ult", 2, "pred", "a < b unsigned", lambda a, ws, p, w: int(a[0] < a[1])),
    _spec("ule", 2, "pred", "a <= b unsigned", lambda a, ws, p, w: int(a[0] <= a[1])),
    _spec("slt", 2, "pred", "a < b signed",
          lambda a, ws, p, w: int(to_signed(a[0], ws[0]) < to_signed(a[1], ws[1]))),
    _spec("sle", 2, "pred", "a <= b signed",
          lambda a, ws, p, w: int(to_signed(a[0], ws[0]) <= to_signed(a[1], ws[1]))),
    _spec("udiv", 2, "same", "floor(a / b); all ones when b == 0",
          lambda a, ws, p, w: (a[0] // a[1]) if a[1] else mask(w)),
    _spec("urem", 2, "same", "a mod b; a when b == 0", lambda a, ws, p, w: (a[0] % a[1]) if a[1] else a[0]),
    _spec("sel", 2, "memory", "the int32 word at byte offset b of array a"),
    _spec("f32_from_u32", 1, "f32", "V_CVT_F32_U32", lambda a, ws, p, w: f32_bits(float(a[0]))),
    _spec("f32_rcp", 1, "f32", "nominal reciprocal (correctly rounded)", lambda a, ws, p, w: _f32_rcp(a[0])),
    _spec("f32_mul", 2, "f32", "binary32 product", lambda a, ws, p, w: f32_bits(f32_value(a[0]) * f32_value(a[1]))),
    _spec("u32_from_f32", 1, "f32", "V_CVT_U32_F32", lambda a, ws, p, w: _u32_from_f32(a[0])),
)

OPS: Dict[str, OpSpec] = {s.name: s for s in _SPECS}
FLOAT_OPS = tuple(n for n, s in OPS.items() if s.shape == "f32")
PREDICATES = tuple(n for n, s in OPS.items() if s.shape == "pred")


class BackendGap(Exception):
    """A backend's table does not cover the registry (raised at import)."""


def require_backend(backend: str, table: Mapping[str, object], unsupported: Mapping[str, str] = None) -> None:
    """Check that ``table`` (operator -> implementation) and ``unsupported`` (operator -> the
    reason the backend has none, e.g. "over-approximated by a fresh variable") together name
    every operator of :data:`OPS` exactly once, and nothing else.  Raises BackendGap naming
    the backend and the operators missing, doubled or unknown."""
    unsupported = unsupported or {}
    have = set(table) | set(unsupported)
    missing = sorted(set(OPS) - have)
    unknown = sorted(have - set(OPS))
    both = sorted(set(table) & set(unsupported))
    if missing or unknown or both:
        raise BackendGap(f"backend {backend}: missing {missing}, unknown {unknown}, both listed and unsupported {both}")
