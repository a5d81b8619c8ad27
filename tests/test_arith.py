"""Machine-faithful arithmetic (issue 4): bv vs int mode, overflow reports with the wrapping
instruction, device-memory feasibility, bounds (allocation and num_records), SMT-LIB2 dumps.

Synthetic kernels from examples/ (gfx942, hdim 128, bf16: family addrsim-examples-hd128)."""

import pytest
import z3

from addrsim.ir import expr as X
from addrsim.api import verify
from addrsim.backends.ideal import ideal_eval, kept_wraps
from addrsim.ir.expr import Const, Sym

from test_examples import MODEL, build

GIB = 1 << 30


def only(rep):
    (c,) = rep["kernels"][0]["checks"]
    return c


# ----------------------------------------------------------------------------- int mode semantics

def test_int_mode_keeps_64_bit_products_exact():
    """s_mul_i32 + s_mul_hi_u32 on the same operands is a 64-bit product: in int mode the low
    half still wraps (it is a half), so concat(hi, lo) is the exact product, not lo + hi*2^32
    with lo unbounded."""
    a, b = Sym("a", 32), Sym("b", 32)
    lo, hi = X.mul(a, b), X.mulhu(a, b)
    pair = X.concat(hi, lo)
    keep = kept_wraps([pair])
    assert id(lo) in keep
    env = {"a": 0xFFFF_FFFF, "b": 0x1_0001}
    assert ideal_eval(pair, env, keep) == 0xFFFF_FFFF * 0x1_0001
    # a lone 32-bit product does not wrap in int mode, and wraps in bv
    assert ideal_eval(lo, env, kept_wraps([lo])) == 0xFFFF_FFFF * 0x1_0001
    assert X.evaluate(lo, env) == (0xFFFF_FFFF * 0x1_0001) % (1 << 32)


def test_int_mode_host_cast_and_pointer_halves():
    """u32(x) (the host's cast) keeps the whole value in int mode; a 48-bit pointer split in
    32-bit halves and rebuilt with a carry is the same pointer plus the offset."""
    x = Sym("x", 64, "shape")
    cast = X.extract(x, 31, 0)
    assert ideal_eval(cast, {"x": 5 << 32}, kept_wraps([cast])) == 5 << 32
    p = Sym("p", 48, "ptr")
    lo, hi = X.extract(p, 31, 0), X.zext(X.extract(p, 47, 32), 32)
    off = Sym("off", 32)
    s = X.add(lo, off)
    carry = X.ult(s, lo)
    addr = X.concat(X.add(hi, X.zext(carry, 32)), s)
    env = {"p": 0x7FFF_FFFF_FF00, "off": 0x200}
    keep = kept_wraps([addr])
    assert ideal_eval(addr, env, keep) == 0x7FFF_FFFF_FF00 + 0x200 == X.evaluate(addr, env)


def test_int_mode_negative_immediates():
    """s_add_u32 s0, s0, 0xffffffc0 subtracts 64 in both modes."""
    v = Sym("v", 32)
    e = X.add(v, Const(0xFFFF_FFC0, 32))
    assert ideal_eval(e, {"v": 100}, set()) == 36 == X.evaluate(e, {"v": 100})


# ----------------------------------------------------------------------------- examples

def test_32_bit_slice_term_is_an_overflow(tmp_path):
    """q_slice_u32: (batch_id*nhead_q + head_id) * Hs_q in a 32-bit s_mul_i32.  BHSD: proved
    over the integers, refuted in hardware arithmetic at a shape whose tensors fit in an
    MI300X; the report names the s_mul_i32 and the boundary."""
    co = build("q_slice_u32", tmp_path)
    c = only(verify(co, buffers=["q"], layouts=["bhsd"], model_files=[MODEL], properties=["address"], arith="int"))
    assert c["verdict"] == "proved" and c["arith"] == "int"
    c = only(verify(co, buffers=["q"], layouts=["bhsd"], model_files=[MODEL], properties=["address"]))
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow"
    x = c["counterexample"]
    sh, ids = x["shape"], x["coords"]
    # Q's byte offset of the slice passes 2^32 (the shape is minimal: batch 1, the head term)
    assert (ids["batch_id"] * sh["nhead_q"] + ids["head_id"]) * sh["seqlen_q"] * 256 >= 1 << 32
    assert x["address"]["extracted"] == x["address"]["expected"] % (1 << 32)
    assert 0 < x["memory_bytes"] <= 192 * GIB
    w = c["overflow"][0]
    assert w["kind"] == "instruction" and w["instruction"].startswith("s_mul_i32") and w["matters"]
    assert w["boundary"] == "seqlen_q*(batch_id*nhead_q + head_id) >= 2**24"
    assert w["exact"] >= 1 << 32 and w["machine"] == w["exact"] % (1 << 32)


def test_64_bit_slice_term_is_proved_in_both_modes(tmp_path):
    """q_slice_u64: the same product with s_mul_i32 + s_mul_hi_u32 and the carry."""
    co = build("q_slice_u64", tmp_path)
    for arith in ("bv", "int"):
        c = only(verify(co, buffers=["q"], layouts=["bhsd"], model_files=[MODEL], properties=["address"], arith=arith))
        assert c["verdict"] == "proved", (arith, c["reason"])


@pytest.mark.slow
def test_wrap_beyond_device_memory_is_not_reported(tmp_path):
    """lsed_u32_term: the 32-bit LSE term wraps only past 2^30 rows, when Q alone (hdim 128,
    bf16) is 256 GiB.  Proved within an MI300X's 192 GiB; with 2 TiB of memory the wrap is a
    counterexample whose tensors need more than 192 GiB."""
    co = build("lsed_u32_term", tmp_path)
    c = only(verify(co, buffers=["lse"], layouts=["bhsd"], model_files=[MODEL], properties=["address"]))
    assert c["verdict"] == "proved", c["reason"]
    c = only(verify(co, buffers=["lse"], layouts=["bhsd"], model_files=[MODEL], properties=["address"],
                    memory_gib=2048, min_budget_s=0))
    assert c["verdict"] == "counterexample" and c["cause"] == "overflow"
    x = c["counterexample"]
    assert 192 * GIB < x["memory_bytes"] <= 2048 * GIB
    sh, ids = x["shape"], x["coords"]
    assert (ids["batch_id"] * sh["nhead_q"] + ids["head_id"]) * sh["seqlen_q"] * 4 >= 1 << 32


def test_access_past_num_records(tmp_path):
    """lse_num_records: the slice base is right, but the raw V#'s num_records covers one head,
    so head 1's rows read as 0: address proved, bounds refuted (cause num_records)."""
    co = build("lse_num_records", tmp_path)
    rep = verify(co, buffers=["lse"], layouts=["bhsd"], model_files=[MODEL])
    got = {c["property"]: c for c in rep["kernels"][0]["checks"]}
    assert got["address"]["verdict"] == "proved"
    b = got["bounds"]
    assert b["verdict"] == "counterexample" and b["cause"] == "num_records"
    x = b["counterexample"]
    assert x["coords"]["head_id"] >= 1
    # inside the allocation (extent = nhead_q * seqlen_q * 4 bytes for batch 1) ...
    assert x["address"]["extracted"] + 4 <= x["address"]["expected"]
    # ... and at or past num_records = Hs_lsed = seqlen_q * 4 bytes from the batch's base
    assert x["address"]["extracted"] >= x["shape"]["seqlen_q"] * 4
    assert x["replayed_on"] == "this kernel"


def test_short_sequence_reads_past_the_tensor(tmp_path):
    """q_slice_u64 reads row lane%64 of its slice with num_records = -1 (no clamping): for
    seqlen_q < 64 the last head's rows run past Q's allocation (cause allocation)."""
    co = build("q_slice_u64", tmp_path)
    c = only(verify(co, buffers=["q"], layouts=["bhsd"], model_files=[MODEL], properties=["bounds"]))
    assert c["verdict"] == "counterexample" and c["cause"] == "allocation"
    x = c["counterexample"]
    assert x["shape"]["seqlen_q"] < 64
    assert x["address"]["extracted"] + 4 > x["address"]["expected"]     # offset + 4 bytes > extent


def test_real_kernel_lse_reads_stay_in_their_slice_but_for_wraps_and_the_sbhd_shortcut(real_kernel):
    """bwd_hd128_bf16_a16_rtne: every LSE and D read outside the loops, and each loop's first
    iteration, stays inside the [batch, nhead_q, seqlen_q] fp32 allocation and num_records for
    every shape that fits in an MI300X (issue 9).  Slice containment (issue 36) finds more:
    in BHSD, 32-bit wraps of the batch offset (s_mul_i32 s62, s4, s53 at 0x2b54) land in
    another batch's slice at tensors past 4 GiB; in SBHD, at the smallest shape (batch 2,
    seqlen_q 64), batch 1 reads batch 0's rows: the LSE/D shortcut."""
    rep = verify(real_kernel, buffers=["lse", "d"], layouts=["bhsd", "sbhd"], properties=["bounds"])
    got = {(c["buffer"], c["layout"]): c for c in rep["kernels"][0]["checks"]}
    for b in ("lse", "d"):
        w = got[(b, "bhsd")]
        assert w["verdict"] == "counterexample" and w["cause"] == "layout", w["reason"]
        assert "in bounds without 32-bit wraps: s_mul_i32 s62, s4, s53 at 0x2b54" in w["reason"]
        s = got[(b, "sbhd")]
        assert s["verdict"] == "counterexample" and s["cause"] == "layout", s["reason"]
        x = s["counterexample"]
        assert x["shape"]["batch"] == 2 and x["shape"]["seqlen_q"] == 64 and x["coords"]["batch_id"] == 1
        assert x["address"]["extracted"] < 0          # before its own slice: batch 0's rows


def test_real_kernel_key_tiles_read_their_padded_rows(real_kernel):
    """K and V: a 192-row key tile at seqlen_k = 64 reads rows 64..191 (the next heads' rows,
    discarded by the mask): the models' ``reach`` allows them, so the BHSD bounds check of K
    fails only through the 32-bit wrap at tensors past 4 GiB, never at a small shape."""
    rep = verify(real_kernel, buffers=["k"], layouts=["bhsd"], properties=["bounds"])
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "counterexample", c["reason"]
    assert "in bounds without 32-bit wraps" in c["reason"]
    assert c["counterexample"]["memory_bytes"] > 4 << 30


def test_undecided_obligation_is_written_as_smtlib(tmp_path):
    """A solver timeout gives "unknown" and the obligation as SMT-LIB2 that Z3 reads back (the
    ABI-fix kernel in SBHD: not decided by polynomial arithmetic alone, where lsed_u32_term's
    claims now are)."""
    co = build("lsed_abi_fix", tmp_path)
    out = tmp_path / "smt"
    c = only(verify(co, buffers=["lse"], layouts=["sbhd"], model_files=[MODEL], properties=["address"],
                    timeout_ms=1, check_budget_s=0.5, smt_dir=str(out)))
    assert c["verdict"] == "unknown"
    files = list(out.glob("*.smt2"))
    assert len(files) == 1 and c["smt2"] == str(files[0])
    text = files[0].read_text()
    assert "(check-sat)" in text
    s = z3.Solver()
    s.from_string(text)
    assert len(s.assertions()) > 0


@pytest.mark.parametrize("properties", [["bounds"], ["address", "bounds"]])
def test_bounds_checks_every_access_not_only_the_first(tmp_path, properties):
    """lse_last_row reads the slice's first row (in bounds) and then "the last row" at offset
    Hs_lsed, one row past the slice: past LSE's allocation for the last (batch, head).  The
    bounds check decides every access of the buffer, not only its first on the path (the
    address property's selection), whichever properties run beside it."""
    co = build("lse_last_row", tmp_path)
    rep = verify(co, buffers=["lse"], layouts=["bhsd", "sbhd"], model_files=[MODEL], properties=properties)
    got = {(c["property"], c["layout"]): c for c in rep["kernels"][0]["checks"]}
    for lay in ("bhsd", "sbhd"):
        b = got[("bounds", lay)]
        assert b["verdict"] == "counterexample" and b["cause"] == "allocation", b["reason"]
        x = b["counterexample"]
        sh, ids = x["shape"], x["coords"]
        assert (ids["batch_id"], ids["head_id"]) == (sh["batch"] - 1, sh["nhead_q"] - 1)   # the last slice
        assert x["address"]["extracted"] + 4 > x["address"]["expected"]                    # offset + 4 > extent
        if "address" in properties:
            assert got[("address", lay)]["verdict"] == "proved"


def test_each_property_writes_its_own_smtlib_file():
    """The address and bounds obligations of one kernel, buffer and layout are different
    formulas: their SMT-LIB2 files have different names (one used to overwrite the other)."""
    from addrsim.prove.check import smt2_name
    names = {smt2_name("_ZN5aiter4kE", "dk", "sbhd", p, a) for p in ("address", "bounds") for a in ("bv", "int")}
    assert len(names) == 4
    assert smt2_name("k e", "dk", "sbhd", "bounds", "bv") == "k_e.dk.sbhd.bounds.bv.smt2"
    # a routed rerun of the same check writes its own file
    assert smt2_name("k", "dk", "sbhd", "bounds", "bv", "fmha_v3_bwd") == "k.dk.sbhd.bounds.bv.routed-fmha_v3_bwd.smt2"


def test_real_kernel_k_bshd_bounds_below_4_gib_are_proved_to_the_last_tile(real_kernel):
    """K in BSHD, batch 1, nhead_q <= 16, seqlen <= 65536 (no 32-bit wrap): every one of the 48
    accesses stays in its workgroup's slice, the last key tile's 128-row guard included, whose
    certificate has no byte to spare and needs the divisor products
    (:func:`addrsim.backends.positivity.divisor_products`; with Z3's certificates alone the
    check spent its 60 Mru at the 19th access and was unknown)."""
    rep = verify(real_kernel, buffers=["k"], layouts=["bshd"], properties=["bounds"],
                 bounds={"batch": (1, 1), "nhead_q": (1, 16), "seqlen_q": (64, 65536)})
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "proved", c["reason"]


def test_real_kernel_k_bshd_bounds_reach_the_wrap_past_4_gib(real_kernel):
    """The whole domain: the 32-bit ``s_add_u32 s54, s54, s62`` at 0x2b40 (the address check's
    root cause) sends batch 1's rows into batch 0's: the least shape, proven minimal."""
    rep = verify(real_kernel, buffers=["k"], layouts=["bshd"], properties=["bounds"])
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "counterexample", c["reason"]
    x = c["counterexample"]
    assert x["minimal"] and x["shape"]["batch"] == 2 and x["shape"]["seqlen_k"] == 932224, x["shape"]
    assert "0x2b40" in c["reason"] and "in bounds without 32-bit wraps" in c["reason"]


def test_real_kernel_k_bshd_one_row_more_in_the_last_group_is_refuted(real_kernel, tmp_path):
    """The wrong kernel for the certificates' tight case: the edited listing steps the base of
    its last 16-row group of K loads by 17 rows (``s_mul_i32 s60, 17, s7`` at 0x31b4), so a key
    tile reads 193 rows.  Below 4 GiB, where the unedited kernel is proved (the test above),
    one full tile (seqlen 192) reads row 192: past the allocation, the least shape."""
    from test_mutations import edit, objdump
    p = tmp_path / "edited.s"
    p.write_text(edit(objdump(real_kernel), 0x31B4, "s_mul_i32 s60, 16, s7", "s_mul_i32 s60, 17, s7"))
    rep = verify(p, ["k"], ["bshd"], like=real_kernel, properties=["bounds"],
                 bounds={"batch": (1, 1), "nhead_q": (1, 16), "seqlen_q": (64, 65536)})
    (c,) = rep["kernels"][0]["checks"]
    assert c["verdict"] == "counterexample", c["reason"]
    x = c["counterexample"]
    assert x["minimal"] and x["shape"]["seqlen_k"] == 192 and x["shape"]["nhead_q"] == 1, x["shape"]
    assert "outside the allocation of k" in c["reason"]
