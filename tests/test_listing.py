"""Assembly listings as input (addrsim.loader.listing) and `addrsim diff` (addrsim.commands.diff).

The engineers' loop: disassemble a kernel, patch a few scalar instructions, prove the patch
before the slow rebuild, and see what it changed."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from addrsim.api import verify
from addrsim.commands.diff import format_diff, classify, diff, diff_status
from addrsim.loader.disasm import disassemble
from addrsim.errors import InputError
from addrsim.report.explain import explain
from addrsim.loader.listing import load_source

from test_examples import EX, MODEL, build

GFX950_PORT = "aiter_meta/hsa/gfx950/fmha_v3_bwd/bwd_hd64_bf16_a16_rtne.co"
GFX942_PORT = "aiter_meta/hsa/gfx942/fmha_v3_bwd/bwd_hd64_bf16_a16_rtne.co"


def objdump(co: Path) -> str:
    exe = shutil.which("llvm-objdump-22")
    assert exe, "llvm-objdump-22 is needed (apt-get install llvm-22)"
    return subprocess.run([exe, "-d", str(co)], capture_output=True, text=True, check=True).stdout


def cli(*args):
    return subprocess.run([sys.executable, "-m", "addrsim", *map(str, args)], capture_output=True, text=True)


def patch(text: str, old: str, new: str) -> str:
    """Replace the instruction line whose text (before the // comment) is ``old`` by the lines
    ``new``; the test fails when the line is not there (a patch that silently does nothing)."""
    lines = text.splitlines()
    hits = [i for i, l in enumerate(lines) if l.split("//")[0].strip() == old]
    assert len(hits) == 1, f"{old!r} occurs {len(hits)} times"
    i = hits[0]
    return "\n".join(lines[:i] + ["\t" + n for n in new.strip().splitlines()] + lines[i + 1:]) + "\n"


def fix_pattern_a(buggy_listing: str) -> str:
    """The BAs shortcut `(batch_id*BAs_q) >> 6` patched into pattern A, batch_id*nhead_q*Hs_lsed
    in 64 bits: four lines of the llvm-objdump listing change."""
    t = patch(buggy_listing, "s_load_dword s16, s[0:1], 0x10", "s_load_dword s16, s[0:1], 0x14   // nhead_q")
    t = patch(t, "s_mul_i32 s18, s4, s16", "s_mul_i32 s20, s4, s16     // batch_id * nhead_q")
    t = patch(t, "s_mul_hi_u32 s19, s4, s16", "s_mul_i32 s18, s20, s17    // * Hs_lsed, low dword")
    return patch(t, "s_lshr_b64 s[18:19], s[18:19], 6", "s_mul_hi_u32 s19, s20, s17 // high dword")


@pytest.fixture(scope="module")
def shortcut(tmp_path_factory):
    """The synthetic buggy kernel (examples/lsed_bas_shortcut.s) as a code object and as its
    llvm-objdump listing, and the listing patched into pattern A."""
    d = tmp_path_factory.mktemp("listing")
    co = build("lsed_bas_shortcut", d)
    buggy = d / "buggy.txt"
    buggy.write_text(objdump(co))
    fixed = d / "fixed.txt"
    fixed.write_text(fix_pattern_a(buggy.read_text()))
    return co, buggy, fixed


def test_unedited_listing_is_the_code_object(real_kernel, tmp_path):
    """llvm-objdump text of the real kernel, reassembled: every instruction (address, text,
    size, branch target) is the code object's."""
    listing = tmp_path / "real.txt"
    listing.write_text(objdump(real_kernel))
    src = load_source(listing, like=real_kernel)
    ref = disassemble(real_kernel)
    assert src.kind == "objdump listing" and list(src.code) == list(ref)
    for name, code in ref.items():
        got = src.code[name]
        assert len(got) == len(code) > 4000
        assert [(i.addr, i.text, i.size, i.target) for i in got] == [(i.addr, i.text, i.size, i.target) for i in code]
    assert len(src.lines) == len(ref[next(iter(ref))])   # every instruction knows its listing line


def test_unedited_gfx950_listing_is_the_code_object(corpus, tmp_path):
    co = corpus.parent.parent / GFX950_PORT
    listing = tmp_path / "k.txt"
    listing.write_text(objdump(co))
    src, ref = load_source(listing, like=co), disassemble(co)
    for name, code in ref.items():
        assert [(i.addr, i.text, i.target) for i in src.code[name]] == [(i.addr, i.text, i.target) for i in code]


@pytest.mark.slow
def test_patched_listing_is_proved(shortcut):
    """The issue's test: the buggy kernel's disassembly, four lines edited into pattern A,
    verified as a listing with --like: proved for LSE and D in every layout."""
    co, buggy, fixed = shortcut
    rep = verify(fixed, ["lse", "d"], like=co, model_files=[MODEL], properties=["address"])
    k = rep["kernels"][0]
    assert k["source"] == "objdump listing" and k["like"] == str(co)
    got = {(c["buffer"], c["layout"]): c["verdict"] for c in k["checks"]}
    assert got == {(b, l): "proved" for b in ("lse", "d") for l in ("bhsd", "bshd", "sbhd")}, got
    # and the unpatched listing is still refuted for SBHD (the edit, not the listing path, fixes it)
    rep = verify(buggy, ["lse"], ["sbhd"], like=co, model_files=[MODEL], properties=["address"])
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "counterexample" and c["cause"] == "formula"
    assert c["counterexample"]["access_line"] > 0      # the listing line of the access


def test_a_wrong_patchs_formula_root_cause_points_at_the_edited_lines_in_its_slice(shortcut, tmp_path):
    """Pattern A with one operand wrong (batch_id * Hs_lsed where batch_id * nhead_q belongs): a
    formula bug in every layout, whose root cause names the edited lines that feed the LSE
    address (those of the patch), not the access's line; an unedited line is never named."""
    import io
    from addrsim.report.text import print_table
    co, _, fixed = shortcut
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(patch(fixed.read_text(), "s_mul_i32 s20, s4, s16", "s_mul_i32 s20, s4, s17  // wrong operand"))
    rep = verify(wrong, ["lse"], ["bhsd"], like=co, model_files=[MODEL], properties=["address"])
    k = rep["kernels"][0]
    (c,) = k["checks"]
    assert c["verdict"] == "counterexample" and c["cause"] == "formula"
    lines = wrong.read_text().splitlines()
    edited = [n for n, l in enumerate(lines, 1) if l.startswith("\t") and "//" in l and ":" not in l.split("//")[1]]
    assert c["edited_lines"] and set(c["edited_lines"]) <= set(edited)
    assert any("wrong operand" in lines[n - 1] for n in c["edited_lines"])
    (rc,) = [r for r in k["root_causes"] if r["kind"] == "formula"]
    assert rc["where"]["edited_lines"] == c["edited_lines"]
    out = io.StringIO()
    print_table(rep, out)
    want = f"{', '.join(map(str, c['edited_lines']))} in its address slice"
    assert "(edited listing line" in out.getvalue() and want in out.getvalue()


@pytest.mark.slow
def test_diff_buggy_to_fixed(shortcut):
    """`addrsim diff OLD.co NEW.listing`: SBHD fixed, its offsets differing by the batch term
    the shortcut got wrong.  BHSD was already right with exact kernel arguments (the
    shortcut's 64-bit batch term only breaks when the host's u32 cast truncates BAs_q, a host
    limit, not a kernel counterexample): the same verdict and offset on both sides."""
    co, _, fixed = shortcut
    rep = diff(co, fixed, ["lse"], ["bhsd", "sbhd"], like=co, model_files=[MODEL], properties=["address"])
    checks = {c["layout"]: c for c in rep["kernels"][0]["checks"]}
    assert {l: c["change"] for l, c in checks.items()} == {"bhsd": "same", "sbhd": "fixed"}
    assert checks["bhsd"]["old"]["verdict"] == "proved" and checks["sbhd"]["old"]["cause"] == "formula"
    assert checks["sbhd"]["difference_shape"] == "4*batch_id*nhead_q*(seqlen_q - 1)"
    assert checks["sbhd"]["same_offset"] is False
    assert checks["bhsd"]["difference_shape"] == "0" and checks["bhsd"]["same_offset"] is True
    assert rep["summary"].startswith("fixed lse/sbhd;")
    assert diff_status(rep) == 0
    text = format_diff(rep)
    assert "SBHD: new - old = 4*batch_id*nhead_q*(seqlen_q - 1)" in text
    assert not any(w in text for w in ("Piecewise", "Eq(", "xor(", "ult("))


@pytest.mark.slow
def test_diff_cli_exit_status_when_new_breaks(shortcut):
    """The reverse patch (pattern A back to the shortcut) breaks what OLD proved: exit 1."""
    co, buggy, fixed = shortcut
    p = cli("diff", fixed, buggy, "--like", co, "--model", MODEL, "--buffer", "lse", "--layout", "sbhd",
            "--json", "-")
    assert p.returncode == 1, p.stderr
    rep = json.loads(p.stdout)
    c = rep["kernels"][0]["checks"][0]
    assert (c["old"]["verdict"], c["new"]["verdict"], c["change"]) == ("proved", "counterexample", "broke")
    assert "BROKE lse/sbhd" in rep["summary"]
    p = cli("diff", co, fixed, "--like", co, "--model", MODEL, "--buffer", "lse", "--layout", "sbhd")
    assert p.returncode == 0, p.stderr
    assert "fixed" in p.stdout and "summary: fixed lse/sbhd" in p.stdout


@pytest.mark.parametrize("old,new,change", [
    ("counterexample", "proved", "fixed"), ("proved", "counterexample", "broke"), ("proved", "unknown", "lost"),
    ("proved", "unsupported", "lost"), ("unknown", "proved", "proved"), ("counterexample", "unknown", "changed"),
    ("proved", "proved", "same"), ("counterexample", "counterexample", "same")])
def test_change_classes(old, new, change):
    assert classify(old, new) == change


def test_inserted_instruction_keeps_branch_targets(tmp_path):
    """A listing edit that inserts an instruction inside a loop: the numeric branch offset of
    the objdump text becomes a label at its target, so the loop still branches to the
    buffer load, and every iteration is still proved."""
    co = build("lse_loop", tmp_path)
    text = objdump(co)
    lst = tmp_path / "loop.txt"
    lst.write_text(patch(text, "s_add_u32 s24, s24, 64", "s_nop 0\ns_add_u32 s24, s24, 64"))
    src = load_source(lst, like=co)
    code = next(iter(src.code.values()))
    load = next(i for i in code if i.mnemonic == "buffer_load_dword")
    br = next(i for i in code if i.mnemonic == "s_cbranch_scc1")
    assert br.target == load.addr
    assert len(code) == len(disassemble(co)[next(iter(src.code))]) + 1
    rep = verify(lst, ["lse"], ["bhsd"], like=co, model_files=[MODEL], properties=["address"])
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "proved" and c["all_iterations"] is True


def test_assembly_with_its_own_directives():
    """llvm-mc syntax with .amdgcn_target, .amdhsa_kernel and .amdgpu_metadata: no --like."""
    rep = verify(EX / "lsed_abi_fix.s", ["lse"], ["sbhd"], model_files=[MODEL], properties=["address"])
    k = rep["kernels"][0]
    assert k["source"] == "assembly" and k["arch"] == "gfx942"
    assert k["checks"][0]["verdict"] == "proved"


def test_explain_listing_has_line_numbers(shortcut):
    co, _, fixed = shortcut
    e = explain(fixed, "lse", model_files=[MODEL], like=co)[0]
    edited = [l for l in e.lines if l.text.startswith("s_mul")]
    assert [l.text for l in edited] == ["s_mul_i32 s20, s4, s16", "s_mul_i32 s18, s20, s17",
                                        "s_mul_hi_u32 s19, s20, s17", "s_mul_i32 s21, s3, s17"]
    lines = fixed.read_text().splitlines()
    for l in edited:
        assert lines[l.line - 1].split("//")[0].strip() == l.text


@pytest.mark.parametrize("edit,message", [
    (("s_mul_i32 s18, s4, s16", "s_frobnicate s18, s4"), "invalid instruction: s_frobnicate s18, s4"),
    (("s_mul_i32 s18, s4, s16", "s_mul_i32 s18, s4"), "too few operands"),
    (("s_endpgm", "s_cbranch_scc1 3"), "a branch on an edited line must name a label, not '3'"),
    (("s_endpgm", "s_cbranch_scc1 0xfff9"), "a branch on an edited line must name a label, not '0xfff9'"),
])
def test_bad_listing_lines(shortcut, tmp_path, edit, message):
    """Unknown syntax: exit 3, one line naming the file and the listing's line number."""
    co, buggy, _ = shortcut
    bad = tmp_path / "bad.txt"
    bad.write_text(patch(buggy.read_text(), *edit))
    lineno = 1 + [l.strip() for l in bad.read_text().splitlines()].index(edit[1])
    message = f"line {lineno}: {message}"
    p = cli("verify", bad, "--like", co, "--model", MODEL, "--buffer", "lse")
    assert p.returncode == 3
    assert p.stderr.count("\n") == 1 and str(bad) in p.stderr and message in p.stderr, p.stderr


def test_listing_usage_errors(shortcut, tmp_path):
    co, buggy, _ = shortcut
    p = cli("verify", buggy, "--model", MODEL)               # objdump text carries no metadata
    assert p.returncode == 3 and "--like KERNEL.co" in p.stderr and p.stderr.count("\n") == 1
    p = cli("verify", co, "--like", co, "--model", MODEL)    # --like is for listings
    assert p.returncode == 3 and "applies to assembly listings" in p.stderr
    plain = tmp_path / "plain.s"
    plain.write_text("s_endpgm\n")
    p = cli("verify", plain, "--model", MODEL)               # llvm-mc text without directives or --like
    assert p.returncode == 3 and ".amdhsa_kernel" in p.stderr
    far = tmp_path / "far.txt"                                # a branch whose target is not in the listing
    far.write_text(buggy.read_text().replace("s_endpgm                                                   // 00000000169C: BF810000",
                                             "s_branch 100                                               // 00000000169C: BF820064"))
    assert far.read_text() != buggy.read_text()
    p = cli("verify", far, "--like", co, "--model", MODEL)
    assert p.returncode == 3 and "is not the address of an instruction" in p.stderr, p.stderr
    binary = tmp_path / "junk.bin"
    binary.write_bytes(b"\x00\xff\xfe garbage")
    with pytest.raises(InputError):
        load_source(binary)


@pytest.mark.slow
def test_port_gfx942_to_gfx950(corpus):
    """Porting check: the same-name kernel of both architectures addresses LSE and D alike
    (the same verdict, and the same offset in every layout where nothing wraps)."""
    root = corpus.parent.parent
    rep = diff(root / GFX942_PORT, root / GFX950_PORT, ["lse", "d"], properties=["address"])
    k = rep["kernels"][0]
    assert (k["old_arch"], k["new_arch"]) == ("gfx942", "gfx950")
    assert len(k["checks"]) == 6
    assert all(c["change"] == "same" and c["same_offset"] for c in k["checks"]), k["checks"]
    assert "port gfx942 -> gfx950: the address logic carries over" in rep["summary"]
    cex = [c for c in k["checks"] if c["old"]["verdict"] == "counterexample"]
    if cex:        # the bugs carry over too, and the summary says so
        assert f"bugs included ({len(cex)} of 6 checks are counterexamples on both sides)" in rep["summary"]
        assert "bugs that carry over " in rep["summary"]
    assert diff_status(rep) == 0


def test_plain_labels_stay_inside_the_kernel(shortcut, tmp_path):
    """A label the user adds (`skip:`), and a forward branch to it, do not split the kernel."""
    co, _, fixed = shortcut
    lst = tmp_path / "labels.txt"
    lst.write_text(patch(fixed.read_text(), "s_mul_i32 s21, s3, s17",
                         "s_mul_i32 s21, s3, s17\ns_cmp_eq_u32 s4, 0\ns_cbranch_scc1 skip\ns_nop 0\nskip:"))
    rep = verify(lst, ["lse"], ["sbhd"], like=co, model_files=[MODEL], properties=["address"])
    assert rep["kernels"][0]["checks"][0]["verdict"] == "proved", rep["kernels"][0]["checks"][0]


def test_two_listings_in_one_file_are_refused(shortcut, tmp_path):
    co, buggy, _ = shortcut
    two = tmp_path / "two.txt"
    two.write_text(buggy.read_text() + buggy.read_text())
    p = cli("verify", two, "--like", co, "--model", MODEL, "--buffer", "lse")
    assert p.returncode == 3 and "already appears on line" in p.stderr, p.stderr


def test_branch_into_an_instruction_is_unsupported(tmp_path):
    """A direct branch whose target is not the start of an instruction of the kernel: the
    paths addrsim would follow are not the hardware's, so no verdict but unsupported."""
    co = build("lse_loop", tmp_path)
    text = objdump(co)
    # the loop's back branch (simm16 65529 = -7 dwords) moved by one dword into the middle of
    # the 8-byte buffer_load_dword
    bad = text.replace("s_cbranch_scc1 65529", "s_cbranch_scc1 65530").replace("BF85FFF9", "BF85FFFA")
    assert bad != text
    lst = tmp_path / "mid.txt"
    lst.write_text(bad)
    with pytest.raises(InputError, match="is not the address of an instruction"):
        load_source(lst, like=co)


def test_code_object_branch_into_an_instruction_is_unsupported(tmp_path):
    """The same in a code object (the assembler was told `.Lloop+4`): the loop the explorer
    would see is not the hardware's, so the check is unsupported, never proved."""
    src = (EX / "lse_loop_head_step.s").read_text()
    assert "s_cbranch_scc1 .Lloop\n" in src
    simm = int(next(l for l in objdump(build("lse_loop_head_step", tmp_path)).splitlines()
                    if "s_cbranch_scc1" in l).split()[1])          # the back branch, in dwords
    (tmp_path / "mid.s").write_text(src.replace("s_cbranch_scc1 .Lloop\n", f"s_cbranch_scc1 {simm + 1}\n"))
    mc, ld = shutil.which("llvm-mc-22"), shutil.which("ld.lld-22")
    subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj", str(tmp_path / "mid.s"),
                    "-o", str(tmp_path / "mid.o")], check=True)
    subprocess.run([ld, "-shared", str(tmp_path / "mid.o"), "-o", str(tmp_path / "mid.co")], check=True)
    rep = verify(tmp_path / "mid.co", ["lse"], ["bhsd"], model_files=[MODEL], properties=["address"])
    c = rep["kernels"][0]["checks"][0]
    assert c["verdict"] == "unsupported" and "not the start of an instruction" in c["reason"], c


@pytest.mark.slow
def test_scan_takes_a_listing(shortcut):
    co, buggy, fixed = shortcut
    p = cli("scan", fixed, buggy, "--like", co, "--model", MODEL, "--buffer", "lse", "--layout", "sbhd",
            "--no-progress", "--json", "-")
    assert p.returncode == 1, p.stderr        # the buggy listing has a counterexample
    rep = json.loads(p.stdout)
    got = {k["file"]: k["checks"][0]["verdict"] for k in rep["kernels"]}
    assert got == {str(fixed): "proved", str(buggy): "counterexample"}
    assert all(k["source"] == "objdump listing" for k in rep["kernels"])


def test_an_edited_line_mentioning_file_format_is_not_dropped(tmp_path):
    """Only llvm-objdump's own header lines are skipped: an inserted instruction whose comment
    happens to say "file format" is an instruction (here it zeroes the head term of pattern A,
    which must then be refuted, not proved)."""
    co = build("lsed_abi_fix", tmp_path)
    lst = tmp_path / "edited.txt"
    text = objdump(co)
    lines = text.splitlines()
    i = next(k for k, l in enumerate(lines) if l.split("//")[0].strip() == "s_mul_i32 s21, s3, s17")
    lines.insert(i + 1, "s_mov_b32 s21, 0   ; drop the head term (file format v2)")
    lst.write_text("\n".join(lines) + "\n")
    rep = verify(lst, ["lse"], ["sbhd"], model_files=[MODEL], like=co, properties=["address"],
                 bounds={"nhead_q": (1, 8), "seqlen_q": (1, 4096), "batch": (1, 16)})
    assert rep["kernels"][0]["checks"][0]["verdict"] == "counterexample"


def _pair(buffer, layout, old, new, same_offset=True):
    change = classify(old, new)
    return {"buffer": buffer, "layout": layout, "property": "address", "change": change, "same_offset": same_offset,
            "old": {"verdict": old}, "new": {"verdict": new}}


def test_diff_summary_names_bugs_fixed_new_and_carried_over():
    """A port whose verdicts and offsets all match still carries its bugs: the summary says
    which, and a counterexample NEW has where OLD was undecided is a new bug (exit 1)."""
    from addrsim.commands.diff import summary_line
    checks = [_pair("lse", "bhsd", "counterexample", "counterexample"), _pair("lse", "sbhd", "proved", "proved")]
    out = {"kernels": [{"old_arch": "gfx942", "new_arch": "gfx950", "checks": checks}]}
    text = summary_line({}, out)
    assert "bugs that carry over lse/bhsd" in text
    assert ("port gfx942 -> gfx950: the address logic carries over, bugs included (1 of 2 checks are "
            "counterexamples on both sides)") in text
    assert diff_status(out) == 0
    checks += [_pair("d", "bhsd", "counterexample", "proved", False), _pair("d", "sbhd", "unknown", "counterexample")]
    text = summary_line({"fixed": ["d/bhsd"]}, out)
    assert text.startswith("fixed d/bhsd; NEW bugs (undecided before) d/sbhd; bugs that carry over lse/bhsd;")
    assert "does not fully carry over" in text and "bugs included" not in text
    assert diff_status(out) == 1


def test_a_listings_root_causes_name_their_findings_as_the_kernel_they_are_like(shortcut):
    """SARIF's baselineState reads the root causes' findings: a listing checked with --like
    K.co names them as K's (as the gate does), so a new finding of a patch is "new" there too."""
    co, buggy, _ = shortcut
    rep = verify(buggy, ["lse"], ["sbhd"], like=co, model_files=[MODEL], properties=["address"])
    k = rep["kernels"][0]
    fps = [fp for r in k["root_causes"] for fp in r.get("findings") or []]
    assert fps and all(fp.startswith(f"{k['arch']}/{co.name}:") for fp in fps), fps


def test_a_misspelt_register_in_an_edited_line_is_refused_with_its_line(shortcut, tmp_path):
    """llvm-mc takes `s17x` for an undefined symbol (a relocation whose value would read as 0):
    bad input naming the line, never a verdict."""
    co, _, fixed = shortcut
    typo = tmp_path / "typo.txt"
    typo.write_text(patch(fixed.read_text(), "s_mul_i32 s20, s4, s16", "s_mul_i32 s20, s4, s16x"))
    lines = typo.read_text().splitlines()
    no = next(n for n, l in enumerate(lines, 1) if "s16x" in l)
    p = cli("verify", typo, "--like", co, "--model", MODEL, "--buffer", "lse", "--check", "address")
    assert p.returncode == 3 and p.stderr.count("\n") == 1, p.stderr
    assert f"line {no}: 's16x' is not a register or a label of the listing" in p.stderr


def test_an_objdump_listing_with_another_kernels_like_is_refused(shortcut, tmp_path):
    """--like names a code object whose kernel is not the one the listing was disassembled
    from: its metadata (kernel arguments, descriptor) would be applied to foreign code."""
    co, buggy, _ = shortcut
    other = build("lsed_three_paths", tmp_path)
    p = cli("verify", buggy, "--like", other, "--model", MODEL, "--buffer", "lse", "--check", "address")
    assert p.returncode == 3 and p.stderr.count("\n") == 1, p.stderr
    assert "give --like the code object it was disassembled from" in p.stderr
