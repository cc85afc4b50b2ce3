"""The rules `verify` (compiler/passes/verify.py and the checks it calls: tcgen05_forms, tcgen05_kinds,
layout-selection's stage budget, compiler/passes/limits.py, the pipelined kernels' configurations)
enforces beyond the form tables, as data: one row per rule with the PTX ISA section or table it comes
from, or "tilec kernel limit" where the bound is tilec's own. The README's support matrix lists them
(compiler/support_matrix.py verify_rules_table); tests/test_verify_rules.py compiles a tile that breaks
each row and expects the row's diagnostic, so a row cannot outlive its check.
"""
from __future__ import annotations

from typing import NamedTuple


class VerifyRule(NamedTuple):
    id: str              # the key tests/test_verify_rules.py probes it under
    engine: str          # "tcgen05", "mma.sp" or "both"
    rule: str            # what is required, as the README says it
    source: str          # PTX ISA section / table, or "tilec kernel limit"
    message: str         # the start of verify's diagnostic for a tile that breaks the rule


TILEC_LIMIT = "tilec kernel limit"

VERIFY_RULES: tuple[VerifyRule, ...] = (
    # .ashift (9.7.16.10.9.1: syntax groups 3 and 6 only, always with A in TMEM)
    VerifyRule("ashift_ws", "tcgen05", "`.ashift` is not available on `.ws`", "PTX ISA 9.7.16.10.9.1 (syntax)",
               ".ashift is not available on tcgen05.mma.ws"),
    VerifyRule("ashift_block_scale", "tcgen05", "`.ashift` is not available with block scaling",
               "PTX ISA 9.7.16.10.9.1 (syntax)", ".ashift cannot be used with block scaling"),
    VerifyRule("ashift_a_tmem", "tcgen05", "`.ashift` needs A in Tensor Memory", "PTX ISA 9.7.16.10.9.1",
               ".ashift shifts rows of A in Tensor Memory: A must be in TMEM"),
    VerifyRule("ashift_collector", "tcgen05", "`.ashift` cannot be combined with `.collector::a::use` / `::a::fill`",
               "PTX ISA 9.7.16.10.9.1", ".collector::a::use cannot be combined with .ashift"),
    VerifyRule("ashift_m", "tcgen05", "`.ashift` needs M = 128 or 256", "PTX ISA 9.7.16.10.9.1",
               ".ashift needs M = 128 or 256"),
    # collector buffers
    VerifyRule("collector_a_ws", "tcgen05", "collector buffer `::a` is not for `.ws`",
               "PTX ISA 9.7.16.10.9.1 (.collector_usage)", ".collector::a::fill is not allowed on tcgen05.mma.ws"),
    VerifyRule("collector_b_non_ws", "tcgen05", "collector buffers `::b0`-`::b3` are only for `.ws`",
               "PTX ISA 9.7.16.10.9.3", ".collector::b0::fill is not allowed on tcgen05.mma;"),
    # disable-output-lane
    VerifyRule("dol_block_scale", "tcgen05", "disable_output_lane is not available with block scaling",
               "PTX ISA 9.7.16.10.9.1 (syntax)", "disable-output-lane is not allowed with block scaling"),
    VerifyRule("dol_ws", "tcgen05", "disable_output_lane is not available on `.ws`", "PTX ISA 9.7.16.10.9.1 (syntax)",
               "disable-output-lane is not allowed on tcgen05.mma.ws"),
    VerifyRule("dol_count", "tcgen05", "disable_output_lane takes 4 x cta_group 32-bit masks",
               "PTX ISA 9.7.16.10.9.1 (size of the disable-output-lane vector)",
               "disable_output_lane takes 4 32-bit masks with cta_group::1"),
    # scale-input-d
    VerifyRule("sid_kind", "tcgen05", "scale_input_d only with kind::f16 / kind::tf32", "PTX ISA 9.7.16.10.9.1",
               "scale-input-d is only for kind::f16 and kind::tf32"),
    VerifyRule("sid_ws", "tcgen05", "scale_input_d is not available on `.ws`", "PTX ISA 9.7.16.10.9.1 (syntax)",
               "scale-input-d is not an operand of tcgen05.mma.ws"),
    VerifyRule("sid_range", "tcgen05", "scale_input_d is 0-15", "PTX ISA 9.7.16.10.9.1",
               "scale_input_d is an immediate in [0, 15]"),
    VerifyRule("zcm_ws", "tcgen05", "a zero-column mask only with `.ws`", "PTX ISA 9.7.16.10.9.3; Table 45",
               "a zero-column mask descriptor is only an operand of tcgen05.mma.ws"),
    VerifyRule("k96_block", "tcgen05", "K = 96 needs `.block16` / `.block32` (scale_vec::NX only for K = 64, 128)",
               "PTX ISA 9.7.16.10.9.1; Table 39", "K = 96 needs .block16 or .block32"),
    # operands
    VerifyRule("a_tmem_mn", "tcgen05", "A in Tensor Memory is K-major", "PTX ISA 9.7.16.10.1, Table 49",
               "A in tensor memory cannot be MN-major"),
    VerifyRule("a_tmem_swizzle", "tcgen05", "A in Tensor Memory has no swizzle", "PTX ISA 9.7.16.10.1, Table 49",
               "swizzle=128B describes a shared-memory layout; A is in tensor memory"),
    VerifyRule("block_scale_vector", "tcgen05", "block-scaled kinds need a scale vector size (and scale types)",
               "PTX ISA Tables 43/44, Table 54", ".kind::mxf8f6f4 is block scaled: it needs a scale vector size"),
    VerifyRule("block_scale_sf_same", "tcgen05", "SFA and SFB share one scale type", "PTX ISA Tables 43/44",
               "SFA and SFB must have the same scale type"),
    VerifyRule("base32b", "tcgen05", "swizzle 128B_base32B only for MN-major kind::tf32",
               "PTX ISA 9.7.16.10.1, Table 49", "128B_base32B swizzle is only for MN-major kind::tf32 operands"),
    VerifyRule("subbyte_k_major", "tcgen05", "sub-byte (4-/6-bit) operands are K-major", "PTX ISA 9.7.16.10.1, Table 49",
               "e2m1 (sub-byte) operands must be K-major"),
    VerifyRule("table50_n", "tcgen05", "N of an MN-major 8-bit B: 16-256 step 16 (cta_group::1), 32-256 step 32 (::2)",
               "PTX ISA Table 50", "N = 8 is not valid with an MN-major 8-bit B under cta_group::1"),
    VerifyRule("k_stage_smem", "tcgen05", "one K stage of A + B fits 96 KB of shared memory (a loop K that halves "
               "is split into stages that fit)", TILEC_LIMIT + " (layout-selection STAGE_BUDGET)",
               "one K stage of this tile needs"),
    VerifyRule("loop_k_multiple", "both", "loop K is a positive multiple of the instruction K",
               TILEC_LIMIT, "loop K=24 is not a positive multiple of the instruction K=16"),
    # schedule
    VerifyRule("schedule_tcgen05", "tcgen05", "a tcgen05 `schedule` tiles CTAs by one MMA's M x N (the "
               "warp-specialised kernel: fixed roles, no warps= / mma=, K at run time, no loop)",
               TILEC_LIMIT, "the CTA tile of a tcgen05 schedule is one MMA's M x N"),
    VerifyRule("schedule_ws_collector", "tcgen05", "a scheduled `.ws` tile takes no collector usage but `::discard` "
               "(no MMA of the kernel reads one B twice)", TILEC_LIMIT,
               "collector::b0::fill: the scheduled tcgen05 kernel never reads one operand twice"),
    VerifyRule("schedule_ws_zero_shift", "tcgen05", "a scheduled `.ws` tile's zero-column mask has no column shift "
               "(it would read B rows past the tile's N)", TILEC_LIMIT, "a zero-column mask with column shift 2"),
    VerifyRule("schedule_a_tmem_rows", "tcgen05", "a scheduled tile with A in TMEM has 128 rows per CTA (M = 128, or "
               "256 with cluster=2: tcgen05.cp .128x256b copies row i to lane i)", TILEC_LIMIT,
               "M = 64: A in TMEM is copied row i -> lane i"),
    VerifyRule("schedule_a_tmem_bytes", "tcgen05", "a scheduled tile's A in TMEM is an 8-, 16- or 32-bit type (TMA "
               "copies bytes; 4-/6-bit A takes a byte per value in TMEM)", TILEC_LIMIT,
               "A in TMEM as e2m1: TMA copies bytes"),
    VerifyRule("schedule_cta_multiple", "mma.sp", "schedule cta is a multiple of instruction shape x warps",
               TILEC_LIMIT, "schedule cta M = 48 is not a multiple of 32"),
    VerifyRule("schedule_stages", "mma.sp", "schedule stages 1-16 (the warp-level cp.async pipeline 2-8, the wgmma TMA ring 2-16)",
               TILEC_LIMIT, "schedule stages = 17; use 1..16"),
    VerifyRule("schedule_cluster", "mma.sp", "cluster=2 only with mma=wgmma", TILEC_LIMIT,
               "schedule cluster = 2: CTA pairs (cluster=2) exist for mma=wgmma only"),
    VerifyRule("wgmma_sm90a", "mma.sp", "mma=wgmma needs target sm_90a", "PTX ISA 9.7.15.6.3",
               "schedule mma=wgmma needs target sm_90a"),
    VerifyRule("pipelined_cta_k", "mma.sp", "pipelined kernel: cta K is 1, 2, 4 or 8 instruction K", TILEC_LIMIT,
               "schedule cta K = 96 must be 32, 64, 128 or 256"),
    # kernel budgets (compiler/passes/limits.py)
    VerifyRule("mma_budget", "mma.sp", "at most 1024 MMA instructions unrolled in one kernel", TILEC_LIMIT,
               "this schedule unrolls 262144 MMA instructions in one kernel"),
    VerifyRule("register_budget", "mma.sp", "at most 255 accumulator + fragment registers per thread",
               TILEC_LIMIT + " (255 registers per thread: CUDA C++ Programming Guide)",
               "a 256x256 warp tile needs 2048 accumulator + 208 fragment registers"),
)
