// Three paths, one address: LSE and D are read on three paths (seqlen_q below 64, below 128,
// the rest), each at the same address, Pattern A's 64-bit base.  Only seqlen_q < 2**20 reaches
// a read; LSE's base also adds (seqlen_q >> 20) * head_id * 256 bytes, which is 0 on every path that
// reads but not on the domain alone (seqlen_q <= 2**20).  Expected: proved for every layout
// (D's one claim on the domain alone, once; LSE's per path, which needs its path condition).
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_lsed_three_paths
        .p2align 8
        .type addrsim_example_lsed_three_paths,@function
addrsim_example_lsed_three_paths:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dwordx2 s[12:13], s[0:1], 0x8     // D
        s_load_dword s16, s[0:1], 0x14           // nhead_q
        s_load_dword s17, s[0:1], 0x18           // Hs_lsed (bytes)
        s_load_dword s25, s[0:1], 0x1c           // seqlen_q
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s18, s4, s16                   // batch_id * nhead_q  (< 2^20)
        s_mul_i32 s19, s18, s17                  // low 32 bits of (batch_id*nhead_q)*Hs_lsed
        s_mul_hi_u32 s20, s18, s17               // high 32 bits
        s_mul_i32 s21, s3, s17                   // head_id * Hs_lsed
        s_add_u32 s19, s19, s21
        s_addc_u32 s20, s20, 0
        s_add_u32 s12, s12, s19                  // D V#: base += offset (64-bit)
        s_addc_u32 s13, s13, s20
        s_and_b32 s13, s13, 0xffff
        s_or_b32 s13, s13, 0x40000
        s_mov_b32 s14, -1
        s_mov_b32 s15, 0x20000
        s_lshr_b32 s26, s25, 20                  // 1 only at seqlen_q == 2**20 (no path reads there)
        s_mul_i32 s26, s26, s3                   // times head_id: not the same in every workgroup
        s_lshl_b32 s26, s26, 8
        s_add_u32 s19, s19, s26
        s_addc_u32 s20, s20, 0
        s_add_u32 s8, s8, s19                    // Lse V#: base += offset (64-bit)
        s_addc_u32 s9, s9, s20
        s_and_b32 s9, s9, 0xffff
        s_or_b32 s9, s9, 0x40000                 // stride 4 bytes
        s_mov_b32 s10, -1
        s_mov_b32 s11, 0x20000
        v_and_b32_e32 v1, 63, v0                 // row of this lane
        s_cmp_ge_u32 s25, 0x100000
        s_cbranch_scc1 .Lend
        s_cmp_lt_u32 s25, 64
        s_cbranch_scc1 .Lshort
        s_cmp_lt_u32 s25, 128
        s_cbranch_scc1 .Lmiddle
        buffer_load_dword v2, v1, s[8:11], 0 idxen
        buffer_load_dword v3, v1, s[12:15], 0 idxen
        s_branch .Lend
.Lshort:
        buffer_load_dword v2, v1, s[8:11], 0 idxen
        buffer_load_dword v3, v1, s[12:15], 0 idxen
        s_branch .Lend
.Lmiddle:
        buffer_load_dword v2, v1, s[8:11], 0 idxen
        buffer_load_dword v3, v1, s[12:15], 0 idxen
.Lend:
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_lsed_three_paths, .Lfunc_end0-addrsim_example_lsed_three_paths

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_lsed_three_paths
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
  - .name: addrsim_example_lsed_three_paths
    .symbol: addrsim_example_lsed_three_paths.kd
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
