// A dQ accumulator consumer (a post-kernel's dq_acc): reads the slice acc_producer.s writes,
// by the same formula.  The pair's contract: proved in every layout.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_acc_consumer
        .p2align 8
        .type addrsim_example_acc_consumer,@function
addrsim_example_acc_consumer:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // dQ_acc
        s_load_dword s16, s[0:1], 0x8            // nhead_q
        s_load_dword s12, s[0:1], 0x10           // BAs_q (bytes)
        s_load_dword s17, s[0:1], 0x14           // seqlen_q
        s_load_dword s13, s[0:1], 0x18           // head_dim_q
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s20, s17, s13                  // seqlen_q * head_dim_q (< 2^27)
        s_lshl_b32 s20, s20, 2                   // the fp32 slice in bytes
        s_mul_i32 s21, s4, s16                   // batch_id * nhead_q + head_id (< 2^20)
        s_add_u32 s21, s21, s3
        s_mul_i32 s18, s21, s20                  // (batch_id*nhead_q + head_id) * slice, 64-bit
        s_mul_hi_u32 s19, s21, s20
        s_add_u32 s8, s8, s18                    // V#: base += offset (64-bit)
        s_addc_u32 s9, s9, s19
        s_and_b32 s9, s9, 0xffff
        s_or_b32 s9, s9, 0x40000                 // stride 4 bytes
        s_mov_b32 s10, -1
        s_mov_b32 s11, 0x20000
        v_and_b32_e32 v1, 63, v0                 // row of this lane
        buffer_load_dword v2, v1, s[8:11], 0 idxen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_acc_consumer, .Lfunc_end0-addrsim_example_acc_consumer

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_acc_consumer
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
  - .name: addrsim_example_acc_consumer
    .symbol: addrsim_example_acc_consumer.kd
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
      - { .name: dQ_acc, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: nhead_q, .offset: 8, .size: 4, .value_kind: by_value }
      - { .name: Hs_lsed, .offset: 12, .size: 4, .value_kind: by_value }
      - { .name: BAs_q, .offset: 16, .size: 4, .value_kind: by_value }
      - { .name: seqlen_q, .offset: 20, .size: 4, .value_kind: by_value }
      - { .name: head_dim_q, .offset: 24, .size: 4, .value_kind: by_value }
...
        .end_amdgpu_metadata
