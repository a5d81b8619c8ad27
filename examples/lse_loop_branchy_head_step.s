// As lse_loop_branchy.s, with five branches (on bits 7-10, then 6, of the row), and the arm
// taken where bit 6 is set also advances the V# base by 4*head_id bytes: right for every head
// in the first tile, then shifted.  Those paths reach the back edge apart from the right ones
// (the branch on bit 6 is the last).  Expected: counterexample (the step of the V# base on
// those paths depends on head_id).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_lse_loop_branchy_head_step
        .p2align 8
        .type addrsim_example_lse_loop_branchy_head_step,@function
addrsim_example_lse_loop_branchy_head_step:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dword s16, s[0:1], 0x14           // nhead_q
        s_load_dword s17, s[0:1], 0x18           // Hs_lsed (bytes)
        s_load_dword s23, s[0:1], 0x1c           // seqlen_q
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s18, s4, s16                   // batch_id * nhead_q
        s_add_u32 s18, s18, s3                   // + head_id
        s_mul_i32 s19, s18, s17                  // (batch_id*nhead_q + head_id) * Hs_lsed, 64-bit
        s_mul_hi_u32 s20, s18, s17
        s_add_u32 s8, s8, s19                    // Lse V#: base of the slice
        s_addc_u32 s9, s9, s20
        s_and_b32 s9, s9, 0xffff
        s_or_b32 s9, s9, 0x40000                 // stride 4 bytes
        s_mov_b32 s10, -1
        s_mov_b32 s11, 0x20000
        v_and_b32_e32 v1, 63, v0                 // row of this lane in the tile
        s_movk_i32 s22, 0x100                    // step: 64 rows * 4 bytes
        s_mov_b32 s24, 0                         // first row of the tile
        s_mov_b32 s25, 0                         // a count the branches keep (no address reads it)
        s_lshl_b32 s21, s3, 2                    // 4 * head_id
.Lloop:
        buffer_load_dword v2, v1, s[8:11], 0 idxen
        .irp bit, 7, 8, 9, 10, 6
        s_and_b32 s26, s24, 1 << \bit            // bit \bit of the row
        s_cmp_eq_u32 s26, 0
        s_cbranch_scc0 1f
        s_add_u32 s25, s25, 1
        s_mov_b64 s[28:29], 0                    // a scalar on this arm,
        s_branch 2f
1:
        s_add_u32 s25, s25, 2
        v_cmp_gt_u32_e64 s[28:29], 32, v0        // a lane mask on the other
        .if \bit == 6
        s_add_u32 s8, s8, s21                    // + 4*head_id (the bug)
        s_addc_u32 s9, s9, 0
        .endif
2:
        .endr
        buffer_load_dword v3, v1, s[8:11], 0 idxen
        s_add_u32 s8, s8, s22                    // next tile of 64 rows: base += step
        s_addc_u32 s9, s9, 0
        s_add_u32 s24, s24, 64
        s_cmp_lt_u32 s24, s23
        s_cbranch_scc1 .Lloop
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_lse_loop_branchy_head_step, .Lfunc_end0-addrsim_example_lse_loop_branchy_head_step

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_lse_loop_branchy_head_step
          .amdhsa_user_sgpr_kernarg_segment_ptr 1
          .amdhsa_system_sgpr_workgroup_id_x 1
          .amdhsa_system_sgpr_workgroup_id_y 1
          .amdhsa_system_sgpr_workgroup_id_z 1
          .amdhsa_next_free_vgpr 8
          .amdhsa_next_free_sgpr 32
          .amdhsa_accum_offset 8
        .end_amdhsa_kernel

        .amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: addrsim_example_lse_loop_branchy_head_step
    .symbol: addrsim_example_lse_loop_branchy_head_step.kd
    .kernarg_segment_size: 32
    .kernarg_segment_align: 8
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 0
    .wavefront_size: 64
    .sgpr_count: 32
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
