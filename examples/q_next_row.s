// Slice containment (issue 36): every workgroup (batch 1 by --bound, head_id) reads rows
// 1..64 of its own BHSD head, one row past the lane's own (v_add_u32 v1, 1, v1).  The slice
// offset is the same in every head, so the relative address claim is proved; the V# covers
// the batch's heads (num_records = nhead_q * Hs_q), so the last head's row 64 is clamped and
// nothing leaves the allocation.  At seqlen_q = 64 lane 63 of head 0 reads row 0 of head 1:
// another workgroup's data.  Expected (BHSD, batch 1, seqlen_q >= 64): address proved,
// bounds counterexample of cause layout; with the "+ 1" removed, bounds proved.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_q_next_row
        .p2align 8
        .type addrsim_example_q_next_row,@function
addrsim_example_q_next_row:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Q
        s_load_dword s16, s[0:1], 0x14           // nhead_q
        s_load_dword s17, s[0:1], 0x1c           // Hs_q (bytes: seqlen_q*hdim*2 in BHSD)
        s_waitcnt lgkmcnt(0)
        s_and_b32 s9, s9, 0xffff                 // Q V#: the tensor's base, not the slice's
        s_mul_i32 s10, s16, s17                  // num_records = nhead_q * Hs_q: one batch's heads
        s_mov_b32 s11, 0x20000
        s_mul_i32 s18, s3, s17                   // head_id * Hs_q: the slice, in the offset
        v_and_b32_e32 v1, 63, v0                 // row of this lane
        v_add_u32_e32 v1, 1, v1                  // + 1: rows 1..64, one past the lane's own
        v_lshlrev_b32_e32 v1, 8, v1              // * 256 bytes (hdim 128, bf16)
        v_add_u32_e32 v1, s18, v1
        buffer_load_dword v2, v1, s[8:11], 0 offen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_q_next_row, .Lfunc_end0-addrsim_example_q_next_row

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_q_next_row
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_system_sgpr_workgroup_id_y 1
          .amdhsa_system_sgpr_workgroup_id_z 1
          .amdhsa_next_free_vgpr 8
          .amdhsa_next_free_sgpr 24
          .amdhsa_accum_offset 8
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: addrsim_example_q_next_row
    .symbol: addrsim_example_q_next_row.kd
    .kernarg_segment_size: 32
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 24
    .vgpr_count: 8
    .max_flat_workgroup_size: 256
    .reqd_workgroup_size: [ 256, 1, 1 ]
    .args:
      - { .name: Q, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: Lse, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: BAs_q, .offset: 16, .size: 4, .value_kind: by_value }
      - { .name: nhead_q, .offset: 20, .size: 4, .value_kind: by_value }
      - { .name: Hs_lsed, .offset: 24, .size: 4, .value_kind: by_value }
      - { .name: Hs_q, .offset: 28, .size: 4, .value_kind: by_value }
...
        .end_amdgpu_metadata
