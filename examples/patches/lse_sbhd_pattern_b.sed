# Pattern B for the README kernel (wheel gfx942 bwd_hd128_bf16_a16_rtne.co): its LSE/D batch
# term is (batch_id * BAs) >> 6, i.e. batch_id * nhead_q * seqlen_q * 4 bytes when BAs (Q's
# batch stride, bytes) is nhead_q * seqlen_q * 256 (BHSD, BSHD), but batch_id * nhead_q * 4 in
# SBHD, where BAs is nhead_q * 256.  SBHD is the layout whose batch stride is below its
# sequence stride (Seqs, kernarg 0xf0, in s70): there the term is multiplied by seq_len (s50).
# SCC is dead here (s_add_u32 at 0x2b64 writes it before anything reads it).
# Usage: llvm-objdump-22 -d bwd_hd128_bf16_a16_rtne.co | sed -f lse_sbhd_pattern_b.sed > bwd_fix.txt
/\/\/ 000000002B58: /a\
	s_cmp_lt_u32 s53, s70\
	s_cbranch_scc0 lse_batch_done\
	s_mul_i32 s62, s62, s50\
lse_batch_done:
