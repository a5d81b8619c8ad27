// A dQ accumulator producer (a main kernel's dq): the fp32 slice (batch_id, head_id) of
// [batch, nhead_q, seqlen_q, hdim_q] at (batch_id*nhead_q + head_id)*seqlen_q*hdim_q*4, 64-bit.
// With acc_consumer.s: the dq_acc contract proved in every layout.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_acc_producer
        .p2align 8
        .type addrsim_example_acc_producer,@function
addrsim_example_acc_producer:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // dQ
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
        buffer_atomic_add_f32 v2, v1, s[8:11], 0 idxen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_acc_producer, .Lfunc_end0-addrsim_example_acc_producer

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_acc_producer
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
  - .name: addrsim_example_acc_producer
    .symbol: addrsim_example_acc_producer.kd
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
      - { .name: dQ, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }
      - { .name: nhead_q, .offset: 8, .size: 4, .value_kind: by_value }
      - { .name: Hs_lsed, .offset: 12, .size: 4, .value_kind: by_value }
      - { .name: BAs_q, .offset: 16, .size: 4, .value_kind: by_value }
      - { .name: seqlen_q, .offset: 20, .size: 4, .value_kind: by_value }
      - { .name: head_dim_q, .offset: 24, .size: 4, .value_kind: by_value }
...
        .end_amdgpu_metadata
