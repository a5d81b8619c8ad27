"""The emulator's data-path rows (addrsim/isa/datapath.py) against independent references:
IEEE binary32 in numpy float64, bf16 rounding by exhaustive neighbour search, DPP quad_perm
from the ISA guide's table, MFMA numerics against MMA-Sim (PyPI ``mmasim``: CDNA3 MFMA
arithmetic, needs PyTorch; skipped without it; close, not bit-exact: see the test) and MFMA layouts from AMD's matrix
instruction calculator (facts written out here per lane)."""
import numpy as np
import pytest

from addrsim.isa import datapath as dp

RNG = np.random.default_rng(7)


def bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)


def test_fma_and_exp_rows():
    a, b, c = (RNG.standard_normal(64).astype(np.float32) for _ in range(3))
    (r,) = dp.FLOAT["v_fma_f32"].fn(bits(a), bits(b), bits(c))
    want = (a.astype(np.float64) * b + c).astype(np.float32)
    assert np.array_equal(r.astype(np.uint32).view(np.float32), want)
    (e,) = dp.FLOAT["v_exp_f32"].fn(bits(a))
    got = e.astype(np.uint32).view(np.float32).astype(np.float64)
    assert np.all(np.abs(got - 2.0 ** a.astype(np.float64)) <= np.spacing(got.astype(np.float32)))   # 1 ULP


def test_unordered_compare_is_nan_of_either():
    a = np.array([np.nan, 1.0, 2.0, np.nan] * 16, dtype=np.float32)
    b = np.array([0.0, np.nan, 2.0, np.nan] * 16, dtype=np.float32)
    (m,) = dp.FLOAT["v_cmp_u_f32"].fn(bits(a), bits(b))
    assert m.tolist() == [True, True, False, True] * 16


def _bf16_nearest(x: float) -> int:
    """The bf16 bit pattern nearest to x, ties to even (search of the two neighbours)."""
    f = np.float32(x).view(np.uint32)
    lo = int(f) >> 16
    cands = [lo, lo + 1]
    vals = [float(np.uint32(c << 16).view(np.float32)) for c in cands]
    d = [abs(v - float(x)) for v in vals]
    if d[0] != d[1]:
        return cands[int(d[1] < d[0])]
    return cands[0] if cands[0] % 2 == 0 else cands[1]


def test_bf16_rounding_is_nearest_even():
    xs = np.concatenate([RNG.standard_normal(2000).astype(np.float32),
                         np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -1 - 2 ** -8], dtype=np.float32)])
    got = dp.bf16_round(xs)
    assert [int(g) for g in got] == [_bf16_nearest(float(x)) for x in xs]


def test_packed_bf16_add_rounds_each_half():
    old = np.array([0x3F80_3F80], dtype=np.uint32)          # (1.0, 1.0)
    add = np.array([0x3B80_4000], dtype=np.uint32)          # (2.0 low, 2**-8 high)
    r = int(dp.pk_add_bf16(old, add)[0])
    assert r & 0xFFFF == 0x4040                              # 3.0
    assert r >> 16 == 0x3F80                                 # 1 + 2**-8 rounds to even: 1.0


def test_dpp_quad_perm_and_masks():
    src, write = dp.dpp_source(("quad_perm:[1,0,3,2]", "row_mask:0x5", "bank_mask:0xf"))
    assert src[:8].tolist() == [1, 0, 3, 2, 5, 4, 7, 6]
    assert write.tolist() == [True] * 16 + [False] * 16 + [True] * 16 + [False] * 16


def _regs_from(M: np.ndarray, per: int, rows_in_lane: bool) -> np.ndarray:
    """Registers [per/2, 64] of bf16 matrix M laid out as the calculator says: A[i][k] (or
    B[k][j], ``rows_in_lane`` False) in lane i + 16*(k // per), element k % per."""
    regs = np.zeros((per // 2, 64), dtype=np.uint32)
    h = dp.bf16_round(M.astype(np.float32))
    for lane in range(64):
        for e in range(per):
            k = per * (lane // 16) + e
            v = int(h[lane % 16, k] if rows_in_lane else h[k, lane % 16])
            regs[e // 2, lane] |= v << (16 * (e % 2))
    return regs


@pytest.mark.parametrize("mn,per", [("v_mfma_f32_16x16x16_bf16", 4), ("v_mfma_f32_16x16x32_bf16", 8)])
def test_mfma_layout_from_the_calculator(mn, per):
    """A = e_r0 (row 0 only, at column c), B = e_c0 (column 0 only): D[0][0] is the only
    nonzero result, held by lane 0, register 0 (D[i][j] in lane j + 16*(i//4), register i%4)."""
    K = 4 * per
    for c in (0, K - 1, K // 2 + 1):
        A = np.zeros((16, K)); A[0, c] = 3.0
        B = np.zeros((K, 16)); B[c, 0] = 2.0
        Cm = np.zeros((4, 64), dtype=np.uint32)
        D = dp.MFMA[mn][3](_regs_from(A, per, True), _regs_from(B.T, per, True), Cm).view(np.float32)
        assert D[0, 0] == 6.0 and np.count_nonzero(D) == 1
    # D[5][3]: lane 3 + 16 * 1, register 1
    A = np.zeros((16, K)); A[5, 1] = 1.0
    B = np.zeros((K, 16)); B[1, 3] = 1.0
    D = dp.MFMA[mn][3](_regs_from(A, per, True), _regs_from(B.T, per, True), np.zeros((4, 64), np.uint32))
    assert D.view(np.float32)[1, 19] == 1.0


def test_mfma_numerics_against_mmasim():
    torch = pytest.importorskip("torch")
    sim = pytest.importorskip("mmasim.amd.sim")
    A = RNG.standard_normal((16, 16)); B = RNG.standard_normal((16, 16)); C = RNG.standard_normal((16, 16))
    Ab = dp.bf16_to_f32(dp.bf16_round(A.astype(np.float32))).astype(np.float64)
    Bb = dp.bf16_to_f32(dp.bf16_round(B.astype(np.float32))).astype(np.float64)
    Cf = C.astype(np.float32)
    creg = np.zeros((4, 64), dtype=np.uint32)
    lane = np.arange(64)
    for r in range(4):
        creg[r] = Cf[4 * (lane // 16) + r, lane % 16].view(np.uint32)
    D = dp.MFMA["v_mfma_f32_16x16x16_bf16"][3](_regs_from(Ab, 4, True), _regs_from(Bb.T, 4, True), creg)
    got = np.zeros((16, 16), dtype=np.float32)
    for r in range(4):
        got[4 * (lane // 16) + r, lane % 16] = D[r].view(np.float32)
    ref = sim.MFMA("CDNA3", "f32_16x16x16_bf16")(torch.tensor(Ab, dtype=torch.bfloat16),
                                                 torch.tensor(Bb, dtype=torch.bfloat16),
                                                 torch.tensor(Cf)).numpy()
    # not bit-exact: the emulator sums the products in float64 and rounds once; CDNA3 adds them
    # in fused groups with truncation (MMA-Sim's MMA_TR_FDPA, L_max 8): up to about 10 ULP of
    # the result where terms cancel, within 2**-22 of the magnitude of the terms
    scale = np.abs(Ab) @ np.abs(Bb) + np.abs(Cf)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 2.0 ** -22 * scale)
    assert np.mean(got == ref) > 0.6


def test_permlane16_swap_exchanges_odd_rows_of_vdst_with_even_rows_of_src():
    """V_PERMLANE16_SWAP_B32 (gfx950): vdst lanes 16..31 <-> src lanes 0..15 and vdst lanes
    48..63 <-> src lanes 32..47; the other rows keep their values."""
    d, s = np.arange(64, dtype=np.uint32), np.arange(100, 164, dtype=np.uint32)
    nd, ns = dp.permlane16_swap(d, s)
    assert nd[:16].tolist() == list(range(16)) and nd[32:48].tolist() == list(range(32, 48))
    assert nd[16:32].tolist() == list(range(100, 116)) and nd[48:].tolist() == list(range(132, 148))
    assert ns[:16].tolist() == list(range(16, 32)) and ns[32:48].tolist() == list(range(48, 64))
    assert ns[16:32].tolist() == list(range(116, 132)) and ns[48:].tolist() == list(range(148, 164))


def test_read_tr_b16_turns_a_mn_contiguous_tile_into_k_contiguous_lanes():
    """DS_READ_B64_TR_B16: a 16x4 (MN x K) tile in each block of 16 lanes, lane j reading MN
    4*(j%4)..+3 at K j//4; afterwards lane i holds MN i, K 0..3 (the instruction's purpose: an
    MFMA operand from an MN-contiguous LDS tile)."""
    tile = np.arange(4 * 64, dtype=np.uint16).reshape(4, 64)         # tile[k][block*16 + mn]
    lane = np.arange(64)
    raw = np.stack([tile[(lane % 16) // 4, 16 * (lane // 16) + 4 * (lane % 4) + e] for e in range(4)], axis=1)
    out = dp.read_tr_b16(raw)
    for i in range(64):
        assert out[i].tolist() == [tile[k, i] for k in range(4)]


def _regs32(M: np.ndarray, per: int, decode_round) -> np.ndarray:
    """Registers [per/2, 64] of a 32-row operand: row (or column) l % 32 in lane l, K
    elements per*(l//32) .. + per - 1."""
    regs = np.zeros((per // 2, 64), dtype=np.uint32)
    h = decode_round(M.astype(np.float32))
    for lane in range(64):
        for e in range(per):
            regs[e // 2, lane] |= int(h[lane % 32, per * (lane // 32) + e]) << (16 * (e % 2))
    return regs


@pytest.mark.parametrize("mn", ["v_mfma_f32_32x32x16_bf16", "v_mfma_f32_32x32x16_f16"])
def test_mfma_32x32_layout_from_the_calculator(mn):
    """32x32x16 (gfx950): D[i][j] in lane j + 32*((i//4) % 2), register 4*(i//8) + i%4 (the
    matrix calculator's 32x32 output layout, as for CDNA3's 32x32x8); A[i][k] in lane
    i + 32*(k//8), element k%8."""
    rnd = dp.bf16_round if "bf16" in mn else dp.f16_round
    for i, j, c in ((0, 0, 0), (13, 7, 9), (31, 30, 15), (6, 17, 4)):
        A = np.zeros((32, 16)); A[i, c] = 3.0
        B = np.zeros((16, 32)); B[c, j] = 0.5
        D = dp.MFMA[mn][3](_regs32(A, 8, rnd), _regs32(B.T, 8, rnd), np.zeros((16, 64), np.uint32)).view(np.float32)
        lane, reg = j + 32 * ((i // 4) % 2), 4 * (i // 8) + i % 4
        assert D[reg, lane] == 1.5 and np.count_nonzero(D) == 1
    C = np.arange(16 * 64, dtype=np.float32).reshape(16, 64)        # C passes through where A*B = 0
    zero = np.zeros((4, 64), np.uint32)
    assert np.array_equal(dp.MFMA[mn][3](zero, zero, C.view(np.uint32)).view(np.float32), C)


def test_f16_mfma_numerics_against_mmasim():
    torch = pytest.importorskip("torch")
    sim = pytest.importorskip("mmasim.amd.sim")
    A = RNG.standard_normal((16, 16)); B = RNG.standard_normal((16, 16))
    Ah = dp.f16_to_f32(dp.f16_round(A.astype(np.float32))).astype(np.float64)
    Bh = dp.f16_to_f32(dp.f16_round(B.astype(np.float32))).astype(np.float64)
    regs = lambda M: np.stack([np.array([int(dp.f16_round(np.float32(M[l % 16, 4 * (l // 16) + 2 * r]))) |  # noqa: E731
                                          int(dp.f16_round(np.float32(M[l % 16, 4 * (l // 16) + 2 * r + 1]))) << 16
                                          for l in range(64)], dtype=np.uint32) for r in range(2)])
    D = dp.MFMA["v_mfma_f32_16x16x16_f16"][3](regs(Ah), regs(Bh.T), np.zeros((4, 64), np.uint32))
    lane = np.arange(64)
    got = np.zeros((16, 16), dtype=np.float32)
    for r in range(4):
        got[4 * (lane // 16) + r, lane % 16] = D[r].view(np.float32)
    ref = sim.MFMA("CDNA3", "f32_16x16x16_f16")(torch.tensor(Ah, dtype=torch.float16), torch.tensor(Bh, dtype=torch.float16),
                                                torch.zeros(16, 16)).numpy()
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 2.0 ** -22 * (np.abs(Ah) @ np.abs(Bh)))


def test_f16_conversions_and_packed_add():
    """V_CVT_PK_F16_F32 rounds to nearest even, V_CVT_PKRTZ_F16_F32 toward zero (65536 -> 65504,
    not infinity); V_CVT_F32_F16/BF16 read the low half; BUFFER_ATOMIC_PK_ADD_F16 rounds each
    half; V_CMP_EQ_F32 is false for NaN."""
    v = lambda *x: np.array(x, dtype=np.float32).view(np.uint32).astype(np.uint64)  # noqa: E731
    x = np.float32(1 + 0.7 * 2.0 ** -10)                          # 0.7 of a binary16 ULP past 1
    pk = int(dp.FLOAT["v_cvt_pk_f16_f32"].fn(v(x), v(-2.0))[0][0])
    rtz = int(dp.FLOAT["v_cvt_pkrtz_f16_f32"].fn(v(x), v(65536.0))[0][0])
    assert pk & 0xFFFF == 0x3C01 and pk >> 16 == 0xC000          # nearest: up to 1 + 2**-10
    assert rtz & 0xFFFF == 0x3C00 and rtz >> 16 == 0x7BFF        # toward zero: 1.0 and 65504
    assert dp.FLOAT["v_cvt_f32_f16"].fn(np.array([0xABCD3C00], dtype=np.uint64))[0].astype(np.uint32).view(np.float32)[0] == 1.0
    assert dp.FLOAT["v_cvt_f32_bf16"].fn(np.array([0x12343F80], dtype=np.uint64))[0].astype(np.uint32).view(np.float32)[0] == 1.0
    r = int(dp.pk_add_f16(np.array([0x3C00_3C00], np.uint32), np.array([0x1000_4000], np.uint32))[0])
    assert r & 0xFFFF == 0x4200 and r >> 16 == 0x3C00            # 1 + 2 = 3; 1 + 2**-11 ties to even: 1
    eq = dp.FLOAT["v_cmp_eq_f32"].fn(v(1.0, np.nan, 0.0), v(1.0, np.nan, -0.0))[0]
    assert eq.tolist() == [True, False, True]
