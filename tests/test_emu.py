"""The virtual MI300, step 1 (issue 37): the machine and the instructions of examples/ run on
real code objects built from the listings (gfx942), every workgroup of a small grid.

Each test states the shape, the layout (BHSD, hdim 128, bf16; LSE fp32) and what the kernel
must have read or written, computed here from the layout alone (numpy), never from the
prover's extraction."""
import numpy as np
import pytest

from addrsim.emu.memory import Memory, buffer_addresses, vsharp
from addrsim.emu.run import Launch, pack_kernarg, run_grid
from addrsim.emu.step import step
from addrsim.emu.wave import EmuError, Wave, bits, to_mask
from addrsim.isa.operands import EXEC_LO
from addrsim.loader.disasm import parse_listing
from addrsim.loader.listing import load_source

from test_examples import EX, build

B, H, S, HD = 2, 3, 192, 128


def launch_of(name, tmp_path, values, grid, trace):
    src = load_source(build(name, tmp_path), None)
    k = src.co.kernels[0]
    return Launch(k, src.co.arch, src.code[k.symbol], pack_kernarg(k, values), grid,
                  on_access=lambda ids, wave, a: trace.append((ids, wave, a)), keep_waves=True)


def test_lse_loop_reads_every_row_of_its_own_slice(tmp_path):
    """examples/lse_loop.s, batch 2, nhead_q 3, seqlen_q 192: LSE fp32 [batch, nhead, seqlen];
    each workgroup's waves read rows 0..191 of slice (batch_id, head_id), 64 per iteration,
    and v2 ends holding LSE[b, h, 128 + lane % 64] (the last tile)."""
    mem = Memory()
    lse = np.arange(B * H * S, dtype=np.float32).reshape(B, H, S) + 0.5
    base = mem.alloc("lse", lse)
    trace = []
    la = launch_of("lse_loop", tmp_path, {"Lse": base, "D": 0, "BAs_q": 0, "nhead_q": H, "Hs_lsed": S * 4,
                                          "seqlen_q": S}, (1, H, B), trace)
    run_grid(la, mem)
    for (x, h, b), waves in la.waves.items():
        for w in waves:
            assert w.done
            got = w.v[2].view(np.float32)
            assert np.array_equal(got, lse[b, h, 128 + np.arange(64) % 64])
    rows = {}
    for (x, h, b), wave, a in trace:
        off = (a.address[a.lanes] - np.uint64(base)).astype(np.int64)
        rows.setdefault((b, h), set()).update(((off // 4) - (b * H + h) * S).tolist())
    assert rows == {(b, h): set(range(S)) for b in range(B) for h in range(H)}
    assert la.instructions > 0


def test_q_next_row_reads_one_row_past_and_the_v_sharp_clamps_the_last(tmp_path):
    """examples/q_next_row.s, batch 1, nhead_q 2, seqlen_q 64: Q bf16 [1, 2, 64, 128] as
    words; lane 63 of head 0 reads head 1's row 0; head 1's lane 63 is past num_records (2
    heads) and reads 0: the fault the bounds check reports, seen on the machine."""
    mem = Memory()
    q = np.arange(2 * 64 * HD // 2, dtype=np.uint32).reshape(2, 64, HD // 2) + 1
    base = mem.alloc("q", q)
    trace = []
    la = launch_of("q_next_row", tmp_path, {"Q": base, "nhead_q": 2, "Hs_q": 64 * HD * 2}, (1, 2, 1), trace)
    run_grid(la, mem)
    w0 = la.waves[(0, 0, 0)][0].v[2]
    assert w0[63] == q[1, 0, 0] and w0[0] == q[0, 1, 0]
    w1 = la.waves[(0, 1, 0)][0].v[2]
    assert w1[62] == q[1, 63, 0] and w1[63] == 0


def test_salu_rows_and_scc():
    """s_add_u32 carry into s_addc_u32 (a 64-bit add), s_cmp into SCC, s_cselect."""
    text = """
        s_add_u32 s2, s0, s1        // 000000000000: 00000000
        s_addc_u32 s3, 0, 0         // 000000000004: 00000000
        s_cmp_lt_u32 s1, s0         // 000000000008: 00000000
        s_cselect_b32 s4, 7, 9      // 00000000000C: 00000000
    """
    w = Wave()
    w.s[0], w.s[1] = 0xFFFFFFFF, 2
    for ins in list(parse_listing(_wrap(text)).values())[0]:
        step(w, ins, Memory())
    assert (w.s[2], w.s[3], w.scc, w.s[4]) == (1, 1, 1, 7)


def test_valu_writes_only_exec_lanes_and_vopc_masks():
    """v_add_u32 under EXEC = even lanes; v_cmp_gt_u32 writes VCC with 0 for inactive lanes;
    v_cndmask_b32 selects per lane."""
    text = """
        v_add_u32_e32 v1, 5, v0                 // 000000000000: 00000000
        v_cmp_gt_u32_e32 vcc, 10, v0            // 000000000004: 00000000
        v_cndmask_b32_e32 v2, 0, v1, vcc        // 000000000008: 00000000
    """
    w = Wave()
    w.v[0] = np.arange(64, dtype=np.uint32)
    even = np.arange(64) % 2 == 0
    w.set_mask(EXEC_LO, to_mask(even))
    for ins in list(parse_listing(_wrap(text)).values())[0]:
        step(w, ins, Memory())
    lane = np.arange(64)
    assert np.array_equal(w.v[1], np.where(even, lane + 5, 0))
    assert np.array_equal(bits(w.mask(106)), even & (lane < 10))
    assert np.array_equal(w.v[2], np.where(even & (lane < 10), lane + 5, 0))


def test_fp32_denormals_follow_the_descriptors_mode():
    """FLOAT_DENORM_MODE_32 0 (every fmha_v3_bwd kernel): a denormal source reads as 0 and a
    denormal result is written as 0; mode 3 keeps both.  2**-130 + 2**-130 and 1.5 * 2**-126 -
    2**-126 (a denormal difference of normal numbers)."""
    text = """
        v_add_f32_e32 v2, v0, v0                 // 000000000000: 00000000
        v_sub_f32_e32 v3, v1, v4                 // 000000000004: 00000000
    """
    out = {}
    for mode in (0, 3):
        w = Wave(denorm32=mode)
        w.v[0][:] = np.float32(2.0 ** -130).view(np.uint32)
        w.v[1][:] = np.float32(1.5 * 2.0 ** -126).view(np.uint32)
        w.v[4][:] = np.float32(2.0 ** -126).view(np.uint32)
        w.set_mask(EXEC_LO, (1 << 64) - 1)
        for ins in list(parse_listing(_wrap(text)).values())[0]:
            step(w, ins, Memory())
        out[mode] = (float(w.v[2].view(np.float32)[0]), float(w.v[3].view(np.float32)[0]))
    assert out[0] == (0.0, 0.0)
    assert out[3] == (2.0 ** -129, 2.0 ** -127)


def test_buffer_range_checks_raw_and_structured():
    """Raw (stride 0): offset + size <= num_records; structured: index < num_records."""
    raw = vsharp([0x1000, 0, 16, 0])
    idx = np.zeros(64, dtype=np.uint64)
    off = np.arange(64, dtype=np.uint64) * np.uint64(4)
    addr, ok = buffer_addresses(raw, idx, off, 0, 0, 4)
    assert ok.tolist() == [True] * 4 + [False] * 60 and int(addr[3]) == 0x100C
    st = vsharp([0x1000, 8 << 16, 3, 0])
    addr, ok = buffer_addresses(st, np.arange(64, dtype=np.uint64), np.zeros(64, dtype=np.uint64), 0, 4, 4)
    assert ok.tolist() == [True] * 3 + [False] * 61 and int(addr[2]) == 0x1000 + 16 + 4
    # a stride-4 V# read with offen only (idxen clear) is checked in bytes on gfx9+: aiter's odo
    # kernel stores D through such a V# with num_records = the slice's remaining bytes
    d = vsharp([0x1000, 4 << 16, 400, 0])
    addr, ok = buffer_addresses(d, idx, np.arange(64, dtype=np.uint64) * np.uint64(8), 0, 0, 4, idxen=False)
    assert ok.tolist() == [True] * 50 + [False] * 14
    addr, ok = buffer_addresses(d, idx, np.arange(64, dtype=np.uint64) * np.uint64(8), 0, 0, 4, idxen=True)
    assert all(ok)                         # structured: index 0 < 400 records


def _guide_offset(index, offset, stride, index_stride, element=4):
    """The MI300 ISA guide's swizzled buffer_offset (chapter 9, "Buffer addressing"), written
    out independently of isa/memory.buffer_offset."""
    return ((index // index_stride) * stride + (offset // element) * element) * index_stride \
        + (index % index_stride) * element + offset % element


@pytest.mark.parametrize("field,istride", [(0, 8), (1, 16), (2, 32), (3, 64)])
def test_swizzled_buffer_rows_follow_the_isa_guide(field, istride):
    """swizzle_enable (dword1 bit 31), index_stride (dword3 bits 22:21): every lane's address is
    base + soffset + the guide's buffer_offset with 4-byte elements (gfx9), the instruction
    offset inside the offset term; the range check is on the index."""
    stride = 48
    buf = vsharp([0x10000, (1 << 31) | (stride << 16), 40, field << 21])
    idx = np.arange(64, dtype=np.uint64)
    voff = (np.arange(64, dtype=np.uint64) * np.uint64(7)) % np.uint64(stride)
    addr, ok = buffer_addresses(buf, idx, voff, 0x100, 4, 4, idxen=True)
    for lane in range(64):
        want = 0x10000 + 0x100 + _guide_offset(lane, int(voff[lane]) + 4, stride, istride)
        assert int(addr[lane]) == want, lane
    assert ok.tolist() == [True] * 40 + [False] * 24


def test_add_tid_adds_the_lane_to_the_index_and_data_format_extends_the_stride():
    """add_tid_enable (dword3 bit 23): index = vgpr_index + thread_id[5:0]; a MUBUF access then
    takes stride bits 17:14 from DATA_FORMAT (dword3 bits 18:15: Mesa, gfx8-9)."""
    buf = vsharp([0x2000, 8 << 16, 1 << 20, (1 << 23) | (1 << 15)])      # stride 8 | 1 << 14
    idx = np.full(64, 2, dtype=np.uint64)
    addr, _ = buffer_addresses(buf, idx, np.zeros(64, dtype=np.uint64), 0, 0, 4)
    assert [int(a) for a in addr[:3]] == [0x2000 + (2 + k) * (8 + (1 << 14)) for k in range(3)]
    lin = vsharp([0x2000, 8 << 16, 1 << 20, 1 << 23])
    addr, _ = buffer_addresses(lin, idx, np.zeros(64, dtype=np.uint64), 0, 0, 4)
    assert int(addr[63]) == 0x2000 + 65 * 8


def test_unknown_instruction_and_wild_address_are_errors_not_guesses():
    w = Wave()
    (ins,) = list(parse_listing(_wrap("        v_mfma_f32_32x32x8bf16_1k a[0:15], v[0:1], v[2:3], 0 // 000000000000: 00000000\n")).values())[0]
    with pytest.raises(EmuError, match="v_mfma"):
        step(w, ins, Memory())
    m = Memory()
    m.alloc("a", np.zeros(16, dtype=np.uint8))
    assert not m.load(np.full(64, 5, dtype=np.uint64), 4, np.ones(64, dtype=bool)).any() and m.stray_loads == 64
    with pytest.raises(EmuError, match="outside every allocation"):
        m.store(np.full(64, 5, dtype=np.uint64), np.zeros((64, 4), dtype=np.uint8), np.ones(64, dtype=bool))


def _wrap(body: str) -> str:
    return "\nk.co:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n0000000000000000 <k>:\n" + body


# ----------------------------------------------------------------------------- addrsim run

def test_shape_argument_names_shape_variables():
    from addrsim.commands.run import shape_arg
    assert shape_arg("batch=2,nhead_q=3,seqlen_q=128") == {"batch": 2, "nhead_q": 3, "seqlen_q": 128}
    import argparse
    with pytest.raises(argparse.ArgumentTypeError):
        shape_arg("heads=2")


def test_run_refuses_a_kernel_no_family_models(tmp_path, capsys):
    """An example kernel under the built-in models: no family describes it (exit 2, one line,
    as verify refuses it); an unknown --trace buffer is bad input (exit 3)."""
    from addrsim.commands.cli import main
    co = build("lse_loop", tmp_path)
    assert main(["run", str(co), "--shape", "batch=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no kernel family in the models describes it" in err
    assert main(["run", str(co), "--shape", "batch=1", "--trace", "foo"]) == 3
    assert "unknown buffer 'foo'" in capsys.readouterr().err


SHAPE = {"batch": 2, "nhead_q": 2, "nhead_k": 2, "seqlen_q": 128, "seqlen_k": 128}


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_readme_kernel_is_right_in_bhsd_and_bshd(real_kernel, layout):
    """The wheel's gfx942 hd128 bf16 a16 kernel, every instruction emulated, batch 2, nhead 2,
    seqlen 128: dQ, dK, dV within the tolerance (measured: 0.3% to 0.45% of the largest value)."""
    from addrsim.api import run
    rep = run(real_kernel, layout, SHAPE)
    assert rep["ok"], rep["outputs"]
    assert rep["instructions"] == 96824
    for o in rep["outputs"].values():
        assert o["max_rel_err"] < 0.006


@pytest.mark.slow
def test_readme_kernel_in_sbhd_is_wrong_only_in_batch_1(real_kernel):
    """SBHD at batch 2: the LSE/D shortcut reads batch 0's rows for batch 1, so every output
    of batch 1's slices is wrong from row 0 and batch 0's are right; at batch 1 (the wheel's
    routing sends SBHD there only with batch 1) the kernel is right."""
    from addrsim.api import run
    rep = run(real_kernel, "sbhd", SHAPE)
    assert not rep["ok"]
    for o in rep["outputs"].values():
        assert o["wrong_slices"] == [[1, 0], [1, 1]] and o["max_rel_err"] > 0.3
        assert set(o["first_rows"].values()) == {0}
    one = run(real_kernel, "sbhd", dict(SHAPE, batch=1))
    assert one["ok"], one["outputs"]


@pytest.mark.slow
def test_trace_of_lse_reads_every_row_of_the_workgroups_own_slice(real_kernel):
    """--trace lse at BHSD batch 1, nhead 2, seqlen 128: LSE is fp32 [batch, nhead, seqlen]
    contiguous, so workgroup (kv_tile, head, batch) reads bytes [(b*2 + h)*512, + 512) and
    every row of them (the layout's formula, not the prover's)."""
    from addrsim.api import run
    rep = run(real_kernel, "bhsd", dict(SHAPE, batch=1), trace="lse")
    rows = {}
    for a in rep["trace"]:
        x, h, b = a["workgroup"]
        rows.setdefault((b, h), set()).add(a["offset"])
    assert rows == {(0, h): {(h * 128 + r) * 4 for r in range(128)} for h in range(2)}


@pytest.mark.slow
def test_the_mutation_the_prover_lets_survive_is_wrong_on_the_machine(real_kernel, tmp_path):
    """dQ's wave term dropped (0x2c70, benchmarks/mutations.py): every wave adds its dQ into
    wave 0's rows, inside the slice, atomics exempt from coverage, so the prover's checks all
    stay as they were.  Run on the virtual MI300 (BHSD, batch 1, nhead 2, seqlen 128), dQ is
    wrong in every slice from row 0 while dK and dV are right."""
    import subprocess
    import sys
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    from mutations import edit
    from addrsim.api import run
    text = subprocess.run(["llvm-objdump-22", "-d", str(real_kernel)], capture_output=True, text=True,
                          check=True).stdout
    lst = tmp_path / "dq_wave.lst"
    lst.write_text(edit(text, 0x2C70, "v_add_u32_e32 v6, s60, v6", "v_add_u32_e32 v6, 0, v6"))
    rep = run(lst, "bhsd", dict(SHAPE, batch=1), like=real_kernel)
    assert not rep["ok"]
    assert rep["outputs"]["dq"]["wrong_slices"] == [[0, 0], [0, 1]] and rep["outputs"]["dq"]["max_rel_err"] > 0.5
    assert rep["outputs"]["dk"]["ok"] and rep["outputs"]["dv"]["ok"]


@pytest.mark.slow
def test_causal_kernel_is_right_with_its_top_left_mask(real_kernel):
    """The wheel's causal a16 kernel (grid_masked: half the key tiles launched), BHSD, batch 1,
    nhead 2, seqlen 256: right against the top-left-masked reference; the unmasked reference
    differs from it by far more than the tolerance (the mask is what is tested)."""
    from addrsim.api import run
    from addrsim.emu.launch import TOLERANCE, reference
    causal = real_kernel.parent / real_kernel.name.replace("_a16_", "_causal_a16_")
    rep = run(causal, "bhsd", dict(SHAPE, batch=1, seqlen_q=256, seqlen_k=256))
    assert rep["ok"], rep["outputs"]
    q, k, v, do = (np.random.default_rng(1).standard_normal((1, 2, 64, 16)) for _ in range(4))
    masked, plain = reference(q, k, v, do, 0.25, "top_left"), reference(q, k, v, do, 0.25)
    assert np.abs(masked[2] - plain[2]).max() > 10 * TOLERANCE * np.abs(plain[2]).max()


def test_run_refuses_what_it_cannot_judge(tmp_path, capsys):
    """A kernel without dQ/dK/dV pointers (an example reading LSE only: a pipeline stage has
    the same shape) is not runnable yet (exit 2), never judged against gradients it does not
    compute; a shape naming a name twice is bad input."""
    from addrsim.commands.cli import main
    from test_examples import MODEL
    co = build("lse_loop", tmp_path)
    assert main(["run", str(co), "--model", MODEL, "--shape", "nhead_q=1,seqlen_q=64"]) == 2
    assert "not a dQ/dK/dV kernel" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:       # a usage error: argparse's one line, exit 3
        main(["run", str(co), "--shape", "batch=1,batch=2"])
    assert e.value.code == 3 and "batch given twice" in capsys.readouterr().err


@pytest.mark.slow
def test_run_names_shape_errors_and_reports_stray_stores(real_kernel, capsys):
    """The README kernel fixes hdim 128 (hdim_q=64 is bad input), needs nhead_q and seqlen_q;
    in the packed-QKV view (examples/layouts/views.yaml) dQ is written with Q's strides past
    the end of dQ's tensor: a wrong result (exit 1) naming the atomic that stores there."""
    from addrsim.commands.cli import main
    assert main(["run", str(real_kernel), "--shape", "nhead_q=1,seqlen_q=128,hdim_q=64"]) == 3
    assert "fixes hdim_q = 128" in capsys.readouterr().err
    assert main(["run", str(real_kernel), "--shape", "batch=1"]) == 3
    assert "give nhead_q, seqlen_q" in capsys.readouterr().err
    views = str(EX / "layouts" / "views.yaml")
    assert main(["run", str(real_kernel), "--shape", "nhead_q=2,seqlen_q=64", "--layouts", views,
                 "--layout", "bshd_qkv_packed"]) == 1
    out = capsys.readouterr().out
    assert "the kernel stopped: global_atomic_pk_add_bf16" in out and "past the end of dq" in out


def test_atomic_adds_on_shared_and_distinct_words():
    """global_atomic_add_f32 without return: lanes adding to one word add in lane order (every
    add lands), lanes on distinct words in one read-modify-write; EXEC-disabled lanes add
    nothing."""
    text = """
        global_atomic_add_f32 v1, v2, s[0:1]     // 000000000000: 00000000
    """
    m = Memory()
    base = m.alloc("acc", np.zeros(64, dtype=np.float32))
    w = Wave()
    w.s[0], w.s[1] = base & 0xFFFFFFFF, base >> 32
    w.v[1] = (np.arange(64, dtype=np.uint32) % 8) * 4          # 8 lanes per word, words 0..7
    w.v[2] = np.full(64, 1.5, dtype=np.float32).view(np.uint32)
    w.set_mask(EXEC_LO, to_mask(np.arange(64) < 60))
    (ins,) = list(parse_listing(_wrap(text)).values())[0]
    step(w, ins, m)
    acc = m.view("acc", np.float32)
    assert acc[:8].tolist() == [1.5 * n for n in (8, 8, 8, 8, 7, 7, 7, 7)] and not acc[8:].any()
    w.v[1] = np.arange(64, dtype=np.uint32) * 4                 # distinct words
    w.set_mask(EXEC_LO, (1 << 64) - 1)
    step(w, ins, m)
    assert acc[63] == 1.5 and acc[0] == 1.5 * 9


def test_a_load_straddling_an_allocation_end_reads_zero_past_it():
    m = Memory()
    base = m.alloc("t", np.arange(16, dtype=np.uint32))
    addr = np.uint64(base) + np.arange(64, dtype=np.uint64) * np.uint64(4)
    got = m.load(addr, 4, np.ones(64, dtype=bool)).view(np.uint32)[:, 0]
    assert got[:16].tolist() == list(range(16)) and not got[16:].any() and m.stray_loads == 48


def _wheel(corpus, arch, name):
    return corpus / arch / "fmha_v3_bwd" / f"{name}.co"


HDIMS = {"hdim_q": 128, "hdim_v": 128}


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["bhsd", "bshd", "sbhd"])
def test_gfx950_kernel_is_right_in_every_layout(corpus, layout):
    """The wheel's gfx950 hd128 bf16 a16 kernel (32x32x16 and 16x16x32 MFMAs, ds_read_b64_tr_b16,
    v_permlane16_swap, buffer loads to LDS past 64 KiB of gfx950's 160 KiB), batch 2, nhead 2,
    seqlen 128: dK and dV right (measured 0.42% and 0.35% of the largest value).  dQ is the
    16-bit accumulator the dq_shuffle post-kernel reorders: not compared here."""
    from addrsim.api import run
    rep = run(_wheel(corpus, "gfx950", "bwd_hd128_bf16_a16_psskddv"), layout, dict(SHAPE, **HDIMS))
    assert rep["ok"], rep["outputs"]
    assert set(rep["outputs"]) == {"dk", "dv"}
    assert all(o["max_rel_err"] < 0.006 for o in rep["outputs"].values())


@pytest.mark.slow
def test_the_gfx950_kernel_tells_a_wrong_lane_exchange(corpus, monkeypatch):
    """The real kernel is the test of the gfx950 lane rows: with ds_read_b64_tr_b16 read as a
    4x4 exchange within groups of 4 lanes, or v_permlane16_swap exchanging the even rows of
    vdst, dK and dV are wrong (measured: over 100% of the largest value)."""
    import addrsim.emu.step as S
    from addrsim.api import run
    k = _wheel(corpus, "gfx950", "bwd_hd128_bf16_a16_psskddv")
    one = dict(SHAPE, batch=1, nhead_q=1, nhead_k=1, **HDIMS)

    def quads(raw):
        lane = np.arange(64)
        return np.stack([raw[4 * (lane // 4) + e, lane % 4] for e in range(4)], axis=1)

    def even_rows(vdst, src):
        d, s = vdst.copy(), src.copy()
        for ev in (0, 32):
            d[ev:ev + 16], s[ev + 16:ev + 32] = src[ev + 16:ev + 32], vdst[ev:ev + 16]
        return d, s
    for name, wrong in (("read_tr_b16", quads), ("permlane16_swap", even_rows)):
        with monkeypatch.context() as m:
            m.setattr(S, name, wrong)
            rep = run(k, "bshd", one)
        assert not rep["outputs"]["dk"]["ok"] and not rep["outputs"]["dv"]["ok"]
        assert rep["outputs"]["dv"]["max_rel_err"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_fp16_kernels_are_right(corpus, arch):
    """fp16 inputs (the element type from the kernel's name): the wheel's hd128 fp16 a32
    kernels, BSHD, batch 2, nhead 2, seqlen 128; dQ from the fp32 accumulator."""
    from addrsim.api import run
    name = "bwd_hd128_fp16_a32" if arch == "gfx942" else "bwd_hd128_fp16_a32_psskddv"
    rep = run(_wheel(corpus, arch, name), "bshd", dict(SHAPE, **HDIMS) if arch == "gfx950" else SHAPE)
    assert rep["ok"], rep["outputs"]
    assert set(rep["outputs"]) == {"dq", "dk", "dv"}
    assert all(o["max_rel_err"] < 0.003 for o in rep["outputs"].values())


def test_every_instruction_of_both_corpora_has_semantics(corpus):
    """The static side of the dispatch (addrsim.emu.step.unsupported) over every fmha_v3_bwd
    code object of the wheel, both architectures: nothing left without semantics."""
    from addrsim.emu.step import unsupported
    from addrsim.loader.listing import load_source
    missing = {}
    for co in sorted(corpus.glob("*/fmha_v3_bwd/*.co")):
        src = load_source(co)
        for code in src.code.values():
            for ins in code:
                why = unsupported(ins)
                if why:
                    missing.setdefault(co.name, set()).add(f"{ins.mnemonic}: {why}")
    assert missing == {}


def test_group_sequences_differ_in_length_and_pack():
    """Group mode: sequence b is 24 rows shorter than b - 1 (at least 1); seqstart is the
    packed prefix sum, total_q its last entry; seqlen_q stays the longest (the host's max)."""
    from addrsim.emu.launch import group_starts
    (sq, sk), env = group_starts({"batch": 3, "seqlen_q": 64, "seqlen_k": 30})
    assert sq == [0, 64, 104, 120] and sk == [0, 30, 36, 37]
    assert (env["total_q"], env["total_k"], env["seqlen_q"]) == (120, 37, 64)


def test_a_pointer_wider_than_its_metadata_takes_the_padding_after_it():
    """aiter e4048607's metadata lists ptr_seqstart_q as 4 bytes followed by padding; the
    host's struct holds an 8-byte pointer there (mha_bwd.h): the value takes 8 bytes.  A value
    with no padding to grow into does not fit: an error, never a silent truncation."""
    from addrsim.loader.codeobj import KernelArg
    from types import SimpleNamespace
    args = [KernelArg("ptr_seqstart_q", 0, 4, "by_value"), KernelArg("pad", 4, 4, "by_value"),
            KernelArg("pad", 8, 8, "by_value"), KernelArg("nhead_q", 16, 4, "by_value")]
    k = SimpleNamespace(args=args, kernarg_segment_size=20, symbol="k")
    raw = pack_kernarg(k, {"ptr_seqstart_q": 0x123_4567_89AB, "nhead_q": 3})
    assert int.from_bytes(raw[0:8], "little") == 0x123_4567_89AB and raw[16] == 3
    with pytest.raises(EmuError, match="does not fit"):
        pack_kernarg(k, {"nhead_q": 1 << 40})


@pytest.mark.slow
def test_group_mode_kernel_is_right_with_sequences_of_different_lengths(corpus):
    """The wheel's gfx942 causal a32 group kernel (sequence starts read from memory, packed
    BHSD [nhead, total, hdim] strides, GQA 2:1), batch 3, seqlen_q 64: sequences of 64, 40
    and 16 rows, each with its own causal mask; dQ from the fp32 accumulator [nhead_q, total_q,
    hdim_q]; wrong slices name (batch, head) per sequence."""
    from addrsim.api import run
    k = _wheel(corpus, "gfx942", "bwd_hd128_bf16_causal_a32_rtne_pssk_group")
    rep = run(k, "bhsd", {"batch": 3, "nhead_q": 2, "nhead_k": 1, "seqlen_q": 64, "seqlen_k": 64})
    assert rep["ok"], rep["outputs"]
    assert set(rep["outputs"]) == {"dq", "dk", "dv"}


def test_window_coordinates_are_cks():
    """CK's make_generic_attention_mask_coordinates_from_lr_window: top-left (y, x) = (left + 1,
    right + 1), -1 is unlimited; bottom-right shifts both by seqlen_k - seqlen_q.  Key j is seen
    by query row i when i - y + 1 <= j < i + x."""
    from addrsim.emu.launch import _allowed, window_coordinates
    assert window_coordinates(32, 16, 192, 192) == (33, 17)
    assert window_coordinates(-1, 0, 100, 150) == (100, 1)                   # causal top-left
    assert window_coordinates(-1, 0, 100, 150, top_left=False) == (150 - 50, 51)
    a = _allowed(window_coordinates(2, 1, 6, 6), 6, 6)
    assert a[3].tolist() == [False, True, True, True, True, False]
    assert np.array_equal(_allowed(window_coordinates(-1, 0, 5, 5), 5, 5), _allowed("top_left", 5, 5))


@pytest.mark.slow
def test_sliding_window_kernel_is_right_with_its_window(corpus, capsys):
    """The wheel's gfx942 swa a32 kernel, BHSD, batch 1, nhead 2, seqlen 192, window (32, 16):
    mask_y/mask_x passed as the host computes them; right against the windowed reference,
    which differs from the causal one by far more than the tolerance.  Without --window the
    run is bad input (exit 3)."""
    from addrsim.api import run
    from addrsim.commands.cli import main
    from addrsim.emu.launch import TOLERANCE, reference, window_coordinates
    k = _wheel(corpus, "gfx942", "bwd_hd128_bf16_swa_a32_rtne_psskddv")
    shape = dict(SHAPE, batch=1, seqlen_q=192, seqlen_k=192, **HDIMS)
    rep = run(k, "bhsd", shape, window=(32, 16))
    assert rep["ok"], rep["outputs"]
    q, kk, v, do = (np.random.default_rng(2).standard_normal((1, 1, 192, 16)) for _ in range(4))
    win, causal = reference(q, kk, v, do, 0.25, window_coordinates(32, 16, 192, 192)), reference(q, kk, v, do, 0.25,
                                                                                               "top_left")
    assert np.abs(win[2] - causal[2]).max() > 10 * TOLERANCE * np.abs(causal[2]).max()
    assert main(["run", str(k), "--shape", "nhead_q=1,seqlen_q=192,hdim_q=128,hdim_v=128"]) == 3
    assert "give --window LEFT,RIGHT" in capsys.readouterr().err


@pytest.mark.slow
def test_trace_agrees_with_the_provers_extracted_address_function(real_kernel):
    """--trace lse at SBHD, batch 2, nhead 2, seqlen 128 (the README kernel): each workgroup's
    lowest LSE offset, less workgroup (0, 0)'s, is what the prover's extracted address function
    gives for that (batch_id, head_id) (AddressFunction.slice_offset: the shortcut's offsets,
    not the layout's), and every access passes the V# range check the prover predicts."""
    from addrsim.api import run
    from addrsim.commands.crosscheck import AddressFunction
    shape = dict(SHAPE, hdim_q=128, hdim_v=128)
    rep = run(real_kernel, "sbhd", shape, trace="lse")
    low = {}
    for a in rep["trace"]:
        x, h, b = a["workgroup"]
        low[(b, h)] = min(low.get((b, h), 1 << 62), a["offset"])
    af = AddressFunction(real_kernel, ["lse"])
    for (b, h), off in low.items():
        predicted, in_range = af.slice_offset("sbhd", "lse", shape, b, h)
        assert in_range and off - low[(0, 0)] == predicted, (b, h, off, predicted)
    assert low[(1, 0)] - low[(0, 0)] != 2 * 128 * 4       # the shortcut, not the layout's batch stride


def test_memory_places_a_tensor_at_a_given_address_and_refuses_overlaps():
    mem = Memory()
    a = mem.alloc("q", np.zeros(16, np.uint8), at=0x1000_FFFF_FFF0)
    assert a == 0x1000_FFFF_FFF0 and mem.alloc("k", np.zeros(4, np.uint8)) < a
    with pytest.raises(EmuError, match="overlaps"):
        mem.alloc("v", np.zeros(32, np.uint8), at=0x1000_FFFF_FFE0)


@pytest.mark.slow
def test_a_dropped_carry_shows_at_the_counterexamples_own_pointer(real_kernel, tmp_path):
    """benchmarks/mutations.py's "q: carry dropped" (0x2be8 s_addc_u32 -> s_add_u32): the
    prover's counterexample is small (batch 1, nhead_q 2, nhead_k 1, seqlen 64) with Q placed at
    0x1000fffff000; any base less than 16 KiB (head 1's offset) below a 4 GiB boundary makes head
    1's Q cross it.  Placed at 0x1000ffffc000, the edited kernel is wrong exactly in slice (0, 1);
    the unedited kernel is right there, and the edited one right at a 2 MiB-aligned base."""
    import subprocess
    import sys
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    from mutations import edit
    from addrsim.api import run
    text = subprocess.run(["llvm-objdump-22", "-d", str(real_kernel)], capture_output=True, text=True,
                          check=True).stdout
    lst = tmp_path / "carry.s"
    lst.write_text(edit(text, 0x2BE8, "s_addc_u32 s9, 0, s79", "s_add_u32 s9, 0, s79"))
    shape = {"batch": 1, "nhead_q": 2, "nhead_k": 1, "seqlen_q": 64, "seqlen_k": 64}
    rep = run(lst, "bhsd", shape, like=real_kernel, pointers={"Q": 0x1000FFFFC000})
    assert not rep["ok"] and all(o["wrong_slices"] == [[0, 1]] for o in rep["outputs"].values())
    assert run(real_kernel, "bhsd", shape, pointers={"Q": 0x1000FFFFC000})["ok"]
    assert run(lst, "bhsd", shape, like=real_kernel)["ok"]       # 2 MiB-aligned placement: no carry to drop
