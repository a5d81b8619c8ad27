// A wrong edit of group_lse_last_tile.s: the last tile's row is computed from sequence 0's
// length (seqstart_q[1] - seqstart_q[0]) instead of the workgroup's own, as a kernel that
// placed bottom-right rows by the wrong sequence's lengths would.  Expected: counterexample
// (the relative claim's reference has the workgroup's own lengths, so the rule can fail).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_group_lse_other_len
        .p2align 8
        .type addrsim_example_group_lse_other_len,@function
addrsim_example_group_lse_other_len:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dwordx2 s[10:11], s[0:1], 0x8     // ptr_seqstart_q (int32 [batch + 1])
        s_load_dword s12, s[0:1], 0x10           // Hs_lsed (bytes) = total_q * 4
        s_load_dword s25, s[0:1], 0x14           // nhead_q
        s_waitcnt lgkmcnt(0)
        s_lshl_b32 s13, s4, 2                    // batch_id * 4: byte offset into seqstart_q
        s_load_dword s14, s[10:11], s13          // seqstart_q[batch_id]
        s_load_dword s26, s[10:11], 0x0          // seqstart_q[0]   (wrong: sequence 0's)
        s_load_dword s18, s[10:11], 0x4          // seqstart_q[1]
        s_waitcnt lgkmcnt(0)
        s_sub_u32 s19, s18, s26                  // len of sequence 0, not of this one
        s_sub_u32 s19, s19, 1
        s_lshr_b32 s19, s19, 6
        s_lshl_b32 s19, s19, 6                   // first row of its last 64-row tile
        s_add_u32 s14, s14, s19
        s_lshl_b32 s15, s14, 2                   // that row in the packed rows, in bytes
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
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_group_lse_other_len, .Lfunc_end0-addrsim_example_group_lse_other_len

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_group_lse_other_len
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
  - .name: addrsim_example_group_lse_other_len
    .symbol: addrsim_example_group_lse_other_len.kd
    .kernarg_segment_size: 24
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
...
        .end_amdgpu_metadata
