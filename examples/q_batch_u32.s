// Q's batch term from the batch stride in one 32-bit s_mul_i32 (batch_id * BAs_q, low half only),
// head_id * Hs_q in 64 bits.  Even with exact kernel arguments the kernel's own product wraps
// once batch_id * BAs_q >= 2**32.
// Expected (BHSD): counterexample, cause overflow at the s_mul_i32 (the kernel's wrap).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_q_batch_u32
        .p2align 8
        .type addrsim_example_q_batch_u32,@function
addrsim_example_q_batch_u32:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Q
        s_load_dword s16, s[0:1], 0x14           // nhead_q
        s_load_dword s17, s[0:1], 0x1c           // Hs_q (bytes: seqlen_q*hdim*2 in BHSD)
        s_load_dword s21, s[0:1], 0x10           // BAs_q (bytes: nhead_q*seqlen_q*hdim*2 in BHSD)
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s19, s4, s21                   // batch_id * BAs_q, low 32 bits
        s_mov_b32 s20, 0                         // high half dropped: 32-bit batch term
        s_mul_i32 s22, s3, s17                   // head_id * Hs_q, low 32 bits
        s_mul_hi_u32 s23, s3, s17                // high 32 bits
        s_add_u32 s19, s19, s22                  // 64-bit sum
        s_addc_u32 s20, s20, s23
        s_add_u32 s8, s8, s19                    // Q V#: base += offset (64-bit)
        s_addc_u32 s9, s9, s20
        s_and_b32 s9, s9, 0xffff
        s_mov_b32 s10, -1
        s_mov_b32 s11, 0x20000
        v_and_b32_e32 v1, 63, v0                 // row of this lane
        v_lshlrev_b32_e32 v1, 8, v1              // * 256 bytes (hdim 128, bf16)
        buffer_load_dword v2, v1, s[8:11], 0 offen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_q_batch_u32, .Lfunc_end0-addrsim_example_q_batch_u32

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_q_batch_u32
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
  - .name: addrsim_example_q_batch_u32
    .symbol: addrsim_example_q_batch_u32.kd
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
