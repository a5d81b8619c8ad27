// LSE read at the first and the last row of the (batch, head) slice, through a raw V# (stride
// 0, num_records -1: no clamping) whose base is the slice (64-bit, as lse_loop.s).  The last
// row's offset is Hs_lsed (seqlen_q * 4 bytes) where it should be Hs_lsed - 4: one row past
// the slice, the next head's first row, and past LSE's allocation for the last (batch, head).
// The first read is in bounds: a bounds check that stops at a buffer's first access misses it.
// Expected: address proved; bounds counterexample at the last (batch, head) (cause allocation)
// at the second read.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_lse_last_row
        .p2align 8
        .type addrsim_example_lse_last_row,@function
addrsim_example_lse_last_row:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dword s16, s[0:1], 0x14           // nhead_q
        s_load_dword s17, s[0:1], 0x18           // Hs_lsed (bytes)
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s18, s4, s16                   // batch_id * nhead_q
        s_add_u32 s18, s18, s3                   // + head_id
        s_mul_i32 s19, s18, s17                  // (batch_id*nhead_q + head_id) * Hs_lsed, 64-bit
        s_mul_hi_u32 s20, s18, s17
        s_add_u32 s8, s8, s19                    // Lse V#: base of the slice
        s_addc_u32 s9, s9, s20
        s_and_b32 s9, s9, 0xffff                 // stride 0: a raw buffer
        s_mov_b32 s10, -1                        // num_records: no clamping
        s_mov_b32 s11, 0x20000
        v_mov_b32_e32 v1, 0                      // the first row
        buffer_load_dword v2, v1, s[8:11], 0 offen
        v_mov_b32_e32 v3, s17                    // "the last row": Hs_lsed, one row too far (the bug)
        buffer_load_dword v4, v3, s[8:11], 0 offen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_lse_last_row, .Lfunc_end0-addrsim_example_lse_last_row

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_lse_last_row
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
  - .name: addrsim_example_lse_last_row
    .symbol: addrsim_example_lse_last_row.kd
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
      - { .name: Lse, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: D, .offset: 8, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: BAs_q, .offset: 16, .size: 4, .value_kind: by_value }
      - { .name: nhead_q, .offset: 20, .size: 4, .value_kind: by_value }
      - { .name: Hs_lsed, .offset: 24, .size: 4, .value_kind: by_value }
      - { .name: seqlen_q, .offset: 28, .size: 4, .value_kind: by_value }
...
        .end_amdgpu_metadata
