// Grouped-query attention: the key head is head_id / ratio, divided with LLVM's float-reciprocal
// expansion (v_rcp_iflag_f32 estimate, one Newton step, two corrections).  addrsim proves the
// division exact over the bounded domain (all head_id < 256, ratio <= 256, every reciprocal
// within 1 ULP) before using it; the K base is then proved for every layout.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_gqa_key_head
        .p2align 8
        .type addrsim_example_gqa_key_head,@function
addrsim_example_gqa_key_head:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // K
        s_load_dword s16, s[0:1], 0x14           // ratio = nhead_q / nhead_k
        s_load_dword s17, s[0:1], 0x18           // Hs_k (bytes)
        s_load_dword s18, s[0:1], 0x1c           // BAs_k (bytes)
        s_waitcnt lgkmcnt(0)
        v_cvt_f32_u32_e32 v1, s16                // LLVM's 32-bit udiv expansion: head_id / ratio
        s_sub_i32 s19, 0, s16
        v_rcp_iflag_f32_e32 v1, v1
        v_mul_f32_e32 v1, 0x4f7ffffe, v1
        v_cvt_u32_f32_e32 v1, v1
        v_mul_lo_u32 v2, s19, v1
        v_mul_hi_u32 v2, v1, v2
        v_add_u32_e32 v1, v1, v2
        v_mul_hi_u32 v1, s3, v1
        v_mul_lo_u32 v2, v1, s16
        v_sub_u32_e32 v3, s3, v2
        v_add_u32_e32 v4, 1, v1
        v_cmp_le_u32_e32 vcc, s16, v3
        v_subrev_u32_e32 v2, s16, v3
        v_cndmask_b32_e32 v1, v1, v4, vcc
        v_cndmask_b32_e32 v3, v3, v2, vcc
        v_add_u32_e32 v2, 1, v1
        v_cmp_le_u32_e32 vcc, s16, v3
        v_cndmask_b32_e32 v3, v1, v2, vcc
        v_readfirstlane_b32 s20, v3              // key head
        s_mul_i32 s21, s4, s18                   // batch_id * BAs_k, 64-bit
        s_mul_hi_u32 s22, s4, s18
        s_mul_i32 s23, s20, s17                  // key head * Hs_k, 64-bit
        s_mul_hi_u32 s24, s20, s17
        s_add_u32 s21, s21, s23
        s_addc_u32 s22, s22, s24
        s_add_u32 s8, s8, s21                    // K V#: base += offset
        s_addc_u32 s9, s9, s22
        s_and_b32 s9, s9, 0xffff
        s_mov_b32 s10, -1
        s_mov_b32 s11, 0x20000
        v_lshlrev_b32_e32 v5, 2, v0              // 4 bytes per lane
        buffer_load_dword v6, v5, s[8:11], 0 offen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_gqa_key_head, .Lfunc_end0-addrsim_example_gqa_key_head

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_gqa_key_head
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
  - .name: addrsim_example_gqa_key_head
    .symbol: addrsim_example_gqa_key_head.kd
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
      - { .name: K, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: BAs_q, .offset: 8, .size: 4, .value_kind: by_value }
      - { .name: nhead_q, .offset: 12, .size: 4, .value_kind: by_value }
      - { .name: Hs_lsed, .offset: 16, .size: 4, .value_kind: by_value }
      - { .name: ratio, .offset: 20, .size: 4, .value_kind: by_value }
      - { .name: Hs_k, .offset: 24, .size: 4, .value_kind: by_value }
      - { .name: BAs_k, .offset: 28, .size: 4, .value_kind: by_value }
...
        .end_amdgpu_metadata
