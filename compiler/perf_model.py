"""An analytic bound on a kernel's time from its resource plan (`tilec.resources`,
compiler/ptx/resource_planning.py): which resource limits it, before anyone owns the GPU.

For a problem M x N x K the kernel computes ceil(M / cta_m) x ceil(N / cta_n) D tiles, `ctas_per_sm` at
once on each SM, so in ceil(tiles / (SMs x ctas_per_sm)) waves. One tile takes ceil(K / k_block) K blocks;
per K block, on one SM:
- tensor: 2 cta_m cta_n k_block FLOPs at the SM's tensor-core rate for the MMA (the f16 rate scaled by
  the MMA's dense K over 16; twice that dense-equivalent rate with structured sparsity), in SM clocks;
- smem fill: the `tx_bytes` the copies deliver to shared memory at the SM's 128 bytes per clock (twice over
  when the threads copy: the global loads return through the same L1/shared-memory data path that their
  st.shared then writes; TMA and cp.async write once);
and per tile, unless the CTA is persistent (its next tile's MMAs overlap this tile's epilogue), the
epilogue: D's bytes at the SM's share of the DRAM bandwidth.
r = ctas_per_sm CTAs share an SM's tensor cores and shared memory, so a wave takes the longest of
  tensor:   r x (tensor time of a tile)
  smem:     r x (fill time of a tile)
  latency:  one CTA's own chain: per K block fill + MMA one after the other when the kernel does not
            overlap them (a single buffer), else the longer of the two; plus the epilogue when not persistent
and the problem at least
  memory:   its unique bytes (A, with sparse A's metadata; B; D) at the DRAM bandwidth (every operand read
            once: the L2 catches all reuse, the most favourable case).
The bound is the term that gives the total; `efficiency` is the share of the last wave's CTA slots in use
(wave quantization). Not modelled: L2 bandwidth and hit rate (NVIDIA publishes no L2 bandwidth), clock
changes under power limits (the clock is the boost clock the datasheet rates assume; pass another),
instruction issue beyond the MMAs, and the MMAs' own shared-memory operand reads.

The constants are NVIDIA's published figures, each cited where it is defined; per-SM rates are the
datasheet's GPU rate divided by the SM count and the clock.
"""
from __future__ import annotations

import math

# --------------------------------------------------------------------------------------------------
# GPUs

F16_K = 16                   # dense K of one f16 MMA (PTX ISA Table 39: kind::f16 K 16; mma m16n8k16)
SMEM_BYTES_PER_CLOCK = 128   # per SM: 32 banks x 32 bits per clock (CUDA C++ Programming Guide, "Shared
#                              Memory" of compute capabilities 9.0 and 10.0: 32 banks, each 32 bits wide,
#                              one access per bank per clock)


class Gpu:
    """One GPU's figures: SMs, the tensor-core clock the datasheet rates assume, the dense f16 tensor FLOPs
    per clock per SM, DRAM bytes per second.

    Every tensor-core kind runs its instruction shape M x N x K in the same time as f16's M x N x 16, so its
    rate is the f16 rate times its dense K over 16: tf32 (K 8) half, the 8-bit kinds (K 32) twice, the 4-bit
    mx kinds (K 64) four times; the datasheets' TF32, FP8/FP6/INT8 and FP4 figures are exactly those
    multiples of FP16's. Structured sparsity doubles the dense-equivalent rate."""

    def __init__(self, name: str, sms: int, clock_hz: float, f16_flops_per_clock: int, dram_bytes_per_s: float,
                 source: str):
        self.name, self.sms, self.clock_hz = name, sms, clock_hz
        self.f16_flops_per_clock, self.dram_bytes_per_s, self.source = f16_flops_per_clock, dram_bytes_per_s, source

    def flops_per_clock(self, mma_k: int, sparse: bool) -> float:
        """Dense-equivalent tensor FLOPs per clock per SM of an MMA whose dense K is `mma_k`."""
        return self.f16_flops_per_clock * mma_k / F16_K * (2 if sparse else 1)


# H100 SXM5. NVIDIA H100 Tensor Core GPU Architecture whitepaper, Table 3 ("Comparison of NVIDIA Data Center
# GPUs"), H100 SXM5: 132 SMs; peak dense tensor TFLOPS FP16/BF16 (FP32 accumulate) 989.4, TF32 494.7, FP8
# 1978.9, INT8 1978.9 TOPS (sparse: twice each); the H100 datasheet (SXM): GPU memory bandwidth 3.35 TB/s.
# The whitepaper's per-SM rate, 2x A100's 1024 dense FP16 FMA per clock per SM, is 4096 FLOPs per clock, so
# the rates' clock is 989.4e12 / (132 x 4096) = 1.830 GHz (the tensor boost clock of Table 3).
H100_SXM = Gpu("H100 SXM", 132, 989.4e12 / (132 * 4096), 4096, 3.35e12,
               "H100 whitepaper Table 3; H100 SXM datasheet")

# B200 (HGX B200, 1000 W). NVIDIA HGX B200 datasheet, per GPU: dense tensor FP16/BF16 2.25 PFLOPS, TF32 1.1
# (1.125 rounded), FP8/FP6 4.5, INT8 4.5 POPS, FP4 9 PFLOPS (with sparsity twice each); HBM3e 8 TB/s.
# NVIDIA's datasheets give no SM count: 148 is what a B200 reports (cudaDeviceProp.multiProcessorCount; CuTe
# DSL's 74 clusters of 2 on it). Per SM a tcgen05 f16 MMA of cta_group::1 does twice Hopper's 4096 FLOPs
# per clock, so the rates' clock is 2.25e15 / (148 x 8192) = 1.856 GHz.
B200 = Gpu("B200", 148, 2.25e15 / (148 * 8192), 8192, 8e12, "HGX B200 datasheet")

# the GPU a target's estimate is for (the sm_90 parts: H100 SXM; sm_100: B200)
GPU_OF_SM = {90: H100_SXM, 100: B200}


def gpu_for(target: str) -> Gpu | None:
    from .isa.targets import TARGETS

    t = TARGETS.get(target)
    return GPU_OF_SM.get(t.sm) if t is not None else None


# --------------------------------------------------------------------------------------------------
# The estimate

BOUNDS = ("tensor", "smem", "latency", "memory")
BOUND_WORDS = {"tensor": "tensor cores", "smem": "shared-memory fill (TMA / copies)",
               "latency": "issue/latency: copies, MMAs and epilogue of a CTA run one after another",
               "memory": "DRAM bandwidth"}


class Estimate:
    """The bound of one kernel on one problem (times in seconds; `terms` per bound; `per_k_block` in SM
    clocks for one CTA)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "clock_mhz": round(self.clock_hz / 1e6, 1), "problem": list(self.problem),
                "tiles": self.tiles, "waves": self.waves, "efficiency": round(self.efficiency, 4),
                "per_k_block_clocks": {k: round(v, 1) for k, v in self.per_k_block.items()},
                "tile_us": round(self.tile_s * 1e6, 3),
                "terms_us": {k: round(v * 1e6, 3) for k, v in self.terms.items()},
                "time_us": round(self.time_s * 1e6, 3), "tflops": round(self.tflops, 1), "bound": self.bound}

    def text(self) -> str:
        m, n, k = self.problem
        pk = self.per_k_block
        lines = [f"bound on {self.gpu} ({self.clock_hz / 1e9:.3f} GHz), {m} x {n} x {k}: {self.time_s * 1e6:.1f} us, "
                 f"{self.tflops:.0f} TFLOP/s (dense-equivalent); bound by {BOUND_WORDS[self.bound]}",
                 f"  per K block of one CTA: tensor {pk['tensor']:.0f} clk, smem fill {pk['smem']:.0f} clk",
                 f"  {self.tiles} tiles in {self.waves} waves ({self.efficiency:.0%} of the CTA slots used)",
                 "  terms: " + ", ".join(f"{b} {self.terms[b] * 1e6:.1f} us" for b in BOUNDS)]
        return "\n".join(lines)


def estimate(plan: dict, target: str, problem: tuple[int, int, int], *, gpu: Gpu | None = None,
             clock_hz: float | None = None) -> Estimate | None:
    """The bound of the kernel of `plan` (a `tilec.resources` op's attributes) on an M x N x K `problem` on
    `gpu` (default: the target's, `gpu_for`); None where no GPU is known for it."""
    gpu = gpu or gpu_for(target)
    if gpu is None:
        return None
    rate = gpu.flops_per_clock(plan["mma_k"], plan["sparse"])
    clock = clock_hz or gpu.clock_hz
    m, n, k = problem
    cta_m, cta_n, kb = plan["cta_m"], plan["cta_n"], plan["k_block"]
    tiles = math.ceil(m / cta_m) * math.ceil(n / cta_n)
    r = max(1, plan["ctas_per_sm"])
    slots = gpu.sms * r
    waves = math.ceil(tiles / slots)
    k_blocks = math.ceil(k / kb)
    t_tensor = 2 * cta_m * cta_n * kb / rate                       # clocks per K block
    # a copy made by the threads moves each byte over the SM's L1/shared-memory data path twice (the global
    # load returns through it, the st.shared writes it); TMA and cp.async write shared memory once
    t_smem = plan["tx_bytes"] * (2 if plan["copy"] == "threads" else 1) / SMEM_BYTES_PER_CLOCK
    per_block = max(t_tensor, t_smem) if plan["overlap"] else t_tensor + t_smem
    t_epilogue = 0.0 if plan["persistent"] else plan["d_bytes"] / (gpu.dram_bytes_per_s / gpu.sms) * clock
    chain = k_blocks * per_block + t_epilogue                        # clocks of one CTA's tile
    wave = {"tensor": r * k_blocks * t_tensor, "smem": r * k_blocks * t_smem, "latency": chain}
    terms = {b: waves * c / clock for b, c in wave.items()}
    d_bits = 8 * plan["d_bytes"] // (cta_m * cta_n)
    a_bytes = m * k * plan["a_bits"] / 8
    if plan["sparse"]:
        a_bytes = a_bytes / 2 + m * k / 8          # kept half + metadata (<= 1 bit per dense element)
    unique = a_bytes + n * k * plan["b_bits"] / 8 + m * n * d_bits / 8
    terms["memory"] = unique / gpu.dram_bytes_per_s
    bound = max(BOUNDS, key=lambda b: (terms[b], -BOUNDS.index(b)))
    time_s = terms[bound]
    return Estimate(gpu=gpu.name, clock_hz=clock, problem=(m, n, k), tiles=tiles, waves=waves,
                    efficiency=tiles / (waves * slots), per_k_block={"tensor": t_tensor, "smem": t_smem},
                    tile_s=chain / clock, terms=terms, time_s=time_s, tflops=2 * m * n * k / time_s / 1e12,
                    bound=bound)


def default_problem(plan: dict, target: str) -> tuple[int, int, int]:
    """The problem `--emit json` / `--emit plan` estimate: 8192 x 8192 x 8192 (large enough that every
    kernel fills the GPU), rounded up to whole tiles and K blocks."""
    def up(x: int, q: int) -> int:
        return -(-x // q) * q
    return up(8192, plan["cta_m"]), up(8192, plan["cta_n"]), up(8192, plan["k_block"])
