// Group (variable-length) mode, causal bottom-right: workgroup (kv_tile, head_id, batch_id) reads
// the LSE rows of its sequence from the first q row its key tile sees, max(0, kv_tile*64 -
// (len_k - len_q)), as the causal_br kernels place their rows (len_k - len_q is negative when
// the q sequence is the longer: the kernel reads it only through a signed max, so the integer
// encoding gives it its exact value, addrsim.backends.z3_int.signed_reads).  A tile past its
// sequence's keys exits, as the real kernels do.  Expected: proved (tests/test_examples.py;
// the same kernel without its clamp, group_lse_br_noclamp.s, is refuted).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_group_lse_br_clamp
        .p2align 8
        .type addrsim_example_group_lse_br_clamp,@function
addrsim_example_group_lse_br_clamp:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dwordx2 s[10:11], s[0:1], 0x8     // ptr_seqstart_q (int32 [batch + 1])
        s_load_dword s12, s[0:1], 0x10           // Hs_lsed (bytes) = total_q * 4
        s_load_dword s25, s[0:1], 0x14           // nhead_q
        s_load_dwordx2 s[26:27], s[0:1], 0x18    // ptr_seqstart_k (int32 [batch + 1])
        s_waitcnt lgkmcnt(0)
        s_lshl_b32 s13, s4, 2                    // batch_id * 4: byte offset into the starts
        s_add_u32 s24, s13, 4
        s_load_dword s14, s[10:11], s13          // seqstart_q[batch_id]
        s_load_dword s18, s[10:11], s24          // seqstart_q[batch_id + 1]
        s_load_dword s28, s[26:27], s13          // seqstart_k[batch_id]
        s_load_dword s29, s[26:27], s24          // seqstart_k[batch_id + 1]
        s_waitcnt lgkmcnt(0)
        s_sub_u32 s19, s18, s14                  // len_q
        s_sub_u32 s30, s29, s28                  // len_k
        s_lshl_b32 s32, s2, 6                    // kv_start = kv_tile * 64
        s_cmp_ge_u32 s32, s30                    // a tile past this sequence's keys: nothing to do
        s_cbranch_scc1 .Lend
        s_sub_u32 s31, s30, s19                  // len_k - len_q (negative when q is the longer)
        s_sub_u32 s33, s32, s31                  // kv_start - (len_k - len_q): the bottom-right row
        s_max_i32 s33, s33, 0                    // clamped at row 0 (signed)
        s_add_u32 s14, s14, s33                  // that row in the packed rows
        s_lshl_b32 s15, s14, 2                   // in bytes
        s_mul_i32 s16, s3, s12                   // head_id * Hs_lsed, 64-bit
        s_mul_hi_u32 s17, s3, s12
        s_add_u32 s16, s16, s15
        s_addc_u32 s17, s17, 0
        s_add_u32 s20, s8, s16                   // LSE V#
        s_addc_u32 s21, s9, s17
        s_and_b32 s21, s21, 0xffff
        s_or_b32 s21, s21, 0x40000               // stride 4 bytes
        s_mov_b32 s22, -1
        s_mov_b32 s23, 0x20000
        v_and_b32_e32 v1, 63, v0
        buffer_load_dword v2, v1, s[20:23], 0 idxen
        s_waitcnt vmcnt(0)
.Lend:
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_group_lse_br_clamp, .Lfunc_end0-addrsim_example_group_lse_br_clamp

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_group_lse_br_clamp
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_system_sgpr_workgroup_id_y 1
          .amdhsa_system_sgpr_workgroup_id_z 1
          .amdhsa_next_free_vgpr 16
          .amdhsa_next_free_sgpr 40
          .amdhsa_accum_offset 16
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: addrsim_example_group_lse_br_clamp
    .symbol: addrsim_example_group_lse_br_clamp.kd
    .kernarg_segment_size: 32
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 40
    .vgpr_count: 16
    .max_flat_workgroup_size: 256
    .reqd_workgroup_size: [ 256, 1, 1 ]
    .args:
      - { .name: Lse, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: ptr_seqstart_q, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: Hs_lsed, .offset: 16, .size: 4, .value_kind: by_value }
      - { .name: nhead_q, .offset: 20, .size: 4, .value_kind: by_value }
      - { .name: ptr_seqstart_k, .offset: 24, .size: 8, .value_kind: global_buffer, .address_space: global }
...
        .end_amdgpu_metadata
