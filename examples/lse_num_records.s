// LSE read through a raw V# (stride 0) whose base is the batch's slice, with the head's
// offset in the VGPR offset: LseD_base is right (the address check proves it), but
// num_records is one head's rows (Hs_lsed bytes), so for head_id >= 1 the offset passes
// num_records and the load silently returns 0 instead of the head's LSE.
// Expected: address proved; bounds counterexample at head_id 1 (cause num_records).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_lse_num_records
        .p2align 8
        .type addrsim_example_lse_num_records,@function
addrsim_example_lse_num_records:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dword s16, s[0:1], 0x14           // nhead_q
        s_load_dword s17, s[0:1], 0x18           // Hs_lsed (bytes)
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s18, s4, s16                   // batch_id * nhead_q
        s_mul_i32 s19, s18, s17                  // low 32 bits of (batch_id*nhead_q)*Hs_lsed
        s_mul_hi_u32 s20, s18, s17               // high 32 bits
        s_add_u32 s8, s8, s19                    // Lse V#: base = the batch's slice (64-bit)
        s_addc_u32 s9, s9, s20
        s_and_b32 s9, s9, 0xffff                 // stride 0: a raw buffer
        s_mov_b32 s10, s17                       // num_records = Hs_lsed: one head only (the bug)
        s_mov_b32 s11, 0x20000
        s_mul_i32 s21, s3, s17                   // head_id * Hs_lsed
        v_and_b32_e32 v1, 63, v0                 // row of this lane
        v_lshlrev_b32_e32 v1, 2, v1              // * 4 bytes
        v_add_u32_e32 v1, s21, v1                // + the head's offset, in the VGPR offset
        buffer_load_dword v2, v1, s[8:11], 0 offen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_lse_num_records, .Lfunc_end0-addrsim_example_lse_num_records

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_lse_num_records
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
  - .name: addrsim_example_lse_num_records
    .symbol: addrsim_example_lse_num_records.kd
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
