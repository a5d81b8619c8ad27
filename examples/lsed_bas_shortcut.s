// The classic bug: LseD_base = (batch_id * BAs_q) >> 6 + head_id * Hs_lsed, computed in 64
// bits.  (batch_id*BAs_q)>>6 equals batch_id*nhead_q*seqlen_q*4 only when BAs_q =
// nhead_q*seqlen_q*hdim*2 with hdim 128 (BHSD, BSHD).  Expected: counterexample for sbhd;
// bhsd/bshd proved while BAs_q fits its 32-bit argument (nhead <= 8, seqlen <= 4096), an
// overflow of the host's u32 cast of BAs_q at full-size shapes.
        .amdgcn_target "amdgcn-amd-amdhsa--gfx942"
        .text
        .globl addrsim_example_lsed_bas_shortcut
        .p2align 8
        .type addrsim_example_lsed_bas_shortcut,@function
addrsim_example_lsed_bas_shortcut:
        s_load_dwordx2 s[8:9], s[0:1], 0x0       // Lse
        s_load_dwordx2 s[12:13], s[0:1], 0x8     // D
        s_load_dword s16, s[0:1], 0x10           // BAs_q (bytes)
        s_load_dword s17, s[0:1], 0x18           // Hs_lsed (bytes)
        s_waitcnt lgkmcnt(0)
        s_mul_i32 s18, s4, s16                   // batch_id * BAs_q, 64-bit
        s_mul_hi_u32 s19, s4, s16
        s_lshr_b64 s[18:19], s[18:19], 6         // >> 6
        s_mul_i32 s21, s3, s17                   // head_id * Hs_lsed
        s_add_u32 s18, s18, s21
        s_addc_u32 s19, s19, 0
        s_add_u32 s8, s8, s18
        s_addc_u32 s9, s9, s19
        s_and_b32 s9, s9, 0xffff
        s_or_b32 s9, s9, 0x40000
        s_mov_b32 s10, -1
        s_mov_b32 s11, 0x20000
        s_add_u32 s12, s12, s18
        s_addc_u32 s13, s13, s19
        s_and_b32 s13, s13, 0xffff
        s_or_b32 s13, s13, 0x40000
        s_mov_b32 s14, -1
        s_mov_b32 s15, 0x20000
        v_and_b32_e32 v1, 63, v0
        buffer_load_dword v2, v1, s[8:11], 0 idxen
        buffer_load_dword v3, v1, s[12:15], 0 idxen
        s_waitcnt vmcnt(0)
        s_endpgm
.Lfunc_end0:
        .size addrsim_example_lsed_bas_shortcut, .Lfunc_end0-addrsim_example_lsed_bas_shortcut

        .rodata
        .p2align 6
        .amdhsa_kernel addrsim_example_lsed_bas_shortcut
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
  - .name: addrsim_example_lsed_bas_shortcut
    .symbol: addrsim_example_lsed_bas_shortcut.kd
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
