"""Each instruction's semantics (the table row applied to constants) against an independent
reference written with Python integers and explicit 32-bit masking (CDNA3 ISA guide)."""
from hypothesis import given, settings, strategies as st

from addrsim.isa import alu as S
from addrsim.ir.expr import Const, Sym
from addrsim.ir import expr as X

M32 = 0xFFFFFFFF
u32 = st.integers(0, M32)


def sx(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def run(name, *vals, widths=None):
    sem = S.TABLE[name]
    ins = [t for t in sem.ins]
    args = []
    for t, v in zip(ins, vals):
        w = 1 if t in ("m", "scc") else int(t[1:])
        args.append(Const(v, w))
    out = sem.fn(*args)
    assert all(isinstance(o, Const) for o in out), out
    return [o.value for o in out]


REF2 = {
    "s_add_u32": lambda a, b: [(a + b) & M32, int(a + b > M32)],
    "s_sub_u32": lambda a, b: [(a - b) & M32, int(b > a)],
    "s_mul_i32": lambda a, b: [(a * b) & M32],
    "s_mul_hi_u32": lambda a, b: [(a * b) >> 32],
    "s_mul_hi_i32": lambda a, b: [((sx(a, 32) * sx(b, 32)) >> 32) & M32],
    "s_and_b32": lambda a, b: [a & b, int(a & b != 0)],
    "s_or_b32": lambda a, b: [a | b, int(a | b != 0)],
    "s_xor_b32": lambda a, b: [a ^ b, int(a ^ b != 0)],
    "s_andn2_b32": lambda a, b: [a & ~b & M32, int(a & ~b & M32 != 0)],
    "s_lshl_b32": lambda a, b: [(a << (b & 31)) & M32, int((a << (b & 31)) & M32 != 0)],
    "s_lshr_b32": lambda a, b: [a >> (b & 31), int(a >> (b & 31) != 0)],
    "s_ashr_i32": lambda a, b: [(sx(a, 32) >> (b & 31)) & M32, int((sx(a, 32) >> (b & 31)) & M32 != 0)],
    "s_min_u32": lambda a, b: [min(a, b), int(a < b)],
    "s_max_i32": lambda a, b: [a if sx(a, 32) > sx(b, 32) else b, int(sx(a, 32) > sx(b, 32))],
    "s_cmp_lt_u32": lambda a, b: [int(a < b)],
    "s_cmp_lt_i32": lambda a, b: [int(sx(a, 32) < sx(b, 32))],
    "s_cmp_ge_i32": lambda a, b: [int(sx(a, 32) >= sx(b, 32))],
    "s_cmp_eq_u32": lambda a, b: [int(a == b)],
    "s_cmp_lg_u32": lambda a, b: [int(a != b)],
    "s_lshl2_add_u32": lambda a, b: [((a << 2) + b) & M32, int(((a << 2) + b) >> 32 != 0)],
    "s_bfe_u32": lambda a, b: (lambda r: [r, int(r != 0)])((a >> (b & 31)) & ((1 << min((b >> 16) & 0x7F, 32)) - 1)),
    "v_add_u32": lambda a, b: [(a + b) & M32],
    "v_sub_u32": lambda a, b: [(a - b) & M32],
    "v_subrev_u32": lambda a, b: [(b - a) & M32],
    "v_mul_lo_u32": lambda a, b: [(a * b) & M32],
    "v_mul_hi_u32": lambda a, b: [(a * b) >> 32],
    "v_mul_u32_u24": lambda a, b: [((a & 0xFFFFFF) * (b & 0xFFFFFF)) & M32],
    "v_mul_i32_i24": lambda a, b: [(sx(a, 24) * sx(b, 24)) & M32],
    "v_and_b32": lambda a, b: [a & b],
    "v_or_b32": lambda a, b: [a | b],
    "v_xor_b32": lambda a, b: [a ^ b],
    "v_lshlrev_b32": lambda s, a: [(a << (s & 31)) & M32],
    "v_lshrrev_b32": lambda s, a: [a >> (s & 31)],
    "v_ashrrev_i32": lambda s, a: [(sx(a, 32) >> (s & 31)) & M32],
    "v_min_u32": lambda a, b: [min(a, b)],
    "v_max_i32": lambda a, b: [a if sx(a, 32) > sx(b, 32) else b],
    "v_add_co_u32": lambda a, b: [(a + b) & M32, int(a + b > M32)],
    "v_sub_co_u32": lambda a, b: [(a - b) & M32, int(b > a)],
    "v_cmp_le_u32": lambda a, b: [int(a <= b)],
    "v_cmp_eq_u32": lambda a, b: [int(a == b)],
    "v_cmp_gt_i32": lambda a, b: [int(sx(a, 32) > sx(b, 32))],
}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(REF2)), u32, u32)
def test_two_source_ops(name, a, b):
    assert run(name, a, b) == REF2[name](a, b), name


@settings(max_examples=150, deadline=None)
@given(u32, u32, st.integers(0, 1))
def test_carry_chains(a, b, c):
    assert run("s_addc_u32", a, b, c) == [(a + b + c) & M32, int(a + b + c > M32)]
    assert run("s_subb_u32", a, b, c) == [(a - b - c) & M32, int(b + c > a)]
    assert run("v_addc_co_u32", a, b, c) == [(a + b + c) & M32, int(a + b + c > M32)]


@settings(max_examples=150, deadline=None)
@given(u32, u32, u32)
def test_three_source_ops(a, b, c):
    assert run("v_add3_u32", a, b, c) == [(a + b + c) & M32]
    assert run("v_lshl_add_u32", a, b, c) == [((a << (b & 31)) + c) & M32]
    assert run("v_mad_u32_u24", a, b, c) == [((a & 0xFFFFFF) * (b & 0xFFFFFF) + c) & M32]
    assert run("v_cndmask_b32", a, b, c & 1) == [b if c & 1 else a]
    assert run("v_bfe_u32", a, b, c) == [(a >> (b & 31)) & ((1 << (c & 31)) - 1)]


@settings(max_examples=100, deadline=None)
@given(u32, u32, st.integers(0, (1 << 64) - 1))
def test_v_mad_u64_u32(a, b, c):
    r = a * b + c
    assert run("v_mad_u64_u32", a, b, c) == [r & ((1 << 64) - 1), int(r >> 64)]


@settings(max_examples=100, deadline=None)
@given(u32, u32, st.lists(st.integers(0, 13), min_size=4, max_size=4))
def test_v_perm_b32(a, b, sels):
    sel = sum(s << (8 * i) for i, s in enumerate(sels))
    pair = (a << 32) | b
    ref = 0
    for i, s in enumerate(sels):
        if s < 8:
            byte = (pair >> (8 * s)) & 0xFF
        elif s < 12:
            byte = 0xFF if (pair >> (16 * (s - 8) + 15)) & 1 else 0
        else:
            byte = 0 if s == 12 else 0xFF
        ref |= byte << (8 * i)
    assert run("v_perm_b32", a, b, sel) == [ref]


@settings(max_examples=100, deadline=None)
@given(u32, u32)
def test_symbolic_matches_concrete(a, b):
    """The same rows over symbols, evaluated, agree with the rows over constants."""
    x, y = Sym("x", 32), Sym("y", 32)
    for name in ("s_add_u32", "s_mul_hi_u32", "v_mul_i32_i24", "s_lshr_b32", "s_cmp_lt_i32"):
        sym = S.TABLE[name].fn(x, y)
        got = [X.evaluate(o, {"x": a, "y": b}) for o in sym]
        assert got == run(name, a, b), name


@settings(max_examples=300, deadline=None)
@given(base=st.integers(0, (1 << 48) - 1), soffset=u32, ioff=st.integers(0, 4095), voff=u32, index=u32,
       stride=st.integers(0, (1 << 14) - 1), nrec=u32, size=st.sampled_from([1, 2, 4, 8, 12, 16]), idxen=st.booleans())
def test_a_known_linear_buffer_access_is_the_expression_formula_on_integers(base, soffset, ioff, voff, index, stride,
                                                                           nrec, size, idxen):
    """The concrete interpreter's integer path (isa.memory.linear_access) gives the address
    and the range check the expression formulas give on the same constants."""
    from addrsim.isa.memory import buffer_in_range, linear_access
    c64 = lambda v: X.zext(Const(v, 32), 64)  # noqa: E731
    addr = X.add(X.add(X.add(X.add(X.zext(Const(base, 48), 64), c64(soffset)), Const(ioff, 64)), c64(voff)),
                 X.mul(c64(index), X.zext(Const(stride, 14), 64)))
    inr = buffer_in_range(Const(index, 32), Const(voff, 32), ioff, Const(stride, 14), Const(nrec, 32), size, idxen)
    assert linear_access(base, soffset, ioff, voff, index, stride, nrec, size, idxen) == (addr.value, inr.value)
