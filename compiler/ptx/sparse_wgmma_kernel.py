"""A warp-specialised structured-sparse GEMM on Hopper's `wgmma.mma_async.sp` (sm_90a): D = A*B (+ C).

The DSL selects it with `schedule cta=MxNxK warps=Wx1 stages=S mma=wgmma;` (compiler/spec.py
ScheduleSpec.mma). Same problem and global layouts as the warp-level kernel of
compiler/ptx/sparse_gemm_kernel.py; a different machine underneath:

* One CTA computes one `cta_m x cta_n` tile of D (a 1-D grid rasterised in groups of `raster_group`
  tile rows, as the warp-level kernel does), or several: persistent CTAs and split-K, below. It has 1 + `consumers` warpgroups of 128 threads
  (PTX 9.7.15.1: a warpgroup is four contiguous warps whose first warp index is a multiple of 4).
* Warpgroup 0 is the producer: its warp 0 walks the K blocks of `cta_k` (the other three have nothing
  to do) and, per block, waits until the ring slot is free (`mbarrier.try_wait.parity` on the slot's
  *empty* barrier); lane 0 announces the slot's bytes (`mbarrier.arrive.expect_tx` on its *full*
  barrier) and issues one `cp.async.bulk.tensor.3d` per operand box (TMA, rank 3: elements, rows,
  batch; PTX 9.7.9.25.5.1), which completes the bytes on the full barrier
  (`.mbarrier::complete_tx::bytes`). The copy engine writes the 128/64/32-byte swizzle itself (CU_TENSOR_MAP_SWIZZLE_*): no per-thread address arithmetic, no registers.
* Warpgroups 1.. (1 to 3) are consumers. Consumer c owns rows [c*wg_m, (c+1)*wg_m) of the tile (wg_m =
  cta_m / consumers = 64 or 128, i.e. 1 or 2 instructions along M). Per K block it waits for the full
  barrier, loads its metadata words (`ld.shared.b32`, one per 16 rows, k-step and lane), and issues
  `wgmma.mma_async.sp.sync.aligned.m64n{cta_n}k{k}` per k-step and 64-row block, A and B both read
  from shared memory through matrix descriptors (9.7.15.5.1.2.2), accumulators in registers. After
  `wgmma.commit_group` it waits with `wgmma.wait_group 1` (the block before is then done) and lane 0
  of each warp arrives on that block's empty barrier (count = consumer warps), so the producer may
  refill it while the tensor cores work on the current block.
* Epilogue: `wgmma.wait_group 0`, the consumers meet (`bar.sync 1`), each thread writes its
  accumulator fragment (Figure 149 layout: d_i at row 16*warp + lane/4 + 8*((i>>1)&1), column
  8*(i>>2) + 2*(lane%4) + (i&1); 9.7.15.5.1.1.1) into a padded D tile in the drained ring, and each
  warpgroup copies its rows out in coalesced 16-byte stores (direct fragment stores when the tile does
  not fit the ring). With the DSL's fused epilogue (`epilogue`: compiler/passes/epilogue_lowering.py's
  plan) the raw f32 accumulators are staged and the plan runs in the copy-out loop, per 16-byte chunk
  (compiler/ptx/epilogue.py: C and bias in one vector load each), or per pair on direct stores.

Registers (check_registers). Every thread launches with 65536 / threads in steps of 8 (`.maxnreg`: 168 for
384 threads, 128 for 512). Where a consumer needs more (its accumulators + CONSUMER_OTHER_REGS), the
producer warpgroup, which holds a few addresses, gives its registers to the consumers (setmaxnreg, PTX
9.7.19; compiler/isa/setmaxnreg.py): all four producer warps execute `setmaxnreg.dec` right after the role
branch (before warps 1-3 leave), the consumers `setmaxnreg.inc` first thing, which waits until the pool has
them; the consumers take the most the CTA's registers allow with the producer at 24 (240 for 2 consumers: 2 x
128 rows x 192 = 192 accumulators; 160 for 3). ptxas compiles each single wgmma within the launch count
(WGMMA_OPERAND_REGS), so 3 consumers (512 threads, 128 a thread) take N <= 200. Persistent CTAs running a
fused epilogue on the registers of 2 m64 blocks (EPILOGUE_OTHER_REGS), or one that reads C beside the 128
accumulators of one block (EPILOGUE_C_OTHER_REGS: 128 x 256 with beta*C), turn setmaxnreg on as well.

Persistent CTAs (`persistent=True`; DSL `schedule ... mma=wgmma persistent=static`). The grid is
min(tiles, multiprocessors x max_ctas_per_sm) per batch (CTA pairs: whole pairs; the runtime evaluates the
ABI's `grid` with the device's SM count), and every role walks the work items t = ctaid.x, t += nctaid.x
(pairs: ctaid.x / 2, += nctaid.x / 2, so both CTAs of a pair walk the same tiles) in the raster order above.
The ring's pipeline state (stage, phase; compiler/ptx/pipeline.py) is set once and carries across tiles
for the producer and the consumers alike, so the producer runs ahead into the next tile's K blocks as
soon as slots free up. The consumers free the last slot of a tile right after `wgmma.wait_group 0`, before
the epilogue, and D's staging does not use the ring: it gets a region of its own after the barriers where
ring + region fit the target's shared memory (D_REGION_ALIGN), else D is stored from the fragments. The region
holds 64 rows per consumer warpgroup (consumers x 64 x d_pitch bytes): a 128-row warpgroup stages and copies
out its two m64 blocks (separate accumulator sets) in turn, block j after block j - 1's copy-out has read the
region (below), so the region is half the tile and a deeper ring fits beside it (256 x 176: 4 stages of
40960 B + 2 x 64 x 368 B = 47104 B, against 3 beside the whole tile's 94208 B).
Where even 64 whole rows per warpgroup do not fit, the rows are cut into h column blocks (`d_col_blocks`, the
smallest h of 1, 2, 4, .. that fits; a block's columns a multiple of 8, so no accumulator pair straddles two
blocks, and its row piece a multiple of 16 bytes): the region holds consumers x 64 rows x (cta_n / h x bytes +
16), and a warpgroup stages and copies out its (m64 block, column block) pieces in turn, block b's piece to
columns n0 + b * cta_n / h, with the same protocol between pieces as between m64 blocks (128 x 256 with f16 D: 4
stages of 41984 B beside 2 x 64 x 272 B = 34816 B in h = 2 blocks of 128 columns, where whole rows, 2 x 64 x
528 B = 67584 B, left 3 stages or D stored from the fragments). h = 1 is the kernel of whole rows.
With a fused epilogue the plan runs on the registers before staging (C and bias per pair, as for direct
stores) and D's own type is staged: half the region of staged f32 for f16 / bf16 D.
Each warpgroup stages and copies out only its own rows, so no barrier across consumers is needed: a
warpgroup's `bar.sync 2 + wg` before staging waits for its own copy-out of the previous tile.
The copy-out of an interior tile goes to the copy engine (TMA) instead of the consumer warps: after staging,
each thread orders its generic-proxy stores before the async proxy's reads (`fence.proxy.async.shared::cta`,
the memory model's proxy rules) and the warpgroup meets (`bar.sync 2 + wg`); then thread q of the warpgroup
issues one `cp.async.bulk.global.shared::cta.bulk_group` (PTX 9.7.9.25.4.1) of its row, cta_n x D bytes (with
column blocks its row piece, cta_n / h x D bytes, to columns n0 + b * cta_n / h) from the region to D's row
m0 + wg*wg_m + 64*j + q of m64 block j (threads q >= 64 idle: one row a thread, rather
than half a row each for 128 threads, gives fewer, larger copies and needs no half row of 16-byte multiples),
and commits it as its own bulk group, and the consumers go on (to block j + 1, or the next tile's MMAs) while
the copies run. Before it stages the next block (of this tile or the next) a thread waits with
`cp.async.bulk.wait_group.read 0` until its copy has read the region (then the warpgroup's barrier, so no row
another thread's copy still reads is overwritten), and every thread waits with `cp.async.bulk.wait_group 0`
before the CTA exits. The row (or row piece), the region's base (D_REGION_ALIGN) and pitch (cta_n / h x bytes
+ 16) are multiples of 16 bytes, as a bulk copy needs (compiler/isa/bulk_copy.py; `bulk_copy_out`); so are D's
rows (the ABI's alignment rule, which compiler.runtime enforces and which the vector stores of the other paths
need as well: there is no misaligned D to fall back for). An edge tile keeps the per-chunk loop of predicated
vector stores, run per m64 block (and column block) over the piece's 64 rows (as the fused epilogue on the
registers runs per piece before its staging, C and bias read at the tile's columns). Every
chunk loop of the copy-out (edge tiles; all tiles of the one-tile-per-CTA kernels) walks its items with a
(row, chunk) cursor stepped by additions (`chunk_cursor`): one division per tile instead of a div / rem by
the chunks per row (22 for 176 f16 columns; a float reciprocal sequence in SASS) per chunk.

Split-K (`split_k=S`, 2..64; DSL `schedule ... mma=wgmma split_k=S`). Each tile's K blocks are cut into S
slices, slice s taking blocks [s * nkb / S, (s + 1) * nkb / S) (sizes differ by at most one; a slice is
empty only when nkb < S and then contributes zeros); work item w = tile * S + slice, so the grid is
tiles x S (persistent CTAs walk the same items). Only slice 0 preloads C. After its mainloop every consumer
thread stores its accumulators (the slice's partial, f32 / s32) to the global `workspace` (one cta_m x
cta_n partial per batch, tile and slice, in v4 groups of the fragment order: coalesced), orders them
before the CTA's arrival (`fence.acq_rel.gpu`, `bar.sync 1`), and the first consumer thread arrives at the
tile's `semaphores` word with `atom.acq_rel.gpu.global.add.u32` (PTX ISA 8 memory consistency model:
release of this CTA's partial, acquire of the earlier ones), passing the old value to the others through a
shared word after the barriers. The CTA that saw S - 1 arrived last: it resets the semaphore
(`st.relaxed.gpu`, so the next launch needs no host zeroing), sums the S partials in slice order 0..S-1
(its own read back too: the sum does not depend on which slice came last, so D is bit-reproducible), runs
the epilogue and stores D; the others go on (next work item, or exit). No CTA waits for another, so any
launch order and residency works. The ABI's `scratch` gives both buffers' shapes; compiler.runtime
allocates them once per problem size (the semaphores zeroed).

Stream-K (`split_k=stream`; DSL `schedule ... mma=wgmma split_k=stream`, persistent whatever `persistent=`
says), with CUTLASS's data-parallel prefix. A batch's work is its W = T x nkb (tile, K block) iterations,
tile-major (t * nkb + kb, tiles in the raster order above). The grid is G = min(W, multiprocessors x
max_ctas_per_sm) per batch. All but the last full wave and the partial one go whole, as in a persistent
kernel: the first dp = (max(T / G, 1) - 1) G tiles, CTA c taking tiles c, c + G, .. (a wave of tiles next
to each other in the raster at a time, so their A and B panels are shared in L2). The other sk = T - dp =
min(T, T % G + G) tiles' W' = sk x nkb iterations, from S = dp x nkb on, are shared out: CTA c takes the
contiguous range [S + c Q + min(c, R), S + (c + 1) Q + min(c + 1, R)), Q = W' / G, R = W' % G, every CTA Q
or Q + 1 iterations (between one and two tiles' worth once T >= G; all W iterations when the tiles fill
less than a wave, the decode shapes). So the tail is balanced to the iteration, where a persistent kernel
of T = 11.05 G tiles runs 12 rounds, and the waves before it keep the raster's L2 reuse, which pure
stream-K over every tile lost (1.2-1.5x slower at 8192^3, docs/measurements.md: each CTA's range then spans
about 12 tiles, so the tiles in flight are 12 apart). A CTA walks its items in segments, one per tile it
touches (tile %t / nkb, K blocks [%t % nkb, the tile's or the range's end)); producer and consumers walk
the same segments and the ring's stage and phase carry across them as across persistent tiles; only the
segment from K block 0 preloads C. A segment that is a whole tile goes straight to the epilogue, every
data-parallel tile among them. Otherwise the tile is shared by the CTAs ca..cb whose ranges hold its first
and last K block, and the split-K fix-up above runs with two changes: the partial goes to a slot of the
CTA's own (at most two partial segments per CTA: only its first range segment can start inside a tile,
slot 2c + 1, and only its last can end inside one, slot 2c; the segments between are whole tiles), and the
CTA that sees cb - ca earlier arrivals at the tile's semaphore sums the slots 2ca, 2(ca + 1) + 1, ..,
2cb + 1: in K order, starting from zero, its own partial read back, so D is bit-reproducible for a problem
size and grid (the grid follows the device's SM count: another GPU may cut the tiles elsewhere and round
differently). CTA pairs (`cluster=2`) walk pair tiles and ranges of pair tiles (both CTAs of a pair the same
items, so their B halves and slot releases match; T, G and the ranges count pairs) and each CTA fixes up
its own half of a shared pair tile. Memory model as for split-K (PTX ISA chapter 8 "Memory Consistency
Model": the atom.add RMWs on one semaphore are morally strong and form a release sequence, so the last
arrival's acquire sees every earlier CTA's released partial; 9.7.13.5 atom .acq_rel .gpu; 9.7.13.4
fence.acq_rel.gpu orders each thread's partial stores before the CTA barrier and the arrival). No CTA
ever waits for another (the last arrival reduces; CUTLASS's fix-up CTA spins on its peers' flags
instead), so the kernel needs no co-residency guarantee: any launch order, batches beyond one wave, and
MPS or other kernels sharing the SMs are safe. Workspace: [batch, 2 G, cta_m x cta_n] partials, semaphores
[batch, tiles] (the ABI's `scratch`; compiler.runtime sizes G with the device's SM count).

Sparse operands (9.7.15.6). For the 2:4 forms (f16/bf16 .m64nNk32; e4m3/e5m2/s8/u8 .m64nNk64) and 1:2
tf32 (.m64nNk16), the compressed A of one instruction is 64 rows x 32 bytes in shared memory (a
K-major canonical layout exactly like a dense operand with half the K), and B is N rows x 64 bytes
(K-major: B^T rows). Metadata (9.7.15.6.2): "each warp in the warpgroup provides sparsity information
for 16 rows of matrix A" (warp %warpid % 4 = w: rows 16w..16w+15), and the per-lane register of a warp
is laid out exactly as for warp-level mma.sp of the same K: PTX draws the wgmma metadata figures with
the mma.sp images (Figure 176 = `sparse-mma-metadata-16832-f16bf16`, Figure 178 = `...-16816-tf32`,
Figures 180/181 = `...-16864-u8s8-*`), and the selector has the same meaning (sp-sel 0: threads T0,T1
of each quad, 1: T2,T3; 8-bit: 0 only; 9.7.15.6.1). So compiler/sparse.py's metadata layouts are read
as they are: warp w of consumer c, 64-row block j, k-step s takes a word of 16-row tile (c*wg_m + 64*j)/16
+ w. For 8-bit A that is word `lane` of the 32-lane layout ([M/16][K/k][32], every lane filled: all four
threads of a quad hold distinct words). For 16- and 32-bit A (f16, bf16, tf32) the words of lanes l and
l ^ 2 are always equal (one or two threads of a quad supply: fragments.compact_metadata_exact, derived from
fragments.metadata_slot), so the kernel takes the compact layout ([M/16][K/k][16], word j = lane
4*(j//2) + j%2's: 64 bytes a tile and k-step instead of 128, in global memory, the TMA box and the slot)
and lane l loads word 2*(l//4) + l%2 (threads 2 and 3 of a quad their twins', the same bits: right for
either selector). At 8192 x 8192 f16 that is 8 MB of metadata instead of 16 beside 64 MB of values. The
ABI's a_metadata shape ends in the words per step and, for the compact layout, lists its `lanes`.

Global layouts (those of compiler/sparse.py, read through three TMA tensor maps):
  a_values   compressed A, row-major M x Kv/2 elements, Kv = K rounded up to the instruction K
             (`sparse.compress_padded(...)[0]`)
  a_metadata uint32 [Mt/16][Kb/k][w] (`sparse.compress_padded(..., compact=w == 16)[1]`), w = 16 (f16, bf16,
             tf32: the compact layout) or 32 (8-bit A), Mt = M rounded up to whole CTA tiles (of a pair), Kb =
             K rounded up to whole K blocks; viewed as Mt/16 rows of Kb*w/k words
  b          B^T, N x K, K contiguous (`sparse.pack_b`), rows any multiple of 16 bytes apart
  c          (only with `accumulate_c`) row-major M x N of the accumulator type, rows `ldc` elements apart
  d          row-major M x N of `d_type`, rows `ldd` elements apart (ldc * bytes and ldd * bytes multiples
             of 16; every base 16-byte aligned)

Edges (any M, N, K >= 1). The grid covers ceil(M / cta_m) x ceil(N / cta_n) tiles and the K loop
ceil(K / cta_k) blocks. The tensor maps carry the true extents (M rows of A, N rows and K columns of B), so
the copy engine fills box elements outside them with zeros (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE): the
last tile row and column and the K tail multiply zeros. The metadata map is never read out of bounds:
the packer pads it to whole tiles and K blocks with the nibbles of all-zero chunks (legal ones; a
zero-filled word would be the invalid nibble 0b0000, PTX ISA 9.7.14.6.1). A consumer whose tile lies
inside D (m0 + cta_m <= M, n0 + cta_n <= N: a CTA-uniform branch) loads C and stores D exactly as
without edges; an edge tile predicates every C, bias and D access on row < M and column < N: staged
D per 16-byte chunk (one vector store where the chunk lies inside D, else element stores up to column
N), direct D per element.

Batches. Grid y is the batch index (%ctaid.y, <= 65535). The tensor maps are rank 3 (elements, rows,
batches; a box one batch deep, so each batch keeps its own zero-filled edges; their batch strides any
multiple of 16 bytes, set on the host); C and D of the batch are `batch_stride_c` / `batch_stride_d`
elements (u64 parameters) further on. The bias is shared. Rank-3 maps and grid y rather than the batch
folded into a 2-D map's rows: folded, the edge of M would read the next batch's rows instead of zeros
and the batches would have to be contiguous.
Tensor maps. The kernel takes its three 128-byte CUtensorMap objects (A values, B, metadata) by value,
in one 384-byte parameter `tensor_maps` (`.param .align 64 .b8 NAME_tensor_maps[384]`; the ABI's param of
type "bytes"), built on the host with cuTensorMapEncodeTiled from `tensor_map_specs(cfg)`
(`encode_tensor_maps` does it through the CUDA driver with ctypes). cp.async.bulk.tensor takes the generic
address of a map in .param, .const or .global space (PTX 9.7.9.25.5.1); the producer takes the
parameter's with `cvta.param` and prefetches the maps. A map in global memory, which the host writes
through the generic proxy (a copy), needs `fence.proxy.tensormap::generic.acquire` in every CTA before
its first use, and that fence is slow: measured on an H200 (session 9, docs/measurements.md "Tensor maps
as a parameter"), the three fences the producer issued cost about 2 us of every launch (8192x16x8192
e4m3: 12.0 against 10.1 us), a sixth of a decode GEMM. A parameter needs none.

Shared memory per ring slot (each region 1024-byte aligned, so the copy engine's address-based swizzle
equals the canonical layout and every descriptor's base offset is 0; 9.7.15.5.1.2.2):
  A: cta_m rows x 32*ksteps B, K-major, swizzle of that width (32B/64B/128B);
  B: cta_n rows x 64*ksteps B, K-major, 64B or 128B swizzle (ksteps = 4: two 128-byte K atoms);
  E: cta_m/16 runs of 4*w*ksteps B (the metadata words of one 16-row tile for the block's k-steps; w = 16 or
     32 words a k-step, "Sparse operands").
After the ring: 2 x stages mbarriers (full, then empty). The dynamic buffer is requested 1024 bytes
larger and its base rounded up to 1024 at run time.

`cluster_m = 2` (DSL: `schedule ... mma=wgmma cluster=2`): CTA pairs along M (`.reqnctapercluster 2, 1, 1`)
share the B tile: each CTA loads half of the B rows with `.multicast::cluster` into both CTAs (same slot
offsets, completing bytes on both full barriers), a slot's empty barrier counts the consumer warps of
both CTAs (each releases on both through `mapa` + `mbarrier.arrive.shared::cluster`), and the CTAs meet
at `barrier.cluster` after the barrier inits and before exit (no release may reach an exited CTA). Per CTA
and K block the L2 then delivers 8 + 16 + 1 KB instead of 8 + 32 + 1 (f16 128 x 256 x 64: A, B, compact
metadata).

What is checked where: tests/test_sparse_wgmma_kernel.py runs the emitted PTX text in a model of
mbarriers, TMA (with multicast and swizzle), wgmma.mma_async.sp, clusters and named barriers, with
copies and wgmma groups landing late, and catches deliberately broken kernels; ptxas for every form.
On an H100 (tests/gpu/test_sparse_wgmma_gpu.py, 15/15; benchmarks/sparse_wgmma.py): exact results for
f16, bf16, tf32, s8, u8 x s8 and e4m3 (f16/bf16/f32/s32 D, with and without C, pairs included).

Measurements (throughput against cuSPARSELt and cuBLAS): docs/measurements.md.
SASS: HGMMA.SP.64x256x32.F32 from shared-memory descriptors, UTMALDG.2D, SYNCS (mbarrier); 163-168
registers, no spills. With setmaxnreg ptxas reports the launch count (168, 128) and spills nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..bits import log2
from ..isa import bulk_copy, griddepcontrol
from ..isa.bulk_copy import ALIGN as BULK_ALIGN, size_problem
from ..diagnostics import SpecError
from ..isa.mma_sp.forms import SHAPE_M, Form
from ..isa.mma_sp.fragments import compact_metadata_exact, compact_metadata_word, metadata_lanes
from ..isa.setmaxnreg import RegisterSplit, split_registers
from ..isa.targets import (MAX_PTX, REGISTER_UNIT_PER_THREAD, REGISTERS_PER_SM, Version, dynamic_smem_limit,
                           format_version)
from ..isa.types import TYPES
from ..passes.epilogue_lowering import EpiloguePlan
from ..passes.limits import MAX_SCHEDULE_STAGES
from ..passes.resources import check_shared_memory
from ..spec import SPLIT_K_STREAM
from ..isa.wgmma import (MAX_ATOM_BYTES, PROMOTED_A_TYPES, SWIZZLE_FOR_ROW, WG_THREADS, WGMMA_M, WGMMA_SP_FORMS,
                         WGMMA_TARGET, WgmmaSpForm, required_ptx, wgmma_descriptor, wgmma_form_problem)
from . import epilogue
from .builder import HAND_SCHEDULED, PtxBuilder, bytes_param, launch_limits, require_kernel_name, target_lines
from .mma_sp_kernel import KernelPTX, abi_head
from .pipeline import MBARRIER_BYTES, PipelineState, RingCode, RingPlan
from .sparse_gemm_kernel import D_STORES, RingGeometry, SlotRegion, operand_buffers

# --------------------------------------------------------------------------------------------------
# Tables (the wgmma.mma_async.sp forms and the matrix descriptor are ISA facts: compiler/isa/wgmma.py)
# --------------------------------------------------------------------------------------------------

# CUDA driver API enums of cuTensorMapEncodeTiled (cuda.h: CUtensorMapDataType, CUtensorMapSwizzle,
# CUtensorMapL2promotion). The copy engine moves bytes; only the element width matters here.
TMA_DATA_TYPE = {8: 0, 16: 1, 32: 2}          # CU_TENSOR_MAP_DATA_TYPE_UINT8 / UINT16 / UINT32
TMA_SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
TMA_L2_PROMOTION_256B = 3
TMA_MAP_BYTES = 128                           # sizeof(CUtensorMap)
TMA_MAP_ALIGN = 64                            # a CUtensorMap's alignment (cuTensorMapEncodeTiled)
TMA_MAX_BOX = 256                             # boxDim[i] <= 256

A_STEP_ROW_BYTES = 32          # compressed A of one k-step: 64 rows x 32 B (module docstring)
B_STEP_ROW_BYTES = 64          # B of one k-step: N rows x 64 B
META_WORD_BYTES = 4            # one lane's `e` word; a (16-row tile, k-step) has cfg.meta_lanes of them
SMEM_ALIGN = 1024              # the 128-byte swizzle repeat: regions on it need base offset 0
CHUNK = 16                     # bytes of one vector store of the D copy-out
FLAG_BYTES = 16               # split-K: the "arrived last" word after the barriers (16: keeps what follows aligned)
MAX_SPLIT_K = 64               # slices per tile (the workspace grows with it; more buys nothing at 1 block each)
D_REGION_ALIGN = 128           # persistent CTAs' staged D region (16 would do for its v4 accesses)
MAX_CONSUMERS = 3              # consumer warpgroups: with the producer 512 threads, 128 registers each at launch
# Registers ptxas (CUDA 13.0) needs besides the accumulators, measured on this kernel's consumer path:
# - CONSUMER_OTHER_REGS: the consumer's descriptors, metadata, ring state and addresses. A budget of 32 beyond
#   the accumulators serialises the wgmma chain of 2 m64 blocks (ptxas info C7512: "wgmma.mma_async
#   instructions are serialized due to insufficient register resources": 192 accumulators in 224, 176 in 208,
#   208 in 240), 40 does not (192 in 232, 200 in 240, 176 in 216, 128 in 168).
# - WGMMA_OPERAND_REGS: one wgmma.mma_async.sp instruction must fit the kernel's launch count, whatever
#   setmaxnreg gives the consumers later (ptxas C7602 "Insufficient registers (128) to compile instruction
#   ... register target of 155 or higher" for an .m64n256k32 .f32 of 128 accumulators in a 512-thread CTA
#   whose consumers setmaxnreg.inc to 160): 155 - 128.
#   promote= doubles the accumulators and keeps the same rest (ptxas -v: 166 in all with promote=4 and 2 x 64
#   accumulators at 128 x 128, 384 threads).
# - EPILOGUE_OTHER_REGS: persistent CTAs with a staged D run the fused epilogue (C, bias, activation) on the
#   registers of a 128-row consumer's m64 blocks, one block per staging pass (stage_after_epilogue), the other
#   block's accumulators live: with the tile's accumulators ptxas (CUDA 13.0, the alpha + beta*C + row bias +
#   relu epilogue of tests/test_sparse_wgmma_sched.py SPILL_TILE) spills with 40 beyond them (100 B: 128 in
#   168; 164 B: 200 in 240), 47 (32 B: 208 in 255) and 48 (40 B: 192 in 240), not with 56 (112 in 168), 63
#   (192 in 255), 64 (104 in 168, 176 in 240), 72, 80, 95 or 112. (Both blocks' epilogues before one staging
#   pass spilled up to 96: 20-280 B at 128 x 160 .. 256 x 160.) One m64 block per warpgroup needs no more than
#   the main loop (128 in 168) unless the epilogue reads C (beta*C, `c == "epilogue"`): then
#   EPILOGUE_C_OTHER_REGS. Measured on 2 x 64-row consumers (CUDA 13.0, 384 threads, 168 a thread; alpha, beta,
#   C, a row or column bias, relu; beta and C alone; alpha and beta with C): 8-24 B spilled at N = 256 (128
#   accumulators) with whole rows at 3 stages, 32-36 B in column blocks at 4 stages; none at N = 160 .. 240
#   (120 accumulators in 168: 48 beyond them are enough), none at N = 256 without C (alpha, a column bias and
#   relu) or with C preloaded into the accumulators, and none at N = 256 with setmaxnreg's 240.
# - STREAM_K_EXTRA_REGS: stream-K's consumers also keep their range's state (segment end, first K block, the
#   tile's sharers), the workspace addresses and the C / D batch offsets live across the tile loop: at the 168
#   of a 384-thread launch ptxas spills 4-48 B with 128 accumulators (128 x 256 and 256 x 128; f32 or f16 D,
#   with or without C, CTA pairs; which of them spill depends on stages and C) and 4-12 B with 120 in two
#   m64 blocks (256 x 120), not with 112 (256 x 112, 128 x 224) or 120 in one block (128 x 240). setmaxnreg
#   (240) moves the spill, it does not remove it (8 B, a 64-bit value reloaded in the main loop, in some of
#   the same configurations), and holding fewer values live (the batch offsets recomputed at their use) only
#   moves it into the main loop: the spill is the range state beside 128 accumulators, not a codegen
#   slip. spill_note reports it.
CONSUMER_OTHER_REGS = 40
WGMMA_OPERAND_REGS = 27
EPILOGUE_OTHER_REGS = 56
EPILOGUE_C_OTHER_REGS = 48
STREAM_K_EXTRA_REGS = 16


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# --------------------------------------------------------------------------------------------------
# Configuration and geometry (pure integers: used by the emitter and by the tests' numpy model)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Region(SlotRegion):
    """A SlotRegion of K-major rows in the canonical layout of `layout` (compiler/layout.py; its K atoms
    hold `atom_bytes` of a row)."""
    swizzle: str

    @property
    def atom_bytes(self) -> int:
        return min(self.row_bytes, MAX_ATOM_BYTES) if self.swizzle != "none" else self.row_bytes


@dataclass(frozen=True)
class TmaBox:
    """One `cp.async.bulk.tensor.3d` per K block: `tensor` (0 = A values, 1 = B, 2 = metadata), box of
    `inner` elements x `outer` rows written at slot offset `offset`; the box's coordinates for K block
    kb of tile (m0, n0) are (kb * x_per_block + x0, y_of_tile)."""
    tensor: int
    offset: int
    inner: int
    outer: int
    x_per_block: int
    x0: int
    y_source: str           # "m0" | "n0" | "m0/16"
    multicast: bool = False  # cluster_m = 2: the box is this CTA's half of B, written to both CTAs
    rank_offset: int = 0    # bytes added to `offset` per cluster rank (the half's place in the region)
    rank_rows: int = 0      # rows added to the y coordinate per cluster rank


@dataclass(frozen=True)
class TensorMapSpec:
    """Arguments of cuTensorMapEncodeTiled for one operand, as functions of the problem size."""
    operand: str            # ABI buffer name
    elem_bits: int
    swizzle: str
    box: tuple[int, int]    # (inner elements, outer rows)


@dataclass(frozen=True)
class SparseWgmmaConfig(RingGeometry):
    name: str
    form: Form
    target: str = WGMMA_TARGET
    cta_m: int = 128
    cta_n: int = 256
    cta_k: int = 64
    consumers: int = 2                   # consumer warpgroups (1, 2 or 3)
    stages: int = 4
    selector: int = 0
    ptx_version: Version | None = None   # None: the lowest version every instruction needs
    accumulate_c: bool = True            # D = A*B + C; False: D = A*B and no `c` parameter
    d_type: str | None = None            # None: the accumulator type; f16 / bf16 for float forms
    raster_group: int = 8                # CTA rows along M walked together (L2 reuse)
    stage_d: bool = True                 # D through shared memory (coalesced stores) when it fits
    cluster_m: int = 1                   # 2: CTA pairs along M share B (each loads half, multicast to both)
    epilogue: EpiloguePlan | None = None # the DSL's epilogue (tilec.epilogue_plan): applied before D is stored
    persistent: bool = False             # static persistent CTAs: each walks tiles ctaid.x, += nctaid.x
    split_k: int | str = 1               # K slices per output tile (one CTA each; f32/s32 partials, reduced),
                                         # or SPLIT_K_STREAM: stream-K (persistent CTAs, even shares of K blocks)
    promote: int | None = None           # fp8: every N K blocks %acc is added into %pacc (f32) and restarts
    # setmaxnreg (PTX 9.7.19): the producer warpgroup gives registers to the consumers. None: where the
    # consumers need more than the launch count (uses_setmaxnreg); True / False: always / never
    setmaxnreg: bool | None = None

    # -- derived ------------------------------------------------------------------------------------
    @property
    def stream_k(self) -> bool:
        """Stream-K (`split_k=stream`): each persistent CTA walks an equal contiguous range of the batch's
        (tile, K block) iterations (module docstring)."""
        return self.split_k == SPLIT_K_STREAM

    @property
    def sliced(self) -> bool:
        """split_k=S with S >= 2: S fixed K slices per tile."""
        return not self.stream_k and _is_int(self.split_k) and self.split_k > 1

    @property
    def reduces(self) -> bool:
        """Partial tiles go through the `workspace` and a per-tile semaphore (split-K or stream-K)."""
        return self.sliced or self.stream_k

    @property
    def wg_form(self) -> WgmmaSpForm:
        return WGMMA_SP_FORMS[self.form.a_type]

    @property
    def threads(self) -> int:
        return WG_THREADS * (1 + self.consumers)

    @property
    def wg_m(self) -> int:
        return self.cta_m // self.consumers

    @property
    def m_blocks(self) -> int:
        """wgmma instructions along M per consumer and k-step."""
        return self.wg_m // WGMMA_M

    @property
    def acc_per_block(self) -> int:
        """Accumulator registers of one m64nN instruction per thread (64 * N / 128)."""
        return self.cta_n // 2

    @property
    def accumulators(self) -> int:
        return self.m_blocks * self.acc_per_block

    @property
    def storage_bits(self) -> int:
        return self.form.layout.storage_bits

    @cached_property
    def meta_lanes(self) -> tuple[int, ...]:
        """The lanes whose metadata words a_metadata keeps per (16-row tile, k-step): the compact 16 where
        every lane's word equals lane ^ 2's (fragments.compact_metadata_exact: 16- and 32-bit A), else all
        32 (8-bit A). Module docstring, "Sparse operands"."""
        return metadata_lanes(self.form.layout, compact_metadata_exact(self.form.layout))

    @property
    def compact_metadata(self) -> bool:
        return len(self.meta_lanes) < 32

    @property
    def meta_step_bytes(self) -> int:
        """Bytes of one (16-row tile, k-step) of metadata: 64 compact, 128 with all 32 lanes."""
        return META_WORD_BYTES * len(self.meta_lanes)

    def meta_word(self, lane: int) -> int:
        """The word of a (16-row tile, k-step) that `lane` loads: its own, or (compact) its twin's."""
        return compact_metadata_word(lane) if self.compact_metadata else lane

    @property
    def out_type(self) -> str:
        return self.d_type or self.wg_form.acc_type

    @property
    def acc_type(self) -> str:
        return self.wg_form.acc_type

    @property
    def preload_c(self) -> bool:
        """C enters the accumulators before the first MMA (which adds it), not in the epilogue."""
        return self.accumulate_c and (self.epilogue is None or self.epilogue.c == "accumulate")

    @cached_property
    def regions(self) -> dict[str, Region]:
        ks = self.ksteps
        a_row, b_row = A_STEP_ROW_BYTES * ks, B_STEP_ROW_BYTES * ks
        a = Region("A", self.cta_m, a_row, 0, SWIZZLE_FOR_ROW[min(a_row, MAX_ATOM_BYTES)])
        b_off = _align(a.bytes, SMEM_ALIGN)
        b = Region("B", self.cta_n, b_row, b_off, SWIZZLE_FOR_ROW[min(b_row, MAX_ATOM_BYTES)])
        e_off = _align(b_off + b.bytes, SMEM_ALIGN)
        e = Region("E", self.cta_m // SHAPE_M, self.meta_step_bytes * ks, e_off, "none")
        return {"A": a, "B": b, "E": e}

    @cached_property          # tilec tune checks tens of thousands of configurations
    def stage_bytes(self) -> int:
        e = self.regions["E"]
        return _align(e.offset + e.bytes, SMEM_ALIGN)

    @property
    def stage_tx_bytes(self) -> int:
        """Bytes the copy engine delivers per K block (the full barrier's transaction count)."""
        return self.region_bytes

    @property
    def barrier_offset(self) -> int:
        return self.ring_bytes

    @property
    def flag_offset(self) -> int:
        """split-K: the shared word (after the barriers) through which the first consumer thread tells the
        others whether this CTA arrived last at its tile's semaphore."""
        return self.ring.bytes

    @property
    def ring_tail(self) -> int:
        """Ring base -> the end of the ring, its barriers and the split-K flag word."""
        return self.ring.bytes + (FLAG_BYTES if self.reduces else 0)

    @property
    def d_offset(self) -> int:
        """Offset of the staged D tile from the ring base: the drained ring (one tile per CTA), or, for
        persistent CTAs, a region of its own after the barriers (the producer refills the ring with the
        next tile's K blocks while the consumers store this one's D)."""
        return _align(self.ring_tail, D_REGION_ALIGN) if self.persistent else 0

    @property
    def partial_bytes(self) -> int:
        """split-K: bytes of one slice's partial tile in the workspace (cta_m x cta_n accumulators)."""
        return self.cta_m * self.cta_n * TYPES[self.acc_type].bits // 8

    @property
    def stream_limits(self) -> list[str]:
        """Stream-K's u32 quantities: the iteration index (tile * K blocks + block) up to one tile past the
        last (a segment's end is min(range end, (tile + 1) * K blocks)) and, in stream_owner, an index plus
        Q G - R <= W: below 2^31 keeps both u32; the semaphore index batch * tiles + tile."""
        return [f"(tiles + 1) * ((K + {self.cta_k - 1}) // {self.cta_k}) < {1 << 31}", f"batch * tiles < {1 << 32}"]

    @property
    def d_block_rows(self) -> int:
        """Rows of a consumer warpgroup staged at a time: persistent CTAs stage and copy out one m64 block (one
        wgmma's accumulators, WGMMA_M rows) at a time through a region of WGMMA_M rows per warpgroup (a 128-row
        warpgroup's two blocks in turn: half the region, so a deeper ring fits beside it); the drained ring of
        a one-tile-per-CTA kernel holds the warpgroup's wg_m rows at once."""
        return WGMMA_M if self.persistent else self.wg_m

    @property
    def d_region_bytes(self) -> int:
        """Shared bytes of the persistent CTAs' own staged-D region (0: none): consumers x d_block_rows rows of
        d_pitch (= cta_m x d_pitch where a warpgroup has one m64 block; d_pitch is a column block's row
        piece + 16 where whole rows do not fit: d_col_blocks)."""
        return self.consumers * self.d_block_rows * self.d_pitch if self.persistent and self.staged_d else 0

    @property
    def d_staged_bytes(self) -> int:
        """Bytes of one staged D element: the raw accumulator where the epilogue runs in the copy-out, else D's."""
        return TYPES[self.acc_type if self.epilogue_in_copy_out else self.out_type].bits // 8

    def d_piece_problem(self, blocks: int) -> str | None:
        """Why the staged rows cannot be cut into `blocks` column blocks, or None. A block's columns are a
        multiple of 8, so no accumulator pair (columns 8*(i>>2) + 2*(lane%4) + (i&1), Figure 149,
        9.7.15.5.1.1.1) straddles two blocks, and its row piece is a multiple of 16 bytes, as the copy-out's
        16-byte chunks and one cp.async.bulk per row piece need (compiler/isa/bulk_copy.py)."""
        if blocks < 1 or self.cta_n % blocks:
            return f"{self.cta_n} columns do not split into {blocks} equal blocks"
        cols = self.cta_n // blocks
        if blocks > 1 and cols % 8:
            return f"{cols} columns a block: no multiple of 8 (an accumulator pair would straddle two blocks)"
        if blocks > 1 and size_problem(cols * self.d_staged_bytes):
            return f"a row piece of {cols * self.d_staged_bytes} B: {size_problem(cols * self.d_staged_bytes)}"
        return None

    def d_region_for(self, blocks: int) -> int:
        """Bytes of a persistent staged-D region of `blocks` column blocks: consumers x d_block_rows rows of
        (cta_n / blocks x bytes + 16)."""
        return self.consumers * self.d_block_rows * (self.cta_n // blocks * self.d_staged_bytes + 16)

    @cached_property          # tilec tune checks tens of thousands of configurations
    def d_col_blocks(self) -> int:
        """h: the staged D rows are cut into h column blocks of cta_n / h columns, each warpgroup staging and
        copying out its (m64 block, column block) pieces in turn through a region of consumers x 64 rows x
        (cta_n / h x bytes + 16). Persistent CTAs take the smallest h of 1, 2, 4, .. whose pieces are legal
        (d_piece_problem) and whose region fits beside the ring (128 x 256 with bf16 D: whole rows, 2 x 64 x
        528 = 67584 B, do not fit beside 4 stages of 43008 B; h = 2, 2 x 64 x 272 = 34816 B, does); 0 where
        none fits (D stored from the fragments). One tile per CTA: 1 (the drained ring holds the whole tile,
        or D is stored from the fragments)."""
        if not self.persistent:
            return 1
        blocks = 1
        while blocks <= self.cta_n // 8:
            if self.d_piece_problem(blocks) is None and \
                    SMEM_ALIGN + self.d_offset + self.d_region_for(blocks) <= self.smem_limit:
                return blocks
            blocks *= 2
        return 0

    @property
    def d_piece_cols(self) -> int:
        """Columns of one staged column block (cta_n where whole rows are staged)."""
        return self.cta_n // max(self.d_col_blocks, 1)

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory to request: alignment slack + ring + 2 x stages mbarriers (+ the staged
        D region of persistent CTAs)."""
        if self.d_region_bytes:
            return SMEM_ALIGN + self.d_offset + self.d_region_bytes
        return SMEM_ALIGN + self.ring_tail

    @cached_property          # tilec tune checks tens of thousands of configurations
    def ring(self) -> RingPlan:
        """The smem ring (compiler/ptx/pipeline.py): full[s] completes on the producer's expect_tx and the
        slot's bytes; empty[s] on one arrival per consumer warp of each CTA that reads the slot (a CTA
        pair: both CTAs' consumers release the B half each loaded into both)."""
        return RingPlan(stages=self.stages, stage_bytes=self.stage_bytes, tx_bytes=self.stage_tx_bytes,
                        full_arrivals=1, empty_arrivals=4 * self.consumers * self.cluster_m,
                        barrier_offset=self.ring_bytes)

    @property
    def smem_limit(self) -> int:
        return dynamic_smem_limit(self.target)

    @property
    def d_pitch(self) -> int:
        """Row pitch of the staged D tile: 16 bytes of padding, so the 8 rows g of a fragment store
        (lanes 4g+t at column 2t) start 4 banks apart and a warp's 32 words hit 32 banks. With an
        epilogue the raw accumulators are staged (it runs in the copy-out, with no accumulator live), except
        in persistent CTAs: they run it in registers and stage D's type (a smaller region of their own), in
        column blocks where whole rows do not fit (d_col_blocks: the pitch is then a block's row piece + 16)."""
        return self.d_piece_cols * self.d_staged_bytes + 16

    @property
    def epilogue_in_copy_out(self) -> bool:
        """The fused epilogue runs in the staged copy-out (one tile per CTA: the drained ring holds the raw
        accumulators), not on the registers before staging (persistent CTAs)."""
        return self.epilogue is not None and not self.persistent

    @property
    def staged_d(self) -> bool:
        """D through shared memory: in the drained ring where the tile fits it, or (persistent CTAs) in a
        region of its own where ring + region fit the target's shared memory; else direct fragment stores.
        Persistent CTAs with a 1-byte D (the epilogue packs it: epilogue.pack) store it from the fragments: their
        staging writes D's type from the registers pair by pair, and a packed byte pair has no such store
        (the staged 1-byte copy-out, epilogue.byte_chunk, packs raw f32 / s32 accumulators of the drained ring)."""
        if not self.stage_d:
            return False
        if self.persistent and self.epilogue is not None and self.epilogue.packs:
            return False
        if self.persistent:
            return self.d_col_blocks > 0
        return self.cta_m * self.d_pitch <= self.ring_bytes

    @property
    def bulk_copy_out(self) -> bool:
        """Persistent CTAs with a staged D copy an interior tile's rows out with one asynchronous bulk copy
        per row, or per row piece of a column block (cp.async.bulk.global.shared::cta.bulk_group, PTX
        9.7.9.25.4.1): a row piece of d_piece_cols elements of D is a multiple of 16 bytes, and so are the
        region's base (D_REGION_ALIGN) and pitch, so every staged piece starts 16-byte aligned, as its place in
        D does (the ABI: ldd * bytes a multiple of 16, D 16-byte aligned; a block's columns start a multiple of
        16 bytes into the row)."""
        row = self.d_piece_cols * TYPES[self.out_type].bits // 8
        return (self.persistent and self.staged_d and not self.epilogue_in_copy_out and size_problem(row) is None
                and self.d_pitch % BULK_ALIGN == 0 and self.d_offset % BULK_ALIGN == 0)

    @property
    def max_regs(self) -> int:
        """Registers per thread at launch (the kernel's .maxnreg) that let one CTA fit the SM's register file
        (allocated in units of 8 a thread)."""
        return min(255, REGISTERS_PER_SM // self.threads // REGISTER_UNIT_PER_THREAD * REGISTER_UNIT_PER_THREAD)

    @property
    def consumer_registers(self) -> int:
        """Registers a consumer thread needs: its accumulators (twice with promote=: the f32 sums %pacc) +
        CONSUMER_OTHER_REGS (measured)."""
        return (2 if self.promote is not None else 1) * self.accumulators + CONSUMER_OTHER_REGS

    @property
    def epilogue_registers(self) -> int:
        """Registers a consumer thread needs in a fused epilogue that runs on the registers of its m64 blocks
        (one a staging pass, 2 blocks live) before staging D (persistent CTAs; EPILOGUE_OTHER_REGS, measured),
        or of its one m64 block where the epilogue reads C (EPILOGUE_C_OTHER_REGS, measured); 0 where no such
        epilogue runs or it needs no more than the main loop."""
        ep = self.epilogue
        on_registers = ep is not None and self.persistent and self.staged_d and bool(ep.element_steps)
        if on_registers and self.m_blocks > 1:
            return self.accumulators + EPILOGUE_OTHER_REGS
        if on_registers and ep.c == "epilogue":
            return self.accumulators + EPILOGUE_C_OTHER_REGS
        return 0

    @property
    def spill_note(self) -> tuple[str, str] | None:
        """(why, what to do) where ptxas (CUDA 13.0) may spill this kernel's consumers to local memory, or
        None. Measured (tests/test_sparse_wgmma_sched.py SPILL_PRONE): stream-K with the range state beside
        about 120 or more accumulators (STREAM_K_EXTRA_REGS above; setmaxnreg moves the spill, it does not
        remove it), and a persistent staged epilogue on the registers of 2 m64 blocks whose need passes the
        consumers' budget (setmaxnreg's count, or the launch count; EPILOGUE_OTHER_REGS above: 40 B at 256 x 192
        and 164 B at 256 x 200 with setmaxnreg's 240, 32 B at 128 x 208 with one consumer warpgroup of 255,
        whose count no setmaxnreg can raise; "may": a lighter epilogue than alpha, beta, C and a row bias
        needs fewer). Not an
        error: D is right and a few bytes a tile cost little next to its wgmma work; a warning that names
        the way out."""
        if self.stream_k and self.consumer_registers + STREAM_K_EXTRA_REGS > self.max_regs:
            return (f"stream-K keeps each consumer thread's range state beside its {self.accumulators} "
                    f"accumulators: {self.consumer_registers} + {STREAM_K_EXTRA_REGS} registers, over the "
                    f"{self.max_regs} of the launch, and ptxas may spill a few bytes a tile (4-48 B measured "
                    f"at 128 x 256 and 256 x 128)",
                    "use cta N <= 224 with 64-row consumer warpgroups, or N <= 112 with 128-row ones")
        if self.epilogue_registers > self.consumer_budget and self.m_blocks > 1:
            return (f"the fused epilogue runs on the registers of a 128-row consumer warpgroup's m64 blocks before "
                    f"each is staged (persistent CTAs): about {self.epilogue_registers} registers a thread "
                    f"({self.accumulators} accumulators + {EPILOGUE_OTHER_REGS}), over the {self.consumer_budget} "
                    f"the consumers have, and ptxas may spill (32-164 B a tile measured at N >= 192)",
                    "use 64-row consumer warpgroups (cta M = 64 x warpgroups), or persistent=none")
        if self.epilogue_registers > self.consumer_budget:
            return (f"the fused epilogue reads C beside a 64-row consumer warpgroup's accumulators before staging D "
                    f"(persistent CTAs): about {self.epilogue_registers} registers a thread ({self.accumulators} "
                    f"accumulators + {EPILOGUE_C_OTHER_REGS}), over the {self.consumer_budget} the consumers have, "
                    f"and ptxas may spill (8-36 B a tile measured at N = 256 in 168)",
                    "use a narrower CTA tile (cta N), or persistent=none")
        return None

    @property
    def uses_setmaxnreg(self) -> bool:
        """The producer hands registers to the consumers: asked for, or (None) needed because the consumers'
        registers (main loop, or the fused epilogue on the registers) exceed the launch count. The epilogue's
        need only turns setmaxnreg on (where even its budget is short ptxas spills a few bytes there);
        the main loop's is a limit (check_registers)."""
        if self.setmaxnreg is None:
            if self.consumer_registers > self.max_regs:
                return True
            if self.epilogue_registers <= self.max_regs:
                return False
            # the epilogue's need: only where a legal split gives the consumers more than the launch count
            # (one consumer warpgroup of a 256-thread CTA launches with 255, which no split can raise:
            # setmaxnreg there was a refusal of a kernel that only spills a little; spill_note says so)
            split = split_registers(self.max_regs, 1, self.consumers)
            return not split.problems() and split.high > self.max_regs
        return bool(self.setmaxnreg)

    @property
    def register_split(self) -> RegisterSplit | None:
        """The setmaxnreg counts (None: every warp keeps the launch count): the consumers take the most the
        CTA's registers allow with the producer warpgroup at the least (compiler/isa/setmaxnreg.py)."""
        if not self.uses_setmaxnreg:
            return None
        return split_registers(self.max_regs, 1, self.consumers)

    @property
    def consumer_budget(self) -> int:
        """Registers a consumer thread may use: setmaxnreg's count, or the launch count."""
        split = self.register_split
        return split.high if split is not None else self.max_regs


def layouts(cfg: SparseWgmmaConfig):
    """compiler/layout.py canonical layouts of the A and B regions (K-major, the region's swizzle)."""
    from ..layout import canonical_layout
    dtype = _storage_dtype(cfg)
    ra, rb = cfg.regions["A"], cfg.regions["B"]
    bits = cfg.storage_bits
    return (canonical_layout(dtype, "K", ra.swizzle, ra.rows, ra.row_bytes * 8 // bits),
            canonical_layout(dtype, "K", rb.swizzle, rb.rows, rb.row_bytes * 8 // bits))


def _storage_dtype(cfg: SparseWgmmaConfig) -> str:
    """A TYPES name with the storage width (canonical_layout only needs the width)."""
    return {16: "f16", 32: "tf32", 8: "s8"}[cfg.storage_bits]


def tma_boxes(cfg: SparseWgmmaConfig) -> list[TmaBox]:
    """The copies of one K block (module docstring: one box per operand, B in 128-byte K atoms)."""
    eb = cfg.storage_bits // 8
    ra, rb, re = (cfg.regions[x] for x in "ABE")
    boxes = [TmaBox(0, ra.offset, ra.row_bytes // eb, ra.rows, ra.row_bytes // eb, 0, "m0")]
    atoms = rb.row_bytes // rb.atom_bytes
    rows = rb.rows // cfg.cluster_m                 # with a CTA pair: this CTA's half of the B rows
    for j in range(atoms):           # K atom j of B: the next 128 bytes of every row, cta_n rows further
        boxes.append(TmaBox(1, rb.offset + j * rb.rows * rb.atom_bytes, rb.atom_bytes // eb, rows,
                            cfg.cta_k, j * rb.atom_bytes // eb, "n0", multicast=cfg.cluster_m > 1,
                            rank_offset=rows * rb.atom_bytes, rank_rows=rows))
    boxes.append(TmaBox(2, re.offset, re.row_bytes // META_WORD_BYTES, re.rows, cfg.ksteps * len(cfg.meta_lanes), 0,
                        "m0/16"))
    return boxes


def tensor_map_specs(cfg: SparseWgmmaConfig) -> list[TensorMapSpec]:
    """The three tensor maps, in their order in the kernel's `tensor_maps` parameter."""
    boxes = tma_boxes(cfg)
    b_box = next(b for b in boxes if b.tensor == 1)
    return [TensorMapSpec("a_values", cfg.storage_bits, cfg.regions["A"].swizzle, (boxes[0].inner, boxes[0].outer)),
            TensorMapSpec("b", cfg.storage_bits, cfg.regions["B"].swizzle, (b_box.inner, b_box.outer)),
            TensorMapSpec("a_metadata", 32, "none", (boxes[-1].inner, boxes[-1].outer))]


def descriptor_base(cfg: SparseWgmmaConfig, operand: str) -> int:
    """Descriptor of the operand region of slot 0 at shared address 0: LBO, SBO and swizzle fixed,
    the start address added at run time (slot base + region offset + row block + k-step)."""
    lay = layouts(cfg)["AB".index(operand)]
    return wgmma_descriptor(0, lay.lbo, lay.sbo, cfg.regions[operand].swizzle)


def descriptor_offset(cfg: SparseWgmmaConfig, operand: str, row0: int, kstep: int) -> int:
    """Byte offset (within a slot) of the start address of `operand`'s k-step `kstep` from row `row0`
    (a multiple of 8): the region offset + the canonical layout's offset of (row0, k-step start)."""
    lay = layouts(cfg)["AB".index(operand)]
    step_elems = (A_STEP_ROW_BYTES if operand == "A" else B_STEP_ROW_BYTES) * 8 // cfg.storage_bits
    if row0 % 8:
        raise ValueError(row0)
    return cfg.regions[operand].offset + lay.offset(row0, 0) + lay.k_step_start(kstep * step_elems)


def metadata_offset(cfg: SparseWgmmaConfig, consumer: int, m_block: int, warp: int, kstep: int, lane: int) -> int:
    """Slot offset of the metadata word of (consumer, 64-row block, warp, k-step, lane): word
    cfg.meta_word(lane) of 16-row tile (consumer*wg_m + 64*m_block)/16 + warp (9.7.15.6.2: warp w supplies
    rows 16w..16w+15)."""
    re = cfg.regions["E"]
    tile = (consumer * cfg.wg_m + WGMMA_M * m_block) // SHAPE_M + warp
    return re.offset + tile * re.row_bytes + kstep * cfg.meta_step_bytes + META_WORD_BYTES * cfg.meta_word(lane)


def wgmma_opcode(cfg: SparseWgmmaConfig) -> str:
    """The kernel's instruction: one m64nNk wgmma.mma_async.sp over the whole CTA N (PTX 9.7.15.6.3)."""
    f = cfg.form
    return (f"wgmma.mma_async.sp.sync.aligned.m{WGMMA_M}n{cfg.cta_n}k{cfg.wg_form.k}"
            f".{cfg.acc_type}.{f.a_type}.{f.b_type}")


def fragment_coord(i: int, warp: int, lane: int) -> tuple[int, int]:
    """(row, column) within a 64 x N block of accumulator register i of thread (warp, lane): PTX
    9.7.15.5.1.1.1 Figure 149 (f32/s32 D of .m64nNk*)."""
    return 16 * warp + lane // 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


def check_registers(cfg: SparseWgmmaConfig) -> None:
    """The register budgets: one wgmma instruction within the launch count (ptxas compiles it there,
    whatever setmaxnreg gives later), the consumer's accumulators and the rest within its budget (the launch
    count, or setmaxnreg's), and a legal setmaxnreg split (PTX 9.7.19; compiler/isa/setmaxnreg.py)."""
    launch = cfg.max_regs
    one = cfg.acc_per_block + WGMMA_OPERAND_REGS
    where = f"{cfg.consumers} consumer warpgroup{'s' if cfg.consumers > 1 else ''} of {cfg.wg_m} x {cfg.cta_n}"
    if one > launch:
        # the largest N whose instruction fits: acc_per_block = N / 2, N a multiple of 8
        n_fit = (launch - WGMMA_OPERAND_REGS) * 2 // 8 * 8
        raise SpecError(f"{cfg.threads} threads launch with {launch} registers a thread, and ptxas compiles each "
                        f"wgmma.mma_async.sp .m64n{cfg.cta_n} ({cfg.acc_per_block} accumulators) within that count "
                        f"(it needs {one}; setmaxnreg raises the consumers' count only after launch)",
                        field="schedule.cta", hint=f"use cta N <= {n_fit} with {cfg.consumers} consumer warpgroups, "
                                                   "or fewer warpgroups")
    split = cfg.register_split
    if split is not None and split.problems():
        raise SpecError(f"setmaxnreg with {where}: " + "; ".join(split.problems()), field="schedule.warps",
                        hint="use fewer consumer warpgroups")
    if cfg.setmaxnreg is False and cfg.consumer_registers > launch:
        raise SpecError(f"{where} need {cfg.consumer_registers} registers a thread ({cfg.accumulators} "
                        f"accumulators + {CONSUMER_OTHER_REGS}), over the {launch} of a {cfg.threads}-thread launch; "
                        f"only setmaxnreg (PTX 9.7.19) gives the consumers more", field="schedule.warps",
                        hint="leave setmaxnreg to the kernel")
    if cfg.consumer_registers > cfg.consumer_budget:
        how = f"setmaxnreg.inc {split.high}" if split is not None else f"the {launch} of a {cfg.threads}-thread launch"
        raise SpecError(f"{where} need {cfg.consumer_registers} registers a thread ({cfg.accumulators} "
                        f"accumulators + {CONSUMER_OTHER_REGS}); {how} is the most they can have"
                        + (f" ({split.describe('producer', 'consumer')})" if split is not None else ""), field="schedule.cta",
                        hint="use a smaller cta N, or fewer rows per consumer warpgroup")


def check_config(cfg: SparseWgmmaConfig) -> Version:
    """Validate `cfg`; return the PTX version to emit. SpecError names the schedule field."""
    form = cfg.form
    require_kernel_name(cfg.name)
    problem = wgmma_form_problem(form)
    if problem:
        raise problem
    wf = WGMMA_SP_FORMS[form.a_type]
    if cfg.target != WGMMA_TARGET:
        raise SpecError(f"wgmma.mma_async.sp requires {WGMMA_TARGET}, not {cfg.target} (PTX 9.7.15.6.3 target "
                        f"notes)", field="schedule.mma", hint="write 'target sm_90a;' or use mma=sync")
    for what, v in (("stages", cfg.stages), ("consumers", cfg.consumers), ("raster_group", cfg.raster_group),
                    ("cta_m", cfg.cta_m), ("cta_n", cfg.cta_n), ("cta_k", cfg.cta_k)):
        if not _is_int(v) or v < 1:
            raise SpecError(f"schedule {what} must be a positive integer, not {v!r}", field="schedule")
    if not 1 <= cfg.consumers <= MAX_CONSUMERS:
        raise SpecError(f"the wgmma kernel has 1 to {MAX_CONSUMERS} consumer warpgroups (warps=4x1, 8x1 or "
                        f"12x1), not {cfg.consumers}", field="schedule.warps", hint="write warps=8x1")
    if cfg.wg_m not in (WGMMA_M, 2 * WGMMA_M) or cfg.cta_m != cfg.wg_m * cfg.consumers:
        raise SpecError(f"cta M = {cfg.cta_m}: each of the {cfg.consumers} consumer warpgroups takes 64 or 128 "
                        f"rows (1 or 2 .m64 instructions)", field="schedule.cta",
                        hint=f"use cta M = {64 * cfg.consumers} or {128 * cfg.consumers}")
    if cfg.setmaxnreg not in (None, True, False):
        raise SpecError(f"setmaxnreg must be None, True or False, not {cfg.setmaxnreg!r}", field="schedule")
    if cfg.cta_n not in wf.n_values:
        raise SpecError(f"cta N = {cfg.cta_n} is not an N of wgmma.mma_async.sp .m64nNk{wf.k} with "
                        f"{form.a_type} (PTX 9.7.15.6.3 .shape)", field="schedule.cta",
                        hint=wf.describe_n())
    if cfg.cta_k % form.k or cfg.ksteps not in (1, 2, 4):
        raise SpecError(f"cta K = {cfg.cta_k} must be {form.k}, {2 * form.k} or {4 * form.k} (1, 2 or 4 wgmma "
                        f"k-steps: a compressed A row of 32, 64 or 128 bytes, one swizzle atom)",
                        field="schedule.cta", hint=f"cta K = {2 * form.k}")
    if cfg.promote is not None:          # before check_registers: the doubled accumulators are promote='s
        if form.a_type not in PROMOTED_A_TYPES or not _is_int(cfg.promote) or cfg.promote < 1:
            raise SpecError(f"promote={cfg.promote}: the two-level accumulation takes fp8 A "
                            f"({' / '.join(PROMOTED_A_TYPES)}) and N >= 1 K blocks", field="schedule.promote")
        if cfg.consumer_registers > cfg.consumer_budget:
            split = cfg.register_split
            has = f"setmaxnreg.inc {split.high}" if split is not None else f".maxnreg {cfg.max_regs}"
            raise SpecError(f"promote= doubles the accumulators: {cfg.wg_m} x {cfg.cta_n} per consumer warpgroup "
                            f"needs 2 x {cfg.accumulators} f32 registers per thread, and a consumer thread has at "
                            f"most {cfg.consumer_budget} ({has}, {cfg.threads} threads) with some "
                            f"{CONSUMER_OTHER_REGS} for the rest", field="schedule.promote",
                            hint="use cta=128x128x128 warps=8x1 (2 x 64 accumulators), or drop promote=")
    check_registers(cfg)
    if cfg.cta_m > TMA_MAX_BOX or cfg.cta_n > TMA_MAX_BOX:
        raise SpecError(f"cta {cfg.cta_m}x{cfg.cta_n}: a TMA box has at most {TMA_MAX_BOX} rows (cuTensorMapEncodeTiled "
                        f"boxDim)", field="schedule.cta",
                        hint=f"use at most {TMA_MAX_BOX // cfg.consumers // WGMMA_M * WGMMA_M} rows per consumer "
                             f"warpgroup (cta M = {TMA_MAX_BOX // cfg.consumers // WGMMA_M * WGMMA_M * cfg.consumers})")
    if not 2 <= cfg.stages <= MAX_SCHEDULE_STAGES:
        raise SpecError(f"the TMA ring needs 2..{MAX_SCHEDULE_STAGES} stages, not {cfg.stages}", field="schedule.stages",
                        hint="the shared memory a block may use bounds the ring as well (check_shared_memory)")
    if cfg.cluster_m not in (1, 2) or (cfg.cta_n // cfg.cluster_m) % 8:
        raise SpecError(f"cluster_m = {cfg.cluster_m}: CTA pairs (2) share B in halves of whole 8-row groups "
                        f"(cta N / 2 a multiple of 8), or 1", field="schedule")
    check_shared_memory(cfg.target, cfg.stages, cfg.stage_bytes, cfg.smem_bytes, per_stage=2 * MBARRIER_BYTES,
                        fixed=cfg.smem_bytes - cfg.stages * (cfg.stage_bytes + 2 * MBARRIER_BYTES))
    if not isinstance(cfg.persistent, bool):
        raise SpecError(f"persistent must be True or False, not {cfg.persistent!r}", field="schedule.persistent")
    if cfg.stream_k:
        if not cfg.persistent:
            raise SpecError("split_k=stream: stream-K CTAs are persistent (each walks its share of the K blocks)",
                            field="schedule.split_k", hint="set persistent=True with split_k='stream'")
    elif not _is_int(cfg.split_k) or not 1 <= cfg.split_k <= MAX_SPLIT_K:
        raise SpecError(f"split_k={cfg.split_k!r}: the wgmma kernel cuts a tile's K blocks into 1..{MAX_SPLIT_K} "
                        f"slices, or split_k=stream", field="schedule.split_k", hint="write split_k=2, 4 or 8")
    out = cfg.out_type
    ep = cfg.epilogue
    packed = ep is not None and ep.packs          # a 1-byte D: the epilogue's conversions (isa/epilogue_outputs.py)
    if not packed and (out not in D_STORES or (out in ("f16", "bf16") and cfg.acc_type != "f32") or
                       (out in ("f32", "s32") and out != cfg.acc_type)):
        raise SpecError(f"D type {out} cannot be stored from {cfg.acc_type} accumulators", field="D.dtype")
    if ep is not None:
        if ep.out != out or ep.acc != cfg.acc_type or (not packed and ep.convert != D_STORES[out][1]) or \
                (ep.c != "none") != cfg.accumulate_c:
            raise SpecError(f"the epilogue plan (acc {ep.acc}, D {ep.out}, C {ep.c}) does not match the kernel "
                            f"(acc {cfg.acc_type}, D {out}, C {'read' if cfg.accumulate_c else 'absent'})",
                            field="epilogue")
    if cfg.selector not in wf.selectors:
        raise SpecError(f"sparsity selector {cfg.selector} is not valid for wgmma.mma_async.sp with "
                        f"{form.a_type} (valid: {', '.join(map(str, wf.selectors))}; PTX 9.7.15.6.1)",
                        field="sparsity.selector")
    need = required_ptx(form)
    ptx = cfg.ptx_version or need
    if ptx < need or ptx > MAX_PTX:
        raise SpecError(f"the wgmma kernel needs PTX ISA {format_version(need)}..{format_version(MAX_PTX)}, "
                        f"not {format_version(ptx)}", field="ptx")
    return ptx


# --------------------------------------------------------------------------------------------------
# PTX emission
# --------------------------------------------------------------------------------------------------

class SparseWgmmaPTX(KernelPTX):
    """KernelPTX with a 1-D rasterised grid, 384 (or 256) threads and its dynamic shared memory."""

    def grid(self, m: int, n: int, k: int, batch: int = 1, multiprocessors: int | None = None) -> tuple[int, int, int]:
        """The launch grid (the ABI's `grid`); persistent CTAs need the device's `multiprocessors`."""
        a = self.abi
        if min(m, n, k, batch) <= 0:
            raise SpecError(f"M, N, K, batch = {m}, {n}, {k}, {batch}: each must be at least 1", field="shape")
        cm = a["cluster"][0]
        split = a.get("split_k", 1)
        # stream-K: the work is every (tile, K block) iteration; split-K: every (tile, slice)
        per_tile = -(-k // a["tile_k"]) if split == SPLIT_K_STREAM else split
        tiles = -(-m // (a["tile_m"] * cm)) * cm * -(-n // a["tile_n"]) * per_tile
        if a.get("persistent"):
            if multiprocessors is None:
                raise SpecError("a persistent kernel's grid depends on the device's multiprocessor count",
                                field="schedule.persistent")
            tiles = cm * min(tiles // cm, multiprocessors * a["max_ctas_per_sm"] // cm)
        return tiles, batch, 1

    @property
    def smem_bytes(self) -> int:
        return self.abi["dynamic_smem_bytes"]


class _Writer(PtxBuilder):
    """Emits one kernel. Registers: %thr, %lane, %warp (within the warpgroup), %wg (warpgroup), %sb the
    1024-aligned shared base; producer: %tm* tensor-map addresses, %kb, %nkb, %st (slot), %ph (phase),
    %pst (slot address), %bar; consumer: %acc*, %meta*, %da0/%db0 slot-0 descriptors, %sd (slot delta in
    16-byte units), %eb metadata base, %m0/%n0 tile origin; %x, %y, %z scratch."""

    def __init__(self, cfg: SparseWgmmaConfig, ptx: Version):
        super().__init__(cfg.name, **HAND_SCHEDULED)
        self.cfg, self.ptx = cfg, ptx
        self.form = cfg.form
        self.wf = cfg.wg_form
        self.acc = ".f32" if cfg.acc_type == "f32" else ".s32"
        self.abytes = TYPES[cfg.acc_type].bits // 8
        self.dbytes = TYPES[cfg.out_type].bits // 8
        self.store_type, self.convert = D_STORES.get(cfg.out_type, (None, None))   # a 1-byte D: epilogue.pack
        self.smem = f"{cfg.name}_smem"
        self.dbase = "%ds" if cfg.persistent and cfg.staged_d else "%sb"     # the staged D tile's base
        self.ring = RingCode(self, cfg.ring, "%sb")
        self.state = PipelineState("%st", "%ph")
        # the three CUtensorMaps by value (module docstring, "Tensor maps")
        self.add_params(bytes_param(len(tensor_map_specs(cfg)) * TMA_MAP_BYTES, TMA_MAP_ALIGN), "tensor_maps")
        self.add_params("u64", *(("c",) if cfg.accumulate_c else ()), "d",
                        *(("workspace", "semaphores") if cfg.reduces else ()))
        ep = cfg.epilogue
        if ep is not None:           # the epilogue's parameters: the bias pointer, then f32 alpha / beta
            self.add_params("u64", *(p for p in ep.params if p == "bias"))
            self.add_params("f32", *(p for p in ep.params if p != "bias"))
        self.add_params("u32", "M", "N", "K", *(("ldc",) if cfg.accumulate_c else ()), "ldd")
        # batch (grid y = the batch index): C's and D's batch strides in elements; A's, B's and the
        # metadata's are in their 3-D tensor maps
        self.add_params("u64", *(("batch_stride_c",) if cfg.accumulate_c else ()), "batch_stride_d")

    def opcode(self) -> str:
        return wgmma_opcode(self.cfg)

    def tail(self) -> str:
        # imm-scale-a = imm-scale-b = 1 (no negation); imm-trans-a = imm-trans-b = 0: A row-major and
        # B column-major, i.e. both K-major, as the regions are (9.7.15.6.3 description)
        return {"scale_trans": ", 1, 1, 0, 0", "scale": ", 1, 1", "": ""}[self.wf.tail]

    # -- header -------------------------------------------------------------------------------------
    def header(self) -> None:
        cfg, out = self.cfg, self.module
        r = cfg.regions
        formula = f"A*B{' + C' if cfg.accumulate_c else ''}"
        if cfg.epilogue is not None:
            ep = cfg.epilogue
            formula = "alpha*(A*B)" if ep.alpha is not None else "A*B"
            formula += {"none": "", "accumulate": " + C", "epilogue": " + beta*C" if ep.beta else " + C"}[ep.c]
            formula += {"none": "", "row": " + bias[row]", "col": " + bias[col]"}[ep.bias]
            formula = formula if ep.act == "none" else f"{ep.act}({formula})"
            if ep.packs or ep.scale is not None:
                formula = f"{cfg.out_type}({'scale*' if ep.scale is not None else ''}{formula})"
        out.append(f"// tilec sparse wgmma GEMM {cfg.name}: D = {formula}, A "
                   f"{self.form.granularity.name} structured-sparse {self.form.a_type}, {self.opcode()}")
        out.append(f"// CTA {cfg.cta_m}x{cfg.cta_n}x{cfg.cta_k}: 1 TMA producer + {cfg.consumers} consumer "
                   f"warpgroups of {cfg.wg_m} rows, {cfg.stages} stages of {cfg.stage_bytes} B [A {r['A'].bytes} B "
                   f"{r['A'].swizzle} | B {r['B'].bytes} B {r['B'].swizzle} | metadata {r['E'].bytes} B], D "
                   f"{cfg.out_type} ({'staged' if cfg.staged_d else 'direct'}), raster group {cfg.raster_group}"
                   + (f", fp8 sums promoted into f32 every {cfg.promote} K blocks" if cfg.promote else ""))
        if cfg.register_split is not None:
            out.append(f"// registers: {cfg.register_split.describe('producer', 'consumer')}")
        out += target_lines(format_version(self.ptx), cfg.target)
        out += [f".extern .shared .align {SMEM_ALIGN} .b8 {self.smem}[];", ""]
        self.directives += [f".maxntid {cfg.threads}, 1, 1", f".maxnreg {cfg.max_regs}"]
        if cfg.cluster_m > 1:
            self.directives.append(f".reqnctapercluster {cfg.cluster_m}, 1, 1")
        mb, ks = cfg.m_blocks, cfg.ksteps
        # %p15, %cr, %cc: the staged copy-out's chunk cursor (chunk_cursor)
        self.declare("pred", "%p<16>" if cfg.staged_d else "%p<15>")
        self.declare("b16", "%mask")
        self.declare("u32", "%thr", "%lane", "%warp", "%wg", "%sb", "%x", "%y", "%z", "%M", "%N", "%K", "%kb", "%nkb",
                     *(("%ldc",) if cfg.accumulate_c else ()), "%ldd", "%bz",
                     "%st", "%ph", "%pst", "%bar", "%pm", "%pn", "%m0", "%n0", "%eb", "%c0", "%c1", "%c2", "%q", "%rk",
                     *(("%cr", "%cc") if cfg.staged_d else ()))
        self.declare("u64", "%bc", "%bd", "%tm<3>", "%da0", "%db0", "%sd", "%da", "%db", "%gd", "%gc", "%rp", "%off")
        if cfg.persistent:       # the work loop: item, items, stride; the staged D region's base
            self.declare("u32", "%t", *(() if cfg.stream_k else ("%nt",)), *(("%ds",) if cfg.staged_d else ()))
        if cfg.sliced:           # slice, its K blocks [%k0, %kbe), the tile's semaphore index; workspace, semaphore
            self.declare("u32", "%sl", "%k0", "%kbe", "%wi")
            self.declare("u64", "%gw", "%gs")
        if cfg.stream_k:         # range end, the segment's K blocks [%k0, %kbe), semaphore index, first and
            # last CTA sharing the tile, partials left to sum; workspace slot, semaphore
            self.declare("u32", "%te", "%k0", "%kbe", "%wi", "%ca", "%cb", "%nr")
            self.declare("u64", "%gw", "%gs")
        self.declare("b32", f"%meta<{2 * mb * ks}>", "%h", "%v<4>")
        self.declare(self.acc, f"%acc<{cfg.accumulators}>")
        if cfg.promote is not None:      # the promoted f32 sums; %pk: K blocks since the last promotion
            self.declare("f32", f"%pacc<{cfg.accumulators}>")
            self.declare("u32", "%pk")
        if cfg.epilogue is not None:
            epilogue.declare(self, cfg.epilogue, "%rb")

    # -- shared pieces ------------------------------------------------------------------------------
    def raster(self) -> None:
        """%m0, %n0 = origin of tile %ctaid.x (persistent CTAs: of work item %t): groups of raster_group
        tile rows, walked column by column (CTAs running together share A and B panels in L2)."""
        cfg, ins = self.cfg, self.ins
        G = cfg.raster_group
        if cfg.stream_k:             # %q, %k0, %kbe: the segment of work item %t (stream_segment)
            self.stream_segment()
        elif cfg.persistent:         # %t counts pair tiles already (work_loop)
            ins("mov.u32 %q, %t;")
        else:
            ins("mov.u32 %q, %ctaid.x;")
            if cfg.cluster_m > 1:    # the pair (cluster) walks the raster; its rank picks the M tile
                ins(f"div.u32 %q, %q, {cfg.cluster_m};                // cluster: consecutive CTAs (PTX .reqnctapercluster)")
        if cfg.sliced:               # work item = tile * split_k + slice: a tile's slices run side by side
            ins(f"rem.u32 %sl, %q, {cfg.split_k};                // K slice")
            ins(f"div.u32 %q, %q, {cfg.split_k};")
        ins(f"add.u32 %x, %N, {cfg.cta_n - 1};")
        ins(f"div.u32 %x, %x, {cfg.cta_n};                 // tile columns (the last one partial)")
        ins(f"mul.lo.u32 %x, %x, {G};                 // tiles per group")
        ins("div.u32 %y, %q, %x;                      // group")
        ins("rem.u32 %z, %q, %x;                      // tile within the group")
        ins(f"mul.lo.u32 %pm, %y, {G};")
        ins(f"add.u32 %x, %M, {cfg.cta_m * cfg.cluster_m - 1};")
        ins(f"div.u32 %x, %x, {cfg.cta_m * cfg.cluster_m};                 // tile rows (the last one partial)")
        ins("sub.u32 %x, %x, %pm;")
        ins(f"min.u32 %x, %x, {G};                    // tile rows in this group")
        ins("rem.u32 %y, %z, %x;")
        ins("add.u32 %pm, %pm, %y;")
        ins("div.u32 %pn, %z, %x;")
        ins(f"mul.lo.u32 %m0, %pm, {cfg.cta_m * cfg.cluster_m};")
        if cfg.cluster_m > 1:
            ins(f"mad.lo.u32 %m0, %rk, {cfg.cta_m}, %m0;")
        ins(f"mul.lo.u32 %n0, %pn, {cfg.cta_n};")

    def work_count(self) -> None:
        """Persistent CTAs: %nt = the work items of one batch (tiles; CTA pairs: pair tiles; x split_k)."""
        cfg, ins = self.cfg, self.ins
        tm = cfg.cta_m * cfg.cluster_m
        ins(f"add.u32 %x, %M, {tm - 1};")
        ins(f"div.u32 %x, %x, {tm};")
        ins(f"add.u32 %nt, %N, {cfg.cta_n - 1};")
        ins(f"div.u32 %nt, %nt, {cfg.cta_n};")
        ins("mul.lo.u32 %nt, %nt, %x;                   // work items (tiles) of the batch")
        if cfg.sliced:
            ins(f"mul.lo.u32 %nt, %nt, {cfg.split_k};                // x K slices")

    def work_loop(self) -> str:
        """Persistent CTAs (static schedule): for (%t = ctaid.x; %t < %nt; %t += nctaid.x), counted in pairs
        for CTA pairs (both CTAs of a pair walk the same items, so their B halves and releases match).
        Returns the loop's top label; the ring's pipeline state is NOT reset per item."""
        cfg, ins = self.cfg, self.ins
        if cfg.stream_k:
            ins("// stream-K: CTA (pair) c of G takes data-parallel tiles c, c + G, .. < dp, then the iterations "
                "[S + c Q + min(c, R), S + (c + 1) Q + min(c + 1, R)), Q, R = W' / G, W' % G")
            self.stream_start()
        else:
            ins("mov.u32 %t, %ctaid.x;")
        if cfg.cluster_m > 1 and not cfg.stream_k:
            ins(f"div.u32 %t, %t, {cfg.cluster_m};                // the pair's first item")
        top = self.label("WORK")
        self.put(top)
        if cfg.stream_k:             # the range's end, recomputed per item (one register less in the mainloop)
            self.stream_bound("%te", 1)
        ins(f"setp.ge.u32 %p1, %t, {'%te' if cfg.stream_k else '%nt'};")
        ins(f"@%p1 bra.uni {self.end};")
        ins("// work item %t: a new tile; the ring's stage and phase carry on from the last one")
        return top

    def next_work(self, top: str) -> None:
        """%t += the grid's CTAs (pairs), read again here rather than held in a register across the tile
        (stream-K: %t = the segment's end, the next iteration of the CTA's range)."""
        if self.cfg.stream_k:        # %t is the segment's end already (stream_next)
            self.stream_advance(top)
            return
        self.ins("mov.u32 %x, %nctaid.x;")
        if self.cfg.cluster_m > 1:
            self.ins(f"div.u32 %x, %x, {self.cfg.cluster_m};")
        self.ins("add.u32 %t, %t, %x;")
        self.ins(f"bra.uni {top};")

    # -- split-K --------------------------------------------------------------------------------------
    @property
    def k_end(self) -> str:
        """The register the K loops count up to: all K blocks, or (split-K) the end of the slice's."""
        return "%kbe" if self.cfg.reduces else "%nkb"

    def first_block(self) -> None:
        """%kb = the first K block of the work item: 0, or (split-K, slice %sl of S) blocks
        [%sl * nkb / S, (%sl + 1) * nkb / S): slices differ by at most one block, and one may have none
        when there are fewer blocks than slices (it contributes a zero partial)."""
        cfg, ins = self.cfg, self.ins
        if cfg.stream_k:
            ins("mov.u32 %kb, %k0;")
            return
        if not cfg.sliced:
            ins("mov.u32 %kb, 0;")
            return
        S = cfg.split_k
        ins("mul.lo.u32 %k0, %sl, %nkb;")
        ins(f"div.u32 %k0, %k0, {S};                  // the slice's first K block")
        ins("mad.lo.u32 %kbe, %sl, %nkb, %nkb;")
        ins(f"div.u32 %kbe, %kbe, {S};                // and its end")
        ins("mov.u32 %kb, %k0;")

    def skip_empty_slice(self, label: str) -> None:
        if self.cfg.sliced:
            self.ins("setp.ge.u32 %p1, %kb, %kbe;")
            self.ins(f"@%p1 bra.uni {label};                  // a slice without K blocks")

    def semaphore_index(self) -> None:
        """%wi = this CTA's tile within the launch (batch-major): its semaphore, and x split_k + slice its
        partial in the workspace."""
        cfg, ins = self.cfg, self.ins
        tm, cm = cfg.cta_m * cfg.cluster_m, cfg.cluster_m
        ins(f"add.u32 %x, %M, {tm - 1};")
        ins(f"div.u32 %x, %x, {tm};")
        ins(f"add.u32 %y, %N, {cfg.cta_n - 1};")
        ins(f"div.u32 %y, %y, {cfg.cta_n};")
        ins("mul.lo.u32 %x, %x, %y;")
        if cm > 1:
            ins(f"mul.lo.u32 %x, %x, {cm};                   // CTA tiles of a batch")
            ins(f"mad.lo.u32 %y, %q, {cm}, %rk;")
            ins("mad.lo.u32 %wi, %bz, %x, %y;")
        else:
            ins("mad.lo.u32 %wi, %bz, %x, %q;")

    def split_k_reduce(self, not_last: str) -> None:
        """split-K, after the slice's mainloop: every consumer thread writes its accumulators (the slice's
        partial) to the workspace; the CTA arrives at its tile's semaphore; the one arriving last (the
        semaphore's old value S - 1) resets the semaphore for the next launch and sums the S partials in
        slice order 0, 1, .., S - 1 (its own read back too), so D does not depend on which slice came last:
        bit-reproducible. Memory model (PTX ISA 8 "Memory Consistency Model"): each thread's partial stores
        are ordered before the arrival by its fence.acq_rel.gpu and the CTA barrier, the arrival is an
        atom.add with .acq_rel at .gpu scope (release for this CTA's partial, acquire of the other CTAs'),
        and the barrier plus the readers' fence.acq_rel.gpu order the sum's loads after it. Layout of a
        partial: v4 group g of consumer thread t at byte 16 * (g * consumer threads + t) (each warp's
        stores and loads coalesced). Falls through to the epilogue in the last CTA, jumps to `not_last`
        in the others."""
        cfg, ins = self.cfg, self.ins
        S, ct = cfg.split_k, WG_THREADS * cfg.consumers
        acc = self.acc
        ins(f"// ---- split-K: this slice's partial -> workspace; the last of the tile's {S} CTAs reduces")
        self.global_pointer("%gw", "workspace")
        self.global_pointer("%gs", "semaphores")
        ins(f"mad.lo.u32 %x, %wi, {S}, %sl;")
        ins(f"mul.wide.u32 %off, %x, {cfg.partial_bytes};")
        ins("add.u64 %gw, %gw, %off;")
        # max first: the same value on this consumer-only path, and an interval the address-range proof
        # (tests/test_address_ranges.py, not path-sensitive) sees cannot wrap below zero
        ins(f"max.u32 %y, %thr, {WG_THREADS};")
        ins(f"sub.u32 %y, %y, {WG_THREADS};                // consumer thread")
        ins(f"mul.wide.u32 %off, %y, {CHUNK};")
        ins("add.u64 %gw, %gw, %off;")
        self.store_partial()
        ins("fence.acq_rel.gpu;                          // the partial before the CTA's arrival")
        ins(f"bar.sync 1, {ct};")
        ins("mul.wide.u32 %off, %wi, 4;")
        ins("add.u64 %gs, %gs, %off;")
        ins(f"setp.eq.u32 %p1, %thr, {WG_THREADS};              // the first consumer thread arrives")
        ins("@%p1 atom.acq_rel.gpu.global.add.u32 %x, [%gs], 1;")
        ins(f"add.u32 %z, %sb, {cfg.flag_offset};")
        ins("@%p1 st.shared.u32 [%z], %x;")
        ins(f"bar.sync 1, {ct};")
        ins("ld.shared.u32 %x, [%z];")
        ins(f"setp.ne.u32 %p2, %x, {S - 1};")
        ins(f"@%p2 bra.uni {not_last};                  // another slice of the tile is still running")
        ins("fence.acq_rel.gpu;                          // every slice's partial is visible")
        ins("@%p1 st.relaxed.gpu.global.u32 [%gs], 0;   // the semaphore is 0 again for the next launch")
        zero = "0f00000000" if acc == ".f32" else "0"
        for r in range(cfg.accumulators):
            ins(f"mov{acc} %acc{r}, {zero};")
        ins(f"mul.wide.u32 %off, %sl, {cfg.partial_bytes};")
        ins("sub.u64 %gw, %gw, %off;                     // slice 0's partial")
        ins("mov.u32 %kb, 0;")
        top = self.label("REDUCE")
        self.put(top)
        self.add_partial()
        ins(f"add.u64 %gw, %gw, {cfg.partial_bytes};")
        self.count_up("%kb", 1, "%p1", S, top)

    def store_partial(self) -> None:
        """This thread's accumulators to the partial at %gw (split-K and stream-K alike): one 16-byte
        vector per group of 4, the consumer threads' vectors interleaved (group g at g * threads * 16)."""
        ct = WG_THREADS * self.cfg.consumers
        for g in range(self.cfg.accumulators // 4):
            regs = ", ".join(f"%acc{4 * g + e}" for e in range(4))
            self.ins(f"st.global.v4{self.acc} [%gw+{g * ct * CHUNK}], {{{regs}}};")

    def add_partial(self) -> None:
        """Add the partial at %gw (store_partial's layout) into this thread's accumulators."""
        ct, acc = WG_THREADS * self.cfg.consumers, self.acc
        for g in range(self.cfg.accumulators // 4):
            self.ins(f"ld.global.v4{acc} {{%v0, %v1, %v2, %v3}}, [%gw+{g * ct * CHUNK}];")
            for e in range(4):
                self.ins(f"add{acc} %acc{4 * g + e}, %acc{4 * g + e}, %v{e};")

    # -- stream-K -------------------------------------------------------------------------------------
    def stream_tiles(self, dst: str) -> None:
        """dst = T, the batch's tiles (CTA pairs: pair tiles; from M, N: recomputed where needed rather than
        held in a register across the mainloop). Scratch %x."""
        cfg, ins = self.cfg, self.ins
        tm = cfg.cta_m * cfg.cluster_m
        ins(f"add.u32 %x, %M, {tm - 1};")
        ins(f"div.u32 %x, %x, {tm};")
        ins(f"add.u32 {dst}, %N, {cfg.cta_n - 1};")
        ins(f"div.u32 {dst}, {dst}, {cfg.cta_n};")
        ins(f"mul.lo.u32 {dst}, {dst}, %x;                 // T: the batch's tiles")

    def stream_split(self, tiles: str, dp: str, sk: str) -> None:
        """From `tiles` = T and %y = G: `dp` = the data-parallel tiles D = (max(T / G, 1) - 1) G, walked whole
        (CTA c: tiles c, c + G, ..), and `sk` = T - D = min(T, T % G + G), the tiles whose iterations the G
        ranges share: the last full wave and the partial one (module docstring, "Stream-K"). Both without a
        subtraction that could go below zero (the address-range proof is not relational). Scratch %x."""
        ins = self.ins
        ins(f"rem.u32 %x, {tiles}, %y;")
        ins("add.u32 %x, %x, %y;")
        ins(f"min.u32 {sk}, {tiles}, %x;                 // stream-K tiles: min(T, T % G + G)")
        ins(f"div.u32 {dp}, {tiles}, %y;")
        ins(f"max.u32 {dp}, {dp}, 1;")
        ins(f"sub.u32 {dp}, {dp}, 1;")
        ins(f"mul.lo.u32 {dp}, {dp}, %y;                 // data-parallel tiles: (max(T / G, 1) - 1) G")

    def stream_partition(self, tiles: str, dp: str, sk: str) -> None:
        """`tiles` = T, %y = G (stream_ctas), `dp` and `sk` the data-parallel and stream-K tiles (stream_split):
        what stream_start, stream_advance, stream_bound and the fix-up each recompute rather than hold."""
        self.stream_tiles(tiles)
        self.stream_ctas("%y", "%nctaid.x")
        self.stream_split(tiles, dp, sk)

    def stream_bound(self, dst: str, which: int) -> None:
        """dst = the first iteration of CTA c + `which`'s stream-K range (c = ctaid.x): with G = nctaid.x,
        the W' = sk x nkb iterations after the S = dp x nkb of the data-parallel tiles (stream_split),
        Q = W' / G and R = W' % G, CTA c's range starts at S + c Q + min(c, R), so the first R CTAs take Q + 1
        iterations and the others Q: contiguous, covering, sizes differing by at most one, none empty (G <=
        W', as W' >= G nkb where there are data-parallel tiles and the grid is at most W). u32 throughout (a
        64-bit division is a called subroutine in SASS, and the consumers' accumulators would be spilled
        around it). Scratch %x, %y, %z, %c0, %c1, %c2."""
        ins = self.ins
        self.stream_partition("%c0", "%c1", "%z")
        ins("mul.lo.u32 %c1, %c1, %nkb;                  // S: the data-parallel tiles' iterations")
        ins("mul.lo.u32 %z, %z, %nkb;                    // W': the stream-K iterations")
        ins("div.u32 %x, %z, %y;                         // Q")
        ins("rem.u32 %c2, %z, %y;                        // R")
        self.stream_ctas("%y", "%ctaid.x")
        if which:
            ins(f"add.u32 %y, %y, {which};")
        ins("min.u32 %c2, %y, %c2;")
        ins(f"mad.lo.u32 {dst}, %y, %x, %c2;")
        ins(f"add.u32 {dst}, {dst}, %c1;")
        # <= W already; the min tells the address-range proof (intervals: R anywhere in 0..G-1, and so W')
        # that the tile index %t / nkb stays below the tile count
        ins("mul.lo.u32 %c0, %c0, %nkb;                  // W")
        ins(f"min.u32 {dst}, {dst}, %c0;")

    def stream_start(self) -> None:
        """%t = the CTA's first iteration: K block 0 of data-parallel tile c where c < dp, else the start of
        its stream-K range."""
        ins = self.ins
        ranged, done = self.label("STREAM_RANGE"), self.label("STREAM_START")
        self.stream_partition("%c0", "%c1", "%z")
        self.stream_ctas("%y", "%ctaid.x")
        ins("setp.ge.u32 %p1, %y, %c1;")
        ins(f"@%p1 bra.uni {ranged};")
        ins("mul.lo.u32 %t, %y, %nkb;                    // K block 0 of data-parallel tile c")
        ins(f"bra.uni {done};")
        self.put(ranged)
        self.stream_bound("%t", 0)
        self.put(done)

    def stream_advance(self, top: str) -> None:
        """After a work item (%t = its segment's end, stream_next): a data-parallel tile (its end <= S) is
        followed by the CTA's next one, G tiles on, or once those are done by its stream-K range; a stream-K
        segment's end is already the range's next iteration. Then to the work loop's `top`."""
        ins = self.ins
        self.stream_partition("%c0", "%c1", "%z")
        ins("mul.lo.u32 %c1, %c1, %nkb;                  // S")
        ins("setp.gt.u32 %p1, %t, %c1;")
        ins(f"@%p1 bra.uni {top};                  // inside the stream-K range")
        ins("sub.u32 %y, %y, 1;")
        ins("mad.lo.u32 %t, %y, %nkb, %t;                // the next data-parallel tile, G on")
        ins("setp.lt.u32 %p1, %t, %c1;")
        ins(f"@%p1 bra.uni {top};")
        self.stream_bound("%t", 0)
        ins(f"bra.uni {top};                  // the stream-K range")

    def stream_ctas(self, dst: str, sreg: str) -> None:
        """dst = special register `sreg` (%ctaid.x, %nctaid.x) counted in the units that walk a range: CTAs,
        or CTA pairs (both CTAs of a pair walk the same range: their B halves and slot releases match)."""
        self.ins(f"mov.u32 {dst}, {sreg};")
        if self.cfg.cluster_m > 1:
            self.ins(f"div.u32 {dst}, {dst}, {self.cfg.cluster_m};")

    def stream_segment(self) -> None:
        """The segment of the CTA's range that starts at iteration %t: tile %q = %t / nkb, its K blocks
        [%k0, %kbe) (%k0 = %t % nkb; the segment ends with the tile or with the range %te, whichever is
        first; 1 <= %kbe <= nkb)."""
        ins = self.ins
        ins("div.u32 %q, %t, %nkb;                       // the tile")
        ins("rem.u32 %k0, %t, %nkb;                      // the segment's first K block")
        ins("mad.lo.u32 %x, %q, %nkb, %nkb;")
        ins("min.u32 %x, %x, %te;                        // the segment ends with the tile or the range")
        ins("sub.u32 %kbe, %x, 1;")
        ins("rem.u32 %kbe, %kbe, %nkb;")
        ins("add.u32 %kbe, %kbe, 1;                      // its end block (1..nkb)")

    def stream_owner(self, dst: str) -> None:
        """dst = the CTA whose range holds iteration dst (stream_bound's ranges): i / (Q + 1) below R (Q + 1)
        (the iterations of the first R CTAs), else R + (i - R (Q + 1)) / Q = (i - R) / Q; and the larger of
        the two is the right one on either side, so owner = max(i / (Q + 1), (i - R) / Q), computed as
        max(i / (Q + 1) + G, (i + (Q G - R)) / Q) - G: no intermediate below zero, so the address-range proof
        (tests/test_address_ranges.py: intervals, not relations) sees no wrap. %x = Q, %y = G, %z = Q G - R;
        scratch %c0, %c1."""
        ins = self.ins
        ins("add.u32 %c0, %x, 1;")
        ins(f"div.u32 %c0, {dst}, %c0;")
        ins("add.u32 %c0, %c0, %y;                       // i / (Q + 1) + G")
        ins(f"add.u32 %c1, {dst}, %z;")
        ins("div.u32 %c1, %c1, %x;                       // (i - R) / Q + G")
        ins(f"max.u32 {dst}, %c0, %c1;")
        ins(f"sub.u32 {dst}, {dst}, %y;")

    def stream_batch_base(self, reg: str) -> None:
        """reg = the workspace's slot 0 of this batch (2 G slots of cta_m x cta_n partials a batch), at this
        consumer thread's first v4 group."""
        ins = self.ins
        self.global_pointer(reg, "workspace")
        ins("mov.u32 %x, %nctaid.x;")
        ins("shl.b32 %x, %x, 1;                          // two partial slots per CTA of the batch")
        ins("mul.wide.u32 %off, %bz, %x;")
        ins(f"mul.lo.u64 %off, %off, {self.cfg.partial_bytes};")
        ins(f"add.u64 {reg}, {reg}, %off;")
        # max first: the address-range proof (not path-sensitive) sees no wrap below zero (split_k_reduce)
        ins(f"max.u32 %x, %thr, {WG_THREADS};")
        ins(f"sub.u32 %x, %x, {WG_THREADS};                // consumer thread")
        ins(f"mul.wide.u32 %off, %x, {CHUNK};")
        ins(f"add.u64 {reg}, {reg}, %off;")

    def stream_next(self) -> None:
        """%t = the segment's end, the CTA's next iteration: tile %q * nkb + %kbe (%q = %t / nkb kept for the
        fix-up; from here on only %t lives on to the next work item)."""
        self.ins("div.u32 %q, %t, %nkb;                       // the tile")
        self.ins("mad.lo.u32 %t, %q, %nkb, %kbe;               // the next segment starts where this one ends")

    def stream_k_fixup(self, epilogue_label: str, not_last: str) -> None:
        """Stream-K, after a segment's mainloop (module docstring). A segment that is the whole tile (K blocks
        0..nkb) jumps to `epilogue_label`. Otherwise the CTAs ca..cb whose ranges hold the tile's first and
        last K block share it (ca < cb: ranges are contiguous), and each wrote, or will write, its segment's
        partial to a workspace slot of its own: CTA c's segment starting inside a tile (it can only be c's
        first) at slot 2c + 1, its segment from K block 0 that ends inside a tile (only c's last) at slot 2c;
        so ca's is at 2ca, the others' at 2c + 1. As in split_k_reduce: the partial is stored, ordered before
        the CTA's arrival (fence.acq_rel.gpu, bar.sync), the first consumer thread arrives with
        atom.acq_rel.gpu.global.add.u32 at the tile's semaphore (PTX ISA 8 memory consistency model: the RMWs
        on one word form a release sequence, so the last arrival acquires every earlier partial), and the CTA
        that sees cb - ca earlier arrivals resets the semaphore, sums the partials of ca, ca + 1, .., cb in
        that order (its own read back too: the sum does not depend on who came last) and falls through to
        the epilogue; the others jump to `not_last`. Nobody waits for another CTA. CTA pairs: ranges, and so
        ca and cb, count pairs; each CTA reduces its own half of the pair tile (its own semaphore) from the
        slots of the same rank's CTAs 2p + rank."""
        cfg, ins = self.cfg, self.ins
        ct = WG_THREADS * cfg.consumers
        acc, pb = self.acc, cfg.partial_bytes
        ins("// ---- stream-K: a tile wholly inside this CTA's range needs no fix-up")
        self.stream_next()
        ins("setp.eq.u32 %p1, %k0, 0;")
        ins("setp.eq.and.u32 %p1, %kbe, %nkb, %p1;")
        ins(f"@%p1 bra.uni {epilogue_label};")
        ins("// the tile is shared: this segment's partial -> this CTA's slot (2c, or 2c + 1 from inside the tile)")
        self.stream_batch_base("%gw")
        ins("mov.u32 %x, %ctaid.x;")
        ins("shl.b32 %x, %x, 1;")
        ins("min.u32 %z, %k0, 1;")
        ins("add.u32 %x, %x, %z;")
        ins(f"mul.wide.u32 %off, %x, {pb};")
        ins("add.u64 %gw, %gw, %off;")
        self.store_partial()
        ins("fence.acq_rel.gpu;                          // the partial before the CTA's arrival")
        ins(f"bar.sync 1, {ct};")
        ins("// CTAs ca..cb share the tile (ca's range holds its K block 0, cb's its last)")
        ins("sub.u32 %x, %t, 1;")
        ins("div.u32 %q, %x, %nkb;                       // the tile (%t: the segment's end)")
        self.semaphore_index()
        self.stream_partition("%c1", "%c1", "%z")
        ins("// a shared tile lies past the data-parallel ones: its iterations counted from S (q >= dp)")
        ins("max.u32 %ca, %q, %c1;")
        ins("sub.u32 %ca, %ca, %c1;")
        ins("mul.lo.u32 %ca, %ca, %nkb;                  // the tile's first iteration, from S")
        ins("add.u32 %cb, %ca, %nkb;")
        ins("sub.u32 %cb, %cb, 1;                        // and its last")
        ins("mul.lo.u32 %z, %z, %nkb;                    // W'")
        ins("div.u32 %x, %z, %y;                         // Q")
        ins("rem.u32 %z, %z, %y;                         // R")
        ins("mul.lo.u32 %c0, %x, %y;")
        ins("sub.u32 %z, %c0, %z;                        // Q G - R")
        self.stream_owner("%ca")
        self.stream_owner("%cb")
        self.global_pointer("%gs", "semaphores")
        ins("mul.wide.u32 %off, %wi, 4;")
        ins("add.u64 %gs, %gs, %off;")
        ins(f"setp.eq.u32 %p1, %thr, {WG_THREADS};              // the first consumer thread arrives")
        ins("@%p1 atom.acq_rel.gpu.global.add.u32 %x, [%gs], 1;")
        ins(f"add.u32 %z, %sb, {cfg.flag_offset};")
        ins("@%p1 st.shared.u32 [%z], %x;")
        ins(f"bar.sync 1, {ct};")
        ins("ld.shared.u32 %x, [%z];")
        ins("sub.u32 %nr, %cb, %ca;                      // the arrivals before the last one: partials after ca's")
        ins("setp.ne.u32 %p2, %x, %nr;")
        ins(f"@%p2 bra.uni {not_last};                  // another CTA of the tile is still running")
        ins("fence.acq_rel.gpu;                          // every partial of the tile is visible")
        ins("@%p1 st.relaxed.gpu.global.u32 [%gs], 0;   // the semaphore is 0 again for the next launch")
        zero = "0f00000000" if acc == ".f32" else "0"
        for r in range(cfg.accumulators):
            ins(f"mov{acc} %acc{r}, {zero};")
        self.stream_batch_base("%gw")
        cm = cfg.cluster_m
        if cm > 1:           # owners are pairs: this rank's CTA of pair p is CTA 2p + rank
            ins(f"mad.lo.u32 %x, %ca, {cm}, %rk;")
            ins("shl.b32 %x, %x, 1;")
        else:
            ins("shl.b32 %x, %ca, 1;")
        ins(f"mul.wide.u32 %off, %x, {pb};")
        ins("add.u64 %gw, %gw, %off;                     // slot 2ca: the partial from K block 0")
        ins("setp.eq.u32 %p9, %thr, %thr;                // the first step: to slot 2(ca + 1) + 1")
        top = self.label("REDUCE")
        self.put(top)
        self.add_partial()
        ins(f"add.u64 %gw, %gw, {2 * cm * pb};                 // slot 2c + 1 of the next CTA c: its segment from inside the tile")
        ins(f"@%p9 add.u64 %gw, %gw, {pb};")
        ins("setp.ne.u32 %p9, %thr, %thr;")
        ins("setp.ne.u32 %p1, %nr, 0;")
        ins("sub.u32 %nr, %nr, 1;")
        ins(f"@%p1 bra.uni {top};")

    def slot_regs(self) -> None:
        """%pst = shared address of ring slot %st; %bar = its full barrier."""
        self.ring.locate(self.state, "%pst", "%bar", "%x")

    # -- kernel -------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg, ins = self.cfg, self.ins
        self.problem_dims("%thr")
        for p in (("ldc",) if cfg.accumulate_c else ()) + ("ldd",):
            self.ld_param("u32", f"%{p}", p, "         // row stride in elements")
        ins("mov.u32 %bz, %ctaid.y;                      // the batch")
        ins("and.b32 %lane, %thr, 31;")
        ins("shr.u32 %warp, %thr, 5;")
        ins("and.b32 %warp, %warp, 3;                  // warp within its warpgroup (9.7.15.6.2 %warpid % 4)")
        ins(f"shr.u32 %wg, %thr, {log2(WG_THREADS)};")
        if cfg.cluster_m > 1:
            ins("mov.u32 %rk, %cluster_ctarank;")
        ins(f"mov.u32 %sb, {self.smem};")
        ins(f"add.u32 %sb, %sb, {SMEM_ALIGN - 1};           // regions on the 1024-byte swizzle repeat")
        ins(f"and.b32 %sb, %sb, {-SMEM_ALIGN};")
        ins(f"add.u32 %nkb, %K, {cfg.cta_k - 1};")
        ins(f"shr.u32 %nkb, %nkb, {log2(cfg.cta_k)};          // K blocks, the last one partial (TMA zero fill)")
        if cfg.persistent and not cfg.stream_k:        # stream-K: stream_partition, where needed
            self.work_count()
        ins("setp.eq.u32 %p0, %thr, 0;                  // thread 0 initialises the barriers")
        self.ring.init("%p0", "%x", f"full[s]: 1 arrival (the producer's expect_tx) + the slot's bytes; empty[s]: "
                       f"one arrival per consumer warp of the cluster ({cfg.ring.empty_arrivals})")
        self.pair_sync()
        # programmatic dependent launch (PTX 9.7.13 griddepcontrol; the ABI's programmatic_launch): the next
        # grid may start its CTAs as this one's leave; every thread waits for the grid before it here, ahead
        # of its first global access (the set-up above touches shared memory and parameters only)
        ins(griddepcontrol.LAUNCH_DEPENDENTS)
        ins(griddepcontrol.WAIT)
        ins("setp.ne.u32 %p0, %wg, 0;")
        consumer = self.label("CONSUMER")
        self.end = self.label("END")
        ins(f"@%p0 bra.uni {consumer};")
        self.producer()
        self.put(consumer)
        self.consumer()
        self.put(self.end)
        if cfg.bulk_copy_out:      # the shared memory a bulk copy reads must outlive it (a no-op for threads without)
            ins(bulk_copy.wait_group(0) + "                  // every bulk copy of D has completed")
        if cfg.cluster_m > 1:
            ins("// no CTA leaves while its peer may still arrive on its barriers")
            self.pair_sync()
        ins("ret;")

    def pair_sync(self) -> None:
        """Every thread of the CTA (of both CTAs of a pair) meets here."""
        self.cta_sync(cluster=self.cfg.cluster_m > 1)

    def producer(self) -> None:
        """Warp 0 of warpgroup 0 (lane 0 issues): K block kb into slot kb % stages once the slot's empty
        phase completed (the other producer warps go to the end)."""
        cfg, ins = self.cfg, self.ins
        split = cfg.register_split
        if split is not None:      # all four warps of the warpgroup execute it (PTX 9.7.19), so before warps 1-3 leave
            ins(f"setmaxnreg.dec.sync.aligned.u32 {split.low};      // the producer's registers to the CTA's pool")
        ins("// ---- producer: warp 0 of warpgroup 0 walks the K blocks, lane 0 issues")
        ins("setp.ne.u32 %p0, %warp, 0;")
        ins(f"@%p0 bra.uni {self.end};")
        ins("setp.eq.u32 %p6, %lane, 0;")
        # the maps are a kernel parameter: their generic address (PTX ISA cvta: .param{::entry} takes a
        # kernel parameter's address), which cp.async.bulk.tensor takes for a map in .param space; a map
        # there needs no proxy fence (the host wrote nothing in the generic proxy), unlike one in global memory
        ins(f"mov.b64 %tm0, {self.param('tensor_maps')};")
        ins("cvta.param.u64 %tm0, %tm0;                  // generic address of the 3 CUtensorMaps")
        for i in range(1, 3):
            ins(f"add.u64 %tm{i}, %tm0, {i * TMA_MAP_BYTES};")
        for i in range(3):
            ins(f"@%p6 prefetch.tensormap [%tm{i}];")
        mask = f"mov.b16 %mask, {(1 << cfg.cluster_m) - 1};                      // multicast to both CTAs of the pair"
        if cfg.persistent:
            if cfg.cluster_m > 1:
                ins(mask)
            self.ring.start(self.state)
            top = self.work_loop()
        self.raster()
        ins("shr.u32 %c1, %m0, 4;                         // metadata row of the tile (16 rows each)")
        if cfg.cluster_m > 1 and not cfg.persistent:
            ins(mask)
        self.first_block()
        if not cfg.persistent:
            self.ring.start(self.state)
        produced = self.label("PRODUCED") if cfg.persistent else self.end
        self.skip_empty_slice(produced)
        loop = self.label("PRODUCE")
        self.put(loop)
        self.slot_regs()
        self.ring.acquire(self.state, "%bar", "%y", "%x", "%p2")
        self.ring.arm("%bar", "%p6")
        ys = {"m0": "%m0", "n0": "%n0", "m0/16": "%c1"}
        for box in tma_boxes(cfg):
            ins(f"mul.lo.u32 %c0, %kb, {box.x_per_block};")
            if box.x0:
                ins(f"add.u32 %c0, %c0, {box.x0};")
            ins(f"add.u32 %x, %pst, {box.offset};")
            y = ys[box.y_source]
            if box.multicast:
                ins(f"mad.lo.u32 %x, %rk, {box.rank_offset}, %x;        // this CTA's half of B")
                ins(f"mad.lo.u32 %c2, %rk, {box.rank_rows}, {y};")
                ins(f"@%p6 cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                    f"[%x], [%tm{box.tensor}, {{%c0, %c2, %bz}}], [%bar], %mask;")
            else:
                ins(f"@%p6 cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%x], "
                    f"[%tm{box.tensor}, {{%c0, {y}, %bz}}], [%bar];")
        self.ring.advance(self.state, "%p1")
        self.count_up("%kb", 1, "%p1", self.k_end, loop)
        if cfg.persistent:
            self.put(produced)
            if cfg.stream_k:
                self.stream_next()
            self.next_work(top)
        ins(f"bra.uni {self.end};")

    def consumer(self) -> None:
        cfg, ins = self.cfg, self.ins
        split = cfg.register_split
        if split is not None:      # waits until the producer's .dec has filled the pool (PTX 9.7.19)
            ins(f"setmaxnreg.inc.sync.aligned.u32 {split.high};     // the consumers' registers from the CTA's pool")
        ins("// ---- consumers: warpgroup wg >= 1 owns rows (wg-1)*wg_m .. of the tile")
        ins("sub.u32 %wg, %wg, 1;")
        if not cfg.persistent:
            self.raster()
            if cfg.reduces:
                self.semaphore_index()
        self.batch_offsets()
        if not cfg.persistent:
            self.init_acc()
        # slot-0 descriptors: %sb >> 4 in the start-address field, the consumer's first A row block added
        ins("shr.u32 %x, %sb, 4;")
        ins("cvt.u64.u32 %sd, %x;")
        ins(f"mov.b64 %da0, {descriptor_base(cfg, 'A')};")
        ins(f"mov.b64 %db0, {descriptor_base(cfg, 'B')};")
        ins("add.u64 %da0, %da0, %sd;")
        ins("add.u64 %db0, %db0, %sd;")
        lay_a = layouts(cfg)[0]
        wg_rows_bytes = lay_a.offset(cfg.wg_m, 0) if cfg.consumers > 1 else 0
        if wg_rows_bytes:
            ins(f"mul.wide.u32 %off, %wg, {wg_rows_bytes >> 4};    // consumer's rows: canonical offset / 16")
            ins("add.u64 %da0, %da0, %off;")
        # metadata: word meta_word(lane) of tile (wg*wg_m)/16 + warp, slot 0
        e_off0 = metadata_offset(cfg, 0, 0, 0, 0, 0)
        tile_bytes = cfg.regions["E"].row_bytes
        ins(f"mul.lo.u32 %x, %wg, {cfg.wg_m // SHAPE_M};")
        ins("add.u32 %x, %x, %warp;")
        ins(f"mad.lo.u32 %eb, %x, {tile_bytes}, %sb;")
        if cfg.compact_metadata:
            # compact layout: lane l reads word 2*(l/4) + l%2, its twin's for threads 2, 3 of a quad (the
            # same bits: fragments.compact_metadata_exact; PTX 9.7.14.6.2 metadata fragments)
            ins("shr.u32 %x, %lane, 2;")
            ins(f"mad.lo.u32 %eb, %x, {2 * META_WORD_BYTES}, %eb;          // 2 words per quad")
            ins("and.b32 %x, %lane, 1;")
            ins(f"mad.lo.u32 %eb, %x, {META_WORD_BYTES}, %eb;          // thread 0 or 1 of the pair")
        else:
            ins("shl.b32 %x, %lane, 2;")
            ins("add.u32 %eb, %eb, %x;")
        if e_off0:
            ins(f"add.u32 %eb, %eb, {e_off0};")
        ins("setp.eq.u32 %p3, %lane, 0;                  // lane 0 signals its warp's release")
        ins("setp.eq.u32 %p4, %thr, %thr;                 // scale-d = true: D = A*B + D")
        if cfg.persistent:
            if cfg.staged_d:
                ins(f"add.u32 %ds, %sb, {cfg.d_offset};           // the staged D tile's own region")
            self.ring.start(self.state)
            top = self.work_loop()
            self.raster()
            if cfg.sliced:
                self.semaphore_index()
            self.init_acc()
        self.first_block()
        if not cfg.persistent:
            self.ring.start(self.state)
        ins("mov.u32 %pn, 0;                              // slot of the previous K block")
        loop, done = self.label("CONSUME"), self.label("MAINLOOP_DONE")
        no_blocks = self.label("NO_BLOCKS") if cfg.sliced else None
        if no_blocks:
            self.skip_empty_slice(no_blocks)
        self.put(loop)
        for buf in range(2):       # two copies: the metadata registers of a block in flight stay untouched
            self.k_block(buf)
            if buf == 1:
                self.count_up("%kb", 1, "%p1", self.k_end, loop)
            else:
                self.count_up("%kb", 1, "%p1", self.k_end, done, exit_at_limit=True)
        self.put(done)
        ins("wgmma.wait_group.sync.aligned 0;")
        if cfg.promote is not None:
            self.promote_final()
        if cfg.persistent:
            # the tile's last block is read: free its slot now, so that the producer loads the next tile's
            # K blocks while the consumers store this tile's D
            ins("// the tile's last slot is free (its wgmma group completed)")
            self.ring.release("%pn", "%p3", "%x", "%y", cfg.cluster_m)
        if no_blocks:
            self.put(no_blocks)
            not_last = self.label("NOT_LAST")
            self.split_k_reduce(not_last)
            self.epilogue()
            self.put(not_last)
        elif cfg.stream_k:
            not_last, epi = self.label("NOT_LAST"), self.label("EPILOGUE")
            self.stream_k_fixup(epi, not_last)
            self.put(epi)
            self.epilogue()
            self.put(not_last)
        else:
            self.epilogue()
        if cfg.persistent:
            self.next_work(top)

    def k_block(self, buf: int) -> None:
        """One K block: wait for its slot, metadata -> registers, the wgmma chain, release the block
        before (its wgmma group completed: wait_group 1 leaves only this block's group pending)."""
        cfg, ins = self.cfg, self.ins
        mb, ks = cfg.m_blocks, cfg.ksteps
        ins(f"// K block kb (metadata buffer {buf})")
        self.slot_regs()
        self.ring.wait(self.state, "%bar", "%p2")
        ins(f"mul.lo.u32 %x, %st, {cfg.stage_bytes};           // slot offset")
        ins("add.u32 %y, %eb, %x;")
        for j in range(mb):
            for s in range(ks):
                d = metadata_offset(cfg, 0, j, 0, s, 0) - metadata_offset(cfg, 0, 0, 0, 0, 0)
                ins(f"ld.shared.b32 %meta{(buf * mb + j) * ks + s}, [%y+{d}];")
        ins(f"shr.u32 %x, %x, 4;")
        ins("cvt.u64.u32 %sd, %x;")
        if cfg.promote is not None:
            ins("setp.ne.u32 %p13, %pk, 0;                  // scale-d of k-step 0: false right after a promotion")
        ins("wgmma.fence.sync.aligned;                   // accumulators and metadata registers before wgmma")
        opcode = self.opcode()
        for s in range(ks):
            b_off = descriptor_offset(cfg, "B", 0, s) >> 4
            ins(f"add.u64 %db, %db0, %sd;")
            if b_off:
                ins(f"add.u64 %db, %db, {b_off};")
            for j in range(mb):
                a_off = (descriptor_offset(cfg, "A", WGMMA_M * j, s)) >> 4
                ins("add.u64 %da, %da0, %sd;")
                if a_off:
                    ins(f"add.u64 %da, %da, {a_off};")
                base = j * cfg.acc_per_block
                accs = "{" + ", ".join(f"%acc{base + i}" for i in range(cfg.acc_per_block)) + "}"
                scale_d = "%p13" if cfg.promote is not None and s == 0 else "%p4"
                ins(f"{opcode} {accs}, %da, %db, %meta{(buf * mb + j) * ks + s}, {cfg.selector}, {scale_d}{self.tail()};")
        ins("wgmma.commit_group.sync.aligned;")
        ins("wgmma.wait_group.sync.aligned 1;             // the previous block's group is complete")
        ins(f"setp.ne.u32 %p5, %kb, {'%k0' if cfg.reduces else 0};")
        ins("and.pred %p5, %p5, %p3;")
        # the slot is free once the consumers of every CTA reading it (both of a pair) are done with it.
        # A pair's remote arrive has default semantics (.release, .cta scope), as CUTLASS's
        # ClusterBarrier::arrive(cta_id): the block's reads are complete (wait_group). Measured on the H100:
        # .release.cluster here (and .acquire.cluster in the producer's wait) made the pairs 2.4x slower
        # (388 vs 952 TFLOP/s)
        self.ring.release("%pn", "%p5", "%x", "%y", cfg.cluster_m)
        ins("mov.u32 %pn, %st;")
        if cfg.promote is not None:
            self.promote_every(buf)
        self.ring.advance(self.state, "%p1")

    # -- fp8 promotion (schedule promote=N) ------------------------------------------------------------
    def promote_every(self, buf: int) -> None:
        """After K block %kb's wgmma group was committed: every `promote` blocks wait for it (wait_group 0),
        add the wgmma accumulators into the f32 sums %pacc and let the next block's first k-step overwrite
        them (scale-d = 0, %p13): the two-level accumulation of fp8 (compiler/isa/wgmma.py PROMOTED_A_TYPES).
        The block counter %pk is uniform over the CTA, so the branch is too."""
        cfg, ins = self.cfg, self.ins
        skip = self.label(f"NO_PROMOTION{buf}")
        ins("add.u32 %pk, %pk, 1;")
        ins(f"setp.lt.u32 %p12, %pk, {cfg.promote};")
        ins(f"@%p12 bra.uni {skip};")
        ins("wgmma.wait_group.sync.aligned 0;             // this block's sums are in %acc")
        for r in range(cfg.accumulators):
            ins(f"add.f32 %pacc{r}, %pacc{r}, %acc{r};")
        ins("mov.u32 %pk, 0;")
        self.put(skip)

    def promote_final(self) -> None:
        """After the last K block: the sums since the last promotion (%pk blocks, maybe none) into %pacc,
        and %pacc back into %acc, where the epilogue reads the accumulators."""
        cfg, ins = self.cfg, self.ins
        ins("setp.ne.u32 %p12, %pk, 0;                  // K blocks since the last promotion")
        for r in range(cfg.accumulators):
            ins(f"@%p12 add.f32 %pacc{r}, %pacc{r}, %acc{r};")
            ins(f"mov.f32 %acc{r}, %pacc{r};")

    # -- accumulators and D ---------------------------------------------------------------------------
    def thread_row(self, rows: int | None = None) -> None:
        """%x = row of the thread's fragment in the tile (block 0, i = 0): wg*wg_m + 16*warp + lane/4 (`rows`:
        wg*rows + ..., its row in a staged region of `rows` rows per warpgroup); %y = its column 2*(lane%4)."""
        cfg, ins = self.cfg, self.ins
        ins(f"mul.lo.u32 %x, %wg, {rows or cfg.wg_m};")
        ins("shl.b32 %y, %warp, 4;")
        ins("add.u32 %x, %x, %y;")
        ins("shr.u32 %y, %lane, 2;")
        ins("add.u32 %x, %x, %y;")
        ins("and.b32 %y, %lane, 3;")
        ins("shl.b32 %y, %y, 1;")

    def pairs(self):
        """(m block j, register i, row offset, column offset) of every accumulator pair (i even)."""
        cfg = self.cfg
        for j in range(cfg.m_blocks):
            for i in range(0, cfg.acc_per_block, 2):
                r, c = fragment_coord(i, 0, 0)
                yield j, j * cfg.acc_per_block + i, WGMMA_M * j + r, c

    def staged_pairs(self, block: int, col: int = 0):
        """The pairs staged in the epilogue's pass (`block`, `col`) (cfg.d_block_rows rows of the warpgroup, and
        of them column block `col` of cfg.d_piece_cols columns), as (register i, row offset in the tile, row
        offset in the staged region, column offset in the tile, column offset in the staged piece)."""
        rows, cols = self.cfg.d_block_rows, self.cfg.d_piece_cols
        for _j, i, r, c in self.pairs():
            if r // rows == block and c // cols == col:
                yield i, r, r - rows * block, c, c - cols * col

    def global_fragment_ptr(self, ptr: str, nbytes: int, stride: str) -> None:
        """%rp = ptr + ((m0 + row) * stride + n0 + col) * nbytes for the thread's (row, col) of pair 0
        (`stride`: the row stride in elements, %ldc or %ldd); %x, %y = that row and column of D."""
        ins = self.ins
        self.thread_row()
        ins("add.u32 %x, %x, %m0;")
        ins("add.u32 %y, %y, %n0;")
        ins(f"mul.wide.u32 %rp, %x, {stride};")
        ins("cvt.u64.u32 %off, %y;")
        ins("add.u64 %rp, %rp, %off;")
        ins(f"mul.lo.u64 %rp, %rp, {nbytes};")
        ins(f"add.u64 %rp, %rp, {ptr};")

    # -- batch -----------------------------------------------------------------------------------------
    def batch_offsets(self) -> None:
        """%bc, %bd = byte offsets of batch %bz in C and D (batch index x batch stride in elements x
        element bytes; 64-bit: a batch stride may pass 2^32 elements)."""
        cfg, ins = self.cfg, self.ins
        for reg, name, nbytes in ((("%bc", "batch_stride_c", self.abytes),) if cfg.accumulate_c else ()) + \
                (("%bd", "batch_stride_d", self.dbytes),):
            self.ld_param("u64", reg, name)
            ins(f"cvt.u64.u32 %off, %bz;")
            ins(f"mul.lo.u64 {reg}, {reg}, %off;")
            self.scale64(reg, nbytes, 1)

    def global_pointer(self, reg: str, name: str, raw: str | None = None) -> None:
        """The global address of pointer parameter `name`; C and D of this CTA's batch."""
        super().global_pointer(reg, name, raw)
        if name in ("c", "d"):
            self.ins(f"add.u64 {reg}, {reg}, {'%bc' if name == 'c' else '%bd'};          // this batch's")

    # -- edges: a tile that D's M x N does not contain whole ------------------------------------------
    def edge_split(self, interior, edge) -> None:
        """interior() where the CTA tile lies inside D (m0 + cta_m <= M and n0 + cta_n <= N: no checks, the
        vector accesses as they are), edge() else; the branch is uniform over the CTA."""
        cfg, ins = self.cfg, self.ins
        inside, done = self.label("INTERIOR"), self.label("EDGE_DONE")
        ins(f"add.u32 %z, %m0, {cfg.cta_m};")
        ins("setp.le.u32 %p7, %z, %M;")
        ins(f"add.u32 %z, %n0, {cfg.cta_n};")
        ins("setp.le.and.u32 %p7, %z, %N, %p7;            // the tile lies inside D")
        ins(f"@%p7 bra.uni {inside};")
        ins("// edge tile: every access predicated on its row < M and column < N")
        edge()
        ins(f"bra.uni {done};")
        self.put(inside)
        interior()
        self.put(done)

    def pair_guards(self, r: int, c: int) -> None:
        """%p10 = row %x + r of D exists; %p8, %p9 = its elements at columns %y + c and %y + c + 1 do."""
        ins = self.ins
        ins(f"add.u32 %pm, %x, {r};")
        ins("setp.lt.u32 %p10, %pm, %M;")
        ins(f"add.u32 %pn, %y, {c};")
        ins("setp.lt.and.u32 %p8, %pn, %N, %p10;")
        ins("add.u32 %pn, %pn, 1;")
        ins("setp.lt.and.u32 %p9, %pn, %N, %p10;")

    def store_element(self, guard: str, at: str, reg: str, nbytes: int, convert: str | None) -> None:
        """One element of D (f32/s32 from its register; f16/bf16 converted, the low half stored: PTX ISA
        6.4.3 lets st take a register wider than its type)."""
        if convert:
            self.ins(f"{convert} %h, {reg}, {reg};")
            reg = "%h"
        self.ins(f"{guard}st.global.b{8 * nbytes} {at}, {reg};")

    def init_acc(self) -> None:
        cfg, ins = self.cfg, self.ins
        zero = "0f00000000" if self.acc == ".f32" else "0"
        if cfg.promote is not None:      # C (or 0) starts the f32 sums; the first block overwrites %acc
            ins("mov.u32 %pk, 0;")
            for r in range(cfg.accumulators):
                ins(f"mov.f32 %acc{r}, {zero};")
            self.init_registers("%pacc", zero)
            return
        self.init_registers("%acc", zero)

    def init_registers(self, regs: str, zero: str) -> None:
        """`regs`{0..} = the C fragments of the tile (preload_c; split-K: slice 0's partial only, stream-K: the segment's from K block 0) or zero."""
        cfg, ins, acc = self.cfg, self.ins, self.acc
        if not cfg.preload_c or cfg.reduces:
            for r in range(cfg.accumulators):
                ins(f"mov{acc} {regs}{r}, {zero};")
            if not cfg.preload_c:
                return
        skip = None
        if cfg.reduces:            # C enters one partial only: slice 0's (stream-K: the one from K block 0)
            skip = self.label("C_DONE")
            ins(f"setp.ne.u32 %p1, {'%k0' if cfg.stream_k else '%sl'}, 0;")
            ins(f"@%p1 bra.uni {skip};")
        ins("// C fragments into the accumulators (Figure 149 layout)")
        self.global_pointer("%gc", "c")
        self.global_fragment_ptr("%gc", self.abytes, "%ldc")

        def interior() -> None:
            for _j, i, r, c in self.pairs():
                ins(f"mad.wide.u32 %gd, %ldc, {r * self.abytes}, %rp;" if r else "mov.u64 %gd, %rp;")
                ins(f"ld.global.v2{acc} {{{regs}{i}, {regs}{i + 1}}}, [%gd+{c * self.abytes}];")

        def edge() -> None:            # C outside D reads as 0 (those accumulators are never stored)
            for _j, i, r, c in self.pairs():
                self.pair_guards(r, c)
                ins(f"mad.wide.u32 %gd, %ldc, {r * self.abytes}, %rp;" if r else "mov.u64 %gd, %rp;")
                for e in range(2):
                    ins(f"mov{acc} {regs}{i + e}, {zero};")
                    ins(f"@%p{8 + e} ld.global{acc} {regs}{i + e}, [%gd+{(c + e) * self.abytes}];")

        self.edge_split(interior, edge)
        if skip:
            self.put(skip)

    def store_acc_pair(self, space: str, at: str, i: int) -> None:
        self.store_pair(space, at, f"%acc{i}", f"%acc{i + 1}", self.store_type, self.convert)

    def apply_epilogue(self, i: int, r: int, c: int, edge: bool = False) -> None:
        """Direct D stores: the plan on accumulator pair (%acc{i}, %acc{i+1}) at (row r, column c) of the
        thread's pair 0 (%rc, %rb: direct_epilogue_pointers); `edge`: C and bias read per element where
        it exists (pair_guards' %p8, %p9, %p10)."""
        ep, ins = self.cfg.epilogue, self.ins
        if ep.c == "epilogue":
            ins(f"mad.wide.u32 %gq, %ldc, {r * self.abytes}, %rc;" if r else "mov.u64 %gq, %rc;")
            if edge:
                for e in range(2):
                    ins(f"@%p{8 + e} ld.global.f32 %ce{e}, [%gq+{(c + e) * self.abytes}];")
            else:
                ins(f"ld.global.v2.f32 {{%ce0, %ce1}}, [%gq+{c * self.abytes}];")
        bb = ep.bias_bytes
        if ep.bias == "col":
            if edge:
                for e in range(2):
                    epilogue.load_bias(self, ep, f"@%p{8 + e} ", f"[%rb+{(c + e) * bb}]", 1, e)
            else:
                epilogue.load_bias(self, ep, "", f"[%rb+{c * bb}]", 2)
        elif ep.bias == "row":
            epilogue.load_bias(self, ep, "@%p10 " if edge else "", f"[%rb+{r * bb}]", 1)
        raw = epilogue.raw_accumulators(ep)         # s32 accumulators: the f32 steps on %ev0, %ev1
        for k in range(2):
            epilogue.element_steps(self, ep, f"%ev{k}" if raw else f"%acc{i + k}", f"%ce{k}",
                                   f"%be{k if ep.bias == 'col' else 0}", f"%acc{i + k}")

    def store_packed_pair(self, i: int, c: int, edge: bool) -> None:
        """A 1-byte D from the direct path: the pair (columns c, c + 1 of the row at %gc) packed into the low
        half of %hw0 and stored as one b16 (an edge: byte by byte, %p8 and %p9)."""
        ep, ins = self.cfg.epilogue, self.ins
        xs = ["%ev0", "%ev1"] if epilogue.raw_accumulators(ep) else [f"%acc{i}", f"%acc{i + 1}"]
        epilogue.pack(self, ep, "%hw0", xs)
        if not edge:
            ins(f"st.global.b16 [%gc+{c}], %hw0;")
            return
        ins(f"@%p8 st.global.b8 [%gc+{c}], %hw0;")
        ins("shr.b32 %hw0, %hw0, 8;")
        ins(f"@%p9 st.global.b8 [%gc+{c + 1}], %hw0;")

    def direct_epilogue_pointers(self) -> None:
        """Direct D stores: %rc and %rb advanced to the thread's pair 0 (row thread_row, column 2*(lane%4))."""
        ep, ins = self.cfg.epilogue, self.ins
        if ep.c == "epilogue":
            self.thread_row()
            ins("add.u32 %x, %x, %m0;")
            ins("add.u32 %y, %y, %n0;")
            ins("mul.wide.u32 %gq, %x, %ldc;")
            ins("cvt.u64.u32 %off, %y;")
            ins("add.u64 %gq, %gq, %off;")
            ins(f"mad.lo.u64 %rc, %gq, {self.abytes}, %rc;")
        if ep.bias != "none":
            self.thread_row()
            ins("add.u32 %y, %y, %n0;" if ep.bias == "col" else "add.u32 %x, %x, %m0;")
            ins(f"mul.wide.u32 %gq, {'%y' if ep.bias == 'col' else '%x'}, {ep.bias_bytes};")
            ins("add.u64 %rb, %rb, %gq;")

    def chunk_cursor(self, cpr: int) -> None:
        """The copy-out's first item of this thread, %q (< 128), as (%cr, %cc) = (its row within the
        warpgroup's rows, its chunk within the row): the one division by the chunks per row; chunk_next
        steps the cursor by the warpgroup's 128 threads with additions (a u32 division by a constant that is
        no power of two is a float reciprocal sequence in SASS, per item)."""
        if not 0 < cpr <= WG_THREADS:
            raise AssertionError(f"{cpr} chunks per row: the cursor steps at most one row carry per round")
        self.ins(f"div.u32 %cr, %q, {cpr};                      // the thread's first row within the warpgroup's rows")
        self.ins(f"rem.u32 %cc, %q, {cpr};                      // and chunk within the row")

    def chunk_next(self, cpr: int) -> None:
        """(%cr, %cc) += 128 items of `cpr` per row: 128 // cpr rows and 128 % cpr chunks, carrying a row
        when the chunk passes the row's end (128 % cpr < cpr: at most one carry)."""
        ins = self.ins
        rows, chunks = divmod(WG_THREADS, cpr)
        if chunks:
            ins(f"add.u32 %cc, %cc, {chunks};")
            ins(f"setp.ge.u32 %p15, %cc, {cpr};               // past the row's end: the next row")
            ins(f"@%p15 sub.u32 %cc, %cc, {cpr};")
            ins("@%p15 add.u32 %cr, %cr, 1;")
        if rows:
            ins(f"add.u32 %cr, %cr, {rows};")

    def chunk_origin(self, cpr: int, pitch: int, chunk: int = CHUNK, block: int = 0) -> None:
        """The copy-out item at the cursor (chunk_cursor) of staging pass `block`: %pm = its row in the tile,
        %pn its chunk (of `chunk` staged bytes), %x its shared address in the staged tile (or region of
        d_block_rows rows per warpgroup)."""
        cfg, ins = self.cfg, self.ins
        rows = cfg.d_block_rows
        ins(f"mad.lo.u32 %pm, %wg, {rows}, %cr;           // row in the {'tile' if rows == cfg.wg_m else 'region'}")
        ins(f"mov.u32 %pn, %cc;                          // {'16-byte ' if chunk == CHUNK else ''}chunk within the row")
        ins(f"mad.lo.u32 %x, %pm, {pitch}, {self.dbase};")
        ins(f"mad.lo.u32 %x, %pn, {chunk}, %x;")
        if rows != cfg.wg_m:       # the region's row wg*rows + r is the tile's row wg*wg_m + rows*block + r
            ins(f"mad.lo.u32 %pm, %wg, {cfg.wg_m - rows}, %pm;         // row in the tile")
            if block:
                ins(f"add.u32 %pm, %pm, {rows * block};                // of m64 block {block}")

    def chunk_items(self, cpr: int, total: int, body) -> None:
        """The loop over this warpgroup's `total` = d_block_rows x `cpr` copy-out items of one staging pass
        (items %q, %q + 128, ..): body() at the cursor, then the cursor stepped, while its row is one of the
        pass's (item < total exactly when row < d_block_rows; the row is the loop's counter, so
        compiler/emulator/ranges.py bounds it). A loop, not unrolled rounds (epilogue.chunk_loop says why)."""
        cfg, ins = self.cfg, self.ins
        rows = cfg.d_block_rows
        if total != rows * cpr:
            raise AssertionError(f"{total} copy-out items are not {rows} rows of {cpr}")
        loop, done = self.label("EPILOGUE_CHUNK"), self.label("EPILOGUE_DONE")
        self.chunk_cursor(cpr)
        ins(f"setp.ge.u32 %p6, %cr, {rows};")
        ins(f"@%p6 bra {done};")
        self.put(loop)
        body()
        self.chunk_next(cpr)
        ins(f"setp.lt.u32 %p6, %cr, {rows};")
        ins(f"@%p6 bra{'.uni' if total % WG_THREADS == 0 else ''} {loop};")
        self.put(done)

    def chunk_guards(self, per: int) -> None:
        """For the chunk at D row %pm, column %pn of `per` elements: %p8 = the row exists, %p9 = the whole
        chunk is inside D (one vector access), %p10 = only part of it is (element accesses)."""
        ins = self.ins
        ins("setp.lt.u32 %p8, %pm, %M;")
        ins(f"add.u32 %y, %pn, {per};")
        ins("setp.le.and.u32 %p9, %y, %N, %p8;           // the whole chunk is inside D")
        ins("setp.gt.and.u32 %p10, %y, %N, %p8;          // part of it is")

    def stage_after_epilogue(self, pitch: int, block: int = 0, col: int = 0) -> None:
        """Persistent CTAs with a fused epilogue: the plan runs on the accumulators of staging pass `block`
        (one m64 block) in registers (C and bias per pair, as for direct stores; an edge tile's reads
        predicated) and D's type is staged at %c0 (the thread's pair 0 in the region): half the bytes of f32
        for f16 / bf16 D, so the region fits next to a deeper ring. The copy-out is then the plain one. With
        column blocks (`col`) C and the bias are read at the pair's column of the tile, D staged at its column
        of the piece."""
        cfg, ins = self.cfg, self.ins
        rows = cfg.d_block_rows
        if block == 0 and col == 0:  # %rc, %rb advance in place, once a tile (the copy-outs leave them alone)
            self.direct_epilogue_pointers()
        self.thread_row(rows)
        ins(f"mad.lo.u32 %c0, %x, {pitch}, {self.dbase};")
        ins(f"mad.lo.u32 %c0, %y, {self.dbytes}, %c0;")
        if rows != cfg.wg_m:       # the region's row; the guards and C / bias take the tile's
            self.thread_row()
        ins("add.u32 %x, %x, %m0;                      // the pair's row and column of D (pair_guards)")
        ins("add.u32 %y, %y, %n0;")

        def stage(edge: bool) -> None:
            if edge:
                epilogue.zero_inputs(self, cfg.epilogue)
            for i, r, rr, c, cc in self.staged_pairs(block, col):
                if edge:
                    self.pair_guards(r, c)
                self.apply_epilogue(i, r, c, edge)
                self.store_acc_pair("shared", f"[%c0+{rr * pitch + cc * self.dbytes}]", i)

        self.edge_split(lambda: stage(False), lambda: stage(True))

    def staged_epilogue_out(self) -> None:
        """The copy-out of a staged accumulator tile through the epilogue: per 16-byte chunk (4 f32
        accumulators of one row), 4 C elements and 4 (column) or 1 (row) bias elements in one load each,
        the steps per element, and D stored converted: v4.f32, or two packed cvt pairs as v2.b32. An edge
        tile checks each chunk (compiler/ptx/epilogue.edge_chunk)."""
        cfg, ins, ep = self.cfg, self.ins, self.cfg.epilogue
        pitch, ab = cfg.d_pitch, self.abytes
        cpr = cfg.cta_n * ab // CHUNK
        self.global_pointer("%gd", "d")
        ins(f"and.b32 %q, %thr, {WG_THREADS - 1};")
        if ep.packs:
            self.staged_byte_out(pitch)
            return

        def body(edge: bool) -> None:
            self.chunk_origin(cpr, pitch)
            ins("ld.shared.v4.f32 {%ev0, %ev1, %ev2, %ev3}, [%x];")
            ins("add.u32 %pm, %pm, %m0;                      // row of D")
            ins(f"mad.lo.u32 %pn, %pn, {CHUNK // ab}, %n0;              // column of D")
            if edge:
                self.chunk_guards(CHUNK // ab)
                epilogue.edge_chunk(self, ep, "%pm", "%pn", "%rb", ab, self.dbytes, self.convert, "%gd",
                                    "%ldc", "%ldd", ("%p8", "%p9", "%p10"), [f"%p{11 + e}" for e in range(4)])
            else:
                epilogue.chunk(self, ep, "", "%pm", "%pn", "%rb", ab, self.dbytes, self.convert, "%gd",
                               c_stride="%ldc", d_stride="%ldd")

        total = cfg.wg_m * cpr

        def edge() -> None:
            epilogue.zero_inputs(self, ep)
            self.chunk_items(cpr, total, lambda: body(True))

        self.edge_split(lambda: self.chunk_items(cpr, total, lambda: body(False)), edge)

    def staged_byte_out(self, pitch: int) -> None:
        """The copy-out of a 1-byte D (compiler/ptx/epilogue.byte_chunk): per D chunk of `groups` x 4
        elements (16 bytes where cta N allows), one packed vector store; an edge tile checks each chunk."""
        cfg, ep = self.cfg, self.cfg.epilogue
        groups = epilogue.byte_groups(ep, cfg.cta_n)
        per = epilogue.GROUP * groups
        cpr = cfg.cta_n // per
        total = cfg.wg_m * cpr

        def body(edge: bool) -> None:
            self.chunk_origin(cpr, pitch, CHUNK * groups)
            self.ins("add.u32 %pm, %pm, %m0;                      // row of D")
            self.ins(f"mad.lo.u32 %pn, %pn, {per}, %n0;              // column of D")
            guards = None
            if edge:
                self.chunk_guards(per)
                guards = ("%p8", "%p9", "%p10", "%p11", "%y")
            epilogue.byte_chunk(self, ep, groups, "%x", "%pm", "%pn", "%rb", "%gd", "%ldc", "%ldd", guards)

        def edge() -> None:
            epilogue.zero_inputs(self, ep)
            self.chunk_items(cpr, total, lambda: body(True))

        self.edge_split(lambda: self.chunk_items(cpr, total, lambda: body(False)), edge)

    def staged_edge_out(self, cpr: int, pitch: int, db: int, block: int = 0, col: int = 0) -> None:
        """The copy-out of an edge tile (staging pass `block`, column block `col`): a loop over the warpgroup's
        16-byte chunks of the pass's rows; a chunk whose row exists is stored whole where it lies inside D,
        else element by element up to column N."""
        ins = self.ins
        per = CHUNK // db

        def body() -> None:
            self.chunk_origin(cpr, pitch, block=block)
            ins("ld.shared.v4.b32 {%v0, %v1, %v2, %v3}, [%x];")
            ins("add.u32 %pm, %pm, %m0;")
            ins(f"mad.lo.u32 %pn, %pn, {per}, %n0;")
            if col:
                ins(f"add.u32 %pn, %pn, {col * self.cfg.d_piece_cols};             // in column block {col}")
            self.chunk_guards(per)
            ins("mul.wide.u32 %rp, %pm, %ldd;")
            ins("cvt.u64.u32 %off, %pn;")
            ins("add.u64 %rp, %rp, %off;")
            ins(f"mad.lo.u64 %rp, %rp, {db}, %gd;")
            ins("@%p9 st.global.v4.b32 [%rp], {%v0, %v1, %v2, %v3};")
            for e in range(per):
                word = f"%v{e * db // 4}"
                ins(f"add.u32 %y, %pn, {e};")
                ins("setp.lt.and.u32 %p11, %y, %N, %p10;")
                if db == 2 and e % 2:
                    ins(f"shr.b32 %h, {word}, 16;")
                    word = "%h"
                ins(f"@%p11 st.global.b{8 * db} [%rp+{e * db}], {word};")

        self.chunk_items(cpr, self.cfg.d_block_rows * cpr, body)

    def epilogue(self) -> None:
        cfg, ins = self.cfg, self.ins
        if cfg.epilogue is not None:
            epilogue.load_params(self, cfg.epilogue, "%rb")
        if not cfg.staged_d:
            ins("// accumulators -> D, fragment by fragment")
            if cfg.epilogue is not None:
                self.direct_epilogue_pointers()
            self.global_pointer("%gd", "d")
            self.global_fragment_ptr("%gd", self.dbytes, "%ldd")

            def direct(edge: bool) -> None:
                if edge and cfg.epilogue is not None:
                    epilogue.zero_inputs(self, cfg.epilogue)
                for _j, i, r, c in self.pairs():
                    if edge:
                        self.pair_guards(r, c)
                    if cfg.epilogue is not None:
                        self.apply_epilogue(i, r, c, edge)
                    ins(f"mad.wide.u32 %gc, %ldd, {r * self.dbytes}, %rp;" if r else "mov.u64 %gc, %rp;")
                    if cfg.epilogue is not None and cfg.epilogue.packs:
                        self.store_packed_pair(i, c, edge)
                        continue
                    if not edge:
                        self.store_acc_pair("global", f"[%gc+{c * self.dbytes}]", i)
                        continue
                    for e in range(2):
                        self.store_element(f"@%p{8 + e} ", f"[%gc+{(c + e) * self.dbytes}]", f"%acc{i + e}",
                                           self.dbytes, self.convert)

            self.edge_split(lambda: direct(False), lambda: direct(True))
            return
        pitch, db = cfg.d_pitch, (self.abytes if cfg.epilogue_in_copy_out else self.dbytes)
        bulk = cfg.bulk_copy_out
        rows = cfg.d_block_rows
        if cfg.persistent:
            ins(f"// accumulators -> padded D tile in its own region (pitch {pitch} B) -> "
                + ("a bulk copy per row (interior tiles) or coalesced stores" if bulk else "coalesced stores")
                + (f"; one m64 block ({rows} rows a warpgroup) at a time" if rows != cfg.wg_m else "")
                + (f"; in {cfg.d_col_blocks} column blocks of {cfg.d_piece_cols} columns ({pitch - 16} B a row piece)"
                   if cfg.d_col_blocks > 1 else ""))
        else:
            ins(f"// accumulators -> padded D tile in the drained ring (pitch {pitch} B) -> coalesced stores")
            ins("fence.proxy.async.shared::cta;              // the ring was last touched by the async proxy")
            ins(f"bar.sync 1, {WG_THREADS * cfg.consumers};               // every consumer is done with the ring")
        for block in range(cfg.wg_m // rows):
            for col in range(cfg.d_col_blocks):
                if cfg.persistent:
                    self.restage_sync(block, col, bulk)
                self.stage_block(block, col, pitch, db)
                if cfg.epilogue_in_copy_out:           # one tile per CTA: one pass
                    self.staged_epilogue_out()
                    return
                self.copy_out_block(block, col, pitch, db, bulk)

    def restage_sync(self, block: int, col: int, bulk: bool) -> None:
        """Persistent CTAs, before staging pass (`block`, `col`) into the warpgroup's region: the region's last
        readers are done. With bulk copies each thread waits until its own copy of the region's rows has read them
        (`cp.async.bulk.wait_group.read 0`, PTX 9.7.9.25, compiler/isa/bulk_copy.py: the reads of the bulk groups done, the writes to
        global memory may still be in flight), then the warpgroup meets, so no thread restages a row another
        thread's copy is reading; chunk loops (edge tiles) finish at the barrier. Pass (0, 0) waits for the
        last pass of the previous tile, any other for the pass before it (column blocks of an m64 block in
        turn, then the next block)."""
        cfg, ins = self.cfg, self.ins
        first = block == 0 and col == 0
        prev_block, prev_col = (block, col - 1) if col else (block - 1, cfg.d_col_blocks - 1)
        prev = f"m64 block {prev_block}"
        if cfg.d_col_blocks > 1:
            lo = prev_col * cfg.d_piece_cols
            prev += f" columns {lo}..{lo + cfg.d_piece_cols - 1}"
        if bulk:       # the async proxy may still be reading the row this thread handed it
            if first:
                ins(bulk_copy.wait_group(0, read=True) + "         // this thread's bulk copy of its last row has "
                    "read the region (cp.async.bulk.wait_group, PTX 9.7.9.25)")
            else:
                ins(bulk_copy.wait_group(0, read=True) + f"         // its bulk copy of {prev} has "
                    "read the region (cp.async.bulk.wait_group, PTX 9.7.9.25)")
        ins("add.u32 %z, %wg, 2;")
        ins(f"bar.sync %z, {WG_THREADS};                    // " + (
            "this warpgroup's copy-out of its last tile is done" if first else
            f"this warpgroup's copy-out of {prev} has read the region"))

    def stage_block(self, block: int, col: int, pitch: int, db: int) -> None:
        """Staging pass (`block`, `col`): the accumulator pairs of its rows (and column block) into the region
        (after the fused epilogue on the registers in persistent CTAs), then, for the bulk copies, the proxy
        fence, and the warpgroup's barrier."""
        cfg, ins = self.cfg, self.ins
        if cfg.epilogue is not None and not cfg.epilogue_in_copy_out:
            self.stage_after_epilogue(pitch, block, col)
        else:
            self.thread_row(cfg.d_block_rows)
            ins(f"mad.lo.u32 %x, %x, {pitch}, {self.dbase};")
            ins(f"mad.lo.u32 %x, %y, {db}, %x;")
            if cfg.epilogue is not None:           # the raw accumulators; the epilogue runs in the copy-out
                for i, _r, rr, _c, cc in self.staged_pairs(block, col):
                    ins(f"st.shared.v2{self.acc} [%x+{rr * pitch + cc * db}], {{%acc{i}, %acc{i + 1}}};")
            else:
                for i, _r, rr, _c, cc in self.staged_pairs(block, col):
                    self.store_acc_pair("shared", f"[%x+{rr * pitch + cc * db}]", i)
        if cfg.bulk_copy_out:  # the staged rows (generic proxy) ordered before the bulk copies read them (async
            # proxy): each thread fences its own stores, the barrier then orders them before every issuer
            # (PTX ISA memory consistency model, proxies; 9.7.13.4 fence.proxy.async)
            ins("fence.proxy.async.shared::cta;              // the staged rows, visible to the bulk copies")
        ins("add.u32 %z, %wg, 2;")
        ins(f"bar.sync %z, {WG_THREADS};                    // this warpgroup's rows are staged")

    def copy_out_block(self, block: int, col: int, pitch: int, db: int, bulk: bool) -> None:
        """The copy-out of staging pass (`block`, `col`) (the warpgroup's d_block_rows rows from row rows * block
        of its share of the tile; of them the d_piece_cols columns of column block `col`): an interior tile by
        bulk copies (or coalesced vector stores), an edge tile by the predicated chunk loop."""
        cfg, ins = self.cfg, self.ins
        rows, cols = cfg.d_block_rows, cfg.d_piece_cols
        cpr = cols * db // CHUNK
        total = rows * cpr
        self.global_pointer("%gd", "d")
        if not bulk:
            ins(f"mul.wide.u32 %off, %ldd, {db};")
        ins(f"and.b32 %q, %thr, {WG_THREADS - 1};")

        def bulk_rows() -> None:
            """Thread q < rows of the warpgroup hands the pass's row q (of d_piece_cols * db bytes: the whole
            row, or the column block's piece of it) to the copy engine: one bulk copy and one bulk group per
            thread (one row a thread rather than half a row each for 128 threads: fewer, larger copies, and
            half a piece need not be a multiple of 16); its reads are waited for before the region is staged
            again (restage_sync) and the whole copy before the CTA exits (`setup`)."""
            guard = ""
            if rows < WG_THREADS:
                ins(f"setp.lt.u32 %p6, %q, {rows};                 // one row per thread: {rows} rows")
                guard = "@%p6 "
            ins(f"mad.lo.u32 %pm, %wg, {rows}, %q;              // the thread's row of the "
                + ("tile" if rows == cfg.wg_m else "region"))
            ins(f"mad.lo.u32 %x, %pm, {pitch}, {self.dbase};          // its staged row")
            if rows != cfg.wg_m:   # the region's row wg*rows + q is the tile's row wg*wg_m + rows*block + q
                ins(f"mad.lo.u32 %pm, %wg, {cfg.wg_m - rows}, %pm;         // its row of the tile")
                if block:
                    ins(f"add.u32 %pm, %pm, {rows * block};                // of m64 block {block}")
            ins("add.u32 %pm, %pm, %m0;                      // its row of D")
            ins("mul.wide.u32 %rp, %pm, %ldd;")
            if col:
                ins(f"add.u32 %pn, %n0, {col * cols};               // the first column of column block {col}")
                ins("cvt.u64.u32 %off, %pn;")
            else:
                ins("cvt.u64.u32 %off, %n0;")
            ins("add.u64 %rp, %rp, %off;")
            ins(f"mad.lo.u64 %rp, %rp, {db}, %gd;")
            ins(guard + bulk_copy.store_to_global("%rp", "%x", cols * db)
                + "    // PTX 9.7.9.25.4.1: both addresses and the size multiples of 16")
            ins(bulk_copy.COMMIT_GROUP)

        def interior() -> None:
            self.chunk_cursor(cpr)
            for r, guard in enumerate(self.thread_rounds("%z", "%q", WG_THREADS, total, "%p6")):
                if r:
                    self.chunk_next(cpr)
                self.chunk_origin(cpr, pitch, block=block)
                ins(f"{guard}ld.shared.v4.b32 {{%v0, %v1, %v2, %v3}}, [%x];")
                ins("add.u32 %pm, %pm, %m0;")
                ins("cvt.u64.u32 %rp, %pm;")
                ins("mul.lo.u64 %rp, %rp, %off;")
                ins(f"mad.lo.u32 %pn, %pn, {CHUNK // db}, %n0;")
                if col:
                    ins(f"add.u32 %pn, %pn, {col * cols};             // in column block {col}")
                ins(f"mul.wide.u32 %gc, %pn, {db};")
                ins("add.u64 %rp, %rp, %gc;")
                ins("add.u64 %rp, %rp, %gd;")
                ins(f"{guard}st.global.v4.b32 [%rp], {{%v0, %v1, %v2, %v3}};")

        self.edge_split(bulk_rows if bulk else interior, lambda: self.staged_edge_out(cpr, pitch, db, block, col))


def emit_sparse_wgmma(cfg: SparseWgmmaConfig, ring: RingPlan | None = None) -> SparseWgmmaPTX:
    """Emit the PTX module of the sparse wgmma GEMM `cfg` (same config -> same bytes) with the smem ring
    `ring` (the pipeline-planning pass's tilec.pipeline; None: the config's own plan, cfg.ring)."""
    ptx = check_config(cfg)
    if ring is not None and ring != cfg.ring:
        differ = ", ".join(f"{k} {v} (the kernel's slots need {cfg.ring.attrs()[k]})"
                           for k, v in ring.attrs().items() if v != cfg.ring.attrs()[k])
        raise SpecError(f"the ring plan disagrees with the kernel's slots: {differ}", field="schedule.stages")
    w = _Writer(cfg, ptx)
    w.header()
    w.setup()
    return SparseWgmmaPTX(cfg.name, w.render(), ptx, cfg.target, _abi(cfg, ptx, w.params))


def padded_sizes(abi: dict, m: int, k: int) -> dict[str, int]:
    """The granularities compiler/sparse.py's layouts need, for an M x K A (the host packer pads A with
    zeros to them): `k_values`, K rounded up to the instruction K (the compressed values' columns are
    k_values / 2: the metadata describes whole k-steps); `meta_rows` (16-row tiles) and `meta_words` (the
    ABI's words per k-step: 16 compact, 32 with every lane; `meta_steps` k-steps) cover every CTA tile (of
    a CTA pair) and K block the kernel walks, so the copy engine never
    reads a metadata word out of bounds: a zero-filled word would be the nibble 0b0000, which PTX ISA
    9.7.14.6.1 calls invalid (undefined behaviour); the packer's padding holds legal nibbles instead."""
    fk, tk = abi["form_k"], abi["tile_k"]
    tm = abi["tile_m"] * abi["cluster"][0]
    words = abi["buffers"]["a_metadata"]["shape"][-1]
    steps = -(-k // tk) * tk // fk
    return {"k_values": -(-k // fk) * fk, "meta_rows": -(-m // tm) * tm // SHAPE_M, "meta_steps": steps,
            "meta_words": steps * words}


def metadata_coordinate_limit(cfg: SparseWgmmaConfig) -> list[str]:
    """TMA tensor coordinates are signed 32-bit (PTX ISA 9.7.9.25.5.1, cp.async.bulk.tensor: the tensorCoords
    vector is .s32): the metadata box of K block kb starts at x = kb * ksteps * w words (w = words per k-step:
    16 compact, 32 with every lane), its last word at Kb / k * w - 1 (Kb = K in whole K blocks), which must
    stay below 2^31. Where w <= k (every form with its layout today: f16/bf16 k = 32 and tf32 k = 16 compact,
    8-bit k = 64 with 32 words) that is implied by K < 2^31; more than one word a K element would pass 2^31
    before K itself does."""
    tk, fk, words = cfg.cta_k, cfg.form.k, len(cfg.meta_lanes)
    if words <= fk:                                 # at most one word a K element: Kb <= 2^31 covers it
        return []
    return [f"(K + {tk - 1}) // {tk} * {tk} // {fk} * {words} <= {1 << 31}"]


def _abi(cfg: SparseWgmmaConfig, ptx: Version, params) -> dict:
    form = cfg.form
    maps = [{"operand": t.operand, "elem_bits": t.elem_bits, "data_type": TMA_DATA_TYPE[t.elem_bits],
             "swizzle": t.swizzle, "box": list(t.box)} for t in tensor_map_specs(cfg)]
    buffers = operand_buffers(form, cfg.out_type)
    fk, tk, tm = form.k, cfg.cta_k, cfg.cta_m * cfg.cluster_m
    pitched = ("rows any number of elements apart (the launch's `{}`, in elements) whose bytes are a multiple of "
               "16; 16-byte aligned")
    buffers["a_values"].update(shape=["M", f"(K + {fk - 1}) // {fk} * {fk // 2}"],
                               bytes=f"M*((K + {fk - 1}) // {fk} * {fk})*{cfg.storage_bits}/16",
                               layout=f"row-major compressed A of A padded with zero columns to a multiple of {fk} "
                                      "(sparse.compress_padded values)")
    buffers["a_metadata"].update(shape=[f"(M + {tm - 1}) // {tm} * {tm // SHAPE_M}",
                                        f"(K + {tk - 1}) // {tk} * {tk // fk}", len(cfg.meta_lanes)],
                                 layout=f"sparse.compress metadata of A padded with zero elements to whole {tm}-row tiles "
                                        f"and {tk}-element K blocks (sparse.compress_padded"
                                        + (", compact=True: per 16-row tile and k-step the 16 words of lanes "
                                           "4*(j//2) + j%2)" if cfg.compact_metadata else ")"))
    if cfg.compact_metadata:      # which lanes' words the buffer keeps (compiler/sparse.py, compact metadata)
        buffers["a_metadata"]["lanes"] = list(cfg.meta_lanes)
    buffers["b"].update(pitch="tensor map", layout="B transposed: row n holds column n of B (sparse.pack_b); rows "
                        "any multiple of 16 bytes apart (the tensor map's stride); 16-byte aligned")
    buffers["b"].pop("bytes", None)
    buffers["d"].update(pitch="ldd", layout="row-major (written); " + pitched.format("ldd"))
    if cfg.accumulate_c:
        buffers["c"] = {"element": cfg.acc_type, "shape": ["M", "N"], "pitch": "ldc",
                        "layout": "row-major; " + pitched.format("ldc")}
    # a batch: every buffer but the bias (shared by all batches) may have a leading batch dimension, its
    # stride in the tensor map (A values, metadata, B: a multiple of 16 bytes) or a kernel parameter (C, D)
    for name in ("a_values", "a_metadata", "b", "c", "d"):
        if name in buffers:
            buffers[name]["batch_stride"] = f"batch_stride_{name}" if name in ("c", "d") else "tensor map"
    extra = epilogue.abi_entries(cfg.epilogue, buffers)
    tiles_m, tiles_n = f"((M + {tm - 1}) // {tm}) * {cfg.cluster_m}", f"((N + {cfg.cta_n - 1}) // {cfg.cta_n})"
    cm, S = cfg.cluster_m, cfg.split_k
    # split-K: split_k CTAs per tile; persistent: as many CTAs (pairs) per batch as run at once, never more
    # than there are work items
    work = "tiles" if S == 1 else f"tiles * {S}"
    if cfg.stream_k:       # stream-K: as many CTAs as run at once share the batch's (tile, K block) iterations
        work = f"tiles * ((K + {cfg.cta_k - 1}) // {cfg.cta_k})"
    grid_x = work
    if cfg.persistent:
        grid_x = (f"min({work}, multiprocessors * max_ctas_per_sm)" if cm == 1 else
                  f"{cm} * min({work} // {cm}, multiprocessors * max_ctas_per_sm // {cm})")
    scratch = {}
    limits = []
    if cfg.stream_k:
        scratch = {"scratch": {
            "workspace": {"element": cfg.acc_type, "shape": ["batch", f"2 * {grid_x}", cfg.cta_m * cfg.cta_n],
                          "zeroed": False,
                          "layout": f"per (batch, CTA c of the grid's x) two {cfg.cta_m} x {cfg.cta_n} partials (the "
                                    "kernel's fragment order): slot 2c for c's segment from K block 0 that ends "
                                    "inside a tile, 2c + 1 for its segment that starts inside one; no initial "
                                    "contents needed"},
            "semaphores": {"element": "u32", "shape": ["batch", "tiles"], "zeroed": True,
                           "layout": "one arrival counter per (batch, tile): zero before the first launch; every "
                                     "launch leaves it zero (the reducing CTA resets it). Launches sharing the "
                                     "scratch must not run concurrently"}}}
        limits = cfg.stream_limits
    elif cfg.sliced:
        scratch = {"scratch": {
            "workspace": {"element": cfg.acc_type, "shape": ["batch", f"tiles * {S}", cfg.cta_m * cfg.cta_n],
                          "zeroed": False,
                          "layout": f"per (batch, tile, K slice) one slice's {cfg.cta_m} x {cfg.cta_n} partial "
                                    "accumulators (the kernel's fragment order); no initial contents needed"},
            "semaphores": {"element": "u32", "shape": ["batch", "tiles"], "zeroed": True,
                           "layout": "one arrival counter per (batch, tile): zero before the first launch; every "
                                     "launch leaves it zero (the reducing CTA resets it). Launches sharing the "
                                     "scratch must not run concurrently"}}}
        # the slice's K blocks sl * nkb (< S * nkb) and the partial index (batch * tiles + tile) * S + sl are u32
        limits = [f"(K + {cfg.cta_k - 1}) // {cfg.cta_k} * {S} < {1 << 32}", f"batch * tiles * {S} < {1 << 32}"]
    return {
        **abi_head(cfg.name, "sparse_wgmma", form.name, wgmma_opcode(cfg), cfg.target, ptx, params, buffers),
        "tensor_maps": maps,
        "metadata": "runtime",
        "selector": cfg.selector,
        "tile_m": cfg.cta_m, "tile_n": cfg.cta_n, "tile_k": cfg.cta_k, "form_k": form.k,
        "consumers": cfg.consumers, "stages": cfg.stages, "raster_group": cfg.raster_group,
        "cluster": [cfg.cluster_m, 1, 1],
        "persistent": cfg.persistent,
        # every thread waits (griddepcontrol.wait) before its first global access: a launch with the
        # programmatic stream serialization attribute may overlap the grid before it, and gives the same D
        "programmatic_launch": True,
        "split_k": S,
        "max_ctas_per_sm": 1,
        "block": [cfg.threads, 1, 1],
        "grid": [grid_x, "batch", 1],
        # any M, N, K >= 1: the last tile row / column / K block is partial (module docstring, "Edges")
        "tiles": f"{tiles_m} * {tiles_n}",
        "dynamic_smem_bytes": cfg.smem_bytes,
        "requires": [],
        # the raster's tiles per group (N / cta_n) * raster_group is a u32 product (_Writer.raster)
        "limits": launch_limits("MNK", ["tiles" if cfg.stream_k else work, "batch"]) + [f"{tiles_n} * {cfg.raster_group} < {1 << 32}"] + limits
                  + metadata_coordinate_limit(cfg),
        **({"promote": cfg.promote} if cfg.promote is not None else {}),
        "batch": "grid y: the batch index; C and D at batch_stride_c / batch_stride_d elements per batch, A, "
                 "metadata and B through rank-3 tensor maps (their batch strides in the maps)",
        **extra,
        **scratch,
    }


# --------------------------------------------------------------------------------------------------
# Host side: tensor maps (CUDA driver, ctypes; imported lazily, nothing at module import)
# --------------------------------------------------------------------------------------------------

def tensor_map_args(abi: dict, m: int, n: int, k: int, row_bytes: dict[str, int] | None = None, batch: int = 1,
                    batch_bytes: dict[str, int] | None = None) -> list[dict]:
    """Per tensor map: the cuTensorMapEncodeTiled arguments (rank 3: elements, rows, batches) for a
    batch of M x N x K problems, except the global address. dims/strides/box in CUDA's order (innermost
    first; strides in bytes, rank-1). The dims are the true extents (the copy engine fills a box's
    elements beyond them with zeros: the edges of M and N and the K tail; a box is one batch deep, so
    no batch reads its neighbour's rows); `row_bytes` / `batch_bytes` give an operand's row / batch
    stride where it is not that of a packed array (B with padded rows, a strided batch)."""
    pad = padded_sizes(abi, m, k)
    out = []
    for t in abi["tensor_maps"]:
        eb = t["elem_bits"]
        op = t["operand"]
        inner, rows = {"a_values": (pad["k_values"] // 2, m), "b": (k, n),
                       "a_metadata": (pad["meta_words"], pad["meta_rows"])}[op]
        stride = (row_bytes or {}).get(op, inner * eb // 8)
        between = (batch_bytes or {}).get(op, stride * rows)
        out.append({"operand": op, "data_type": t["data_type"], "dims": (inner, rows, batch),
                    "strides": (stride, between), "box": (*t["box"], 1), "element_strides": (1, 1, 1),
                    "swizzle": TMA_SWIZZLE[t["swizzle"]], "l2_promotion": TMA_L2_PROMOTION_256B})
    return out


def encode_tensor_maps(abi: dict, m: int, n: int, k: int, addresses: dict[str, int],
                       row_bytes: dict[str, int] | None = None, batch: int = 1,
                       batch_bytes: dict[str, int] | None = None) -> bytes:
    """The 3 x 128 bytes of the kernel's `tensor_maps` parameter, encoded by the CUDA driver
    (cuTensorMapEncodeTiled through ctypes); `addresses` maps a_values / b / a_metadata to device
    pointers. Copy the result to 64-byte-aligned global memory before the launch."""
    return encode_tiled_maps(tensor_map_args(abi, m, n, k, row_bytes, batch, batch_bytes), addresses)


def encode_tiled_maps(maps: list[dict], addresses: dict[str, int]) -> bytes:
    """128 bytes per map of `maps` (cuTensorMapEncodeTiled's arguments as `tensor_map_args` gives them:
    data_type, dims and strides innermost first, box, element_strides, swizzle, l2_promotion; `operand`
    names the buffer in `addresses`), encoded by the CUDA driver through ctypes, in order. Any kernel's
    maps (this one's, compiler/ptx/tcgen05_ws_kernel.tensor_map_args) go through here."""
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuInit(0)                                   # idempotent; the process's CUDA runtime did it already
    fn = lib.cuTensorMapEncodeTiled
    u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    out = b""
    for a in maps:
        # the CUtensorMap the driver writes must be 64-byte aligned: over-allocate and align
        buf = (ctypes.c_uint8 * (TMA_MAP_BYTES + 64))()
        at = (ctypes.addressof(buf) + 63) // 64 * 64
        rank = len(a["dims"])
        dims = (ctypes.c_uint64 * rank)(*a["dims"])
        strides = (ctypes.c_uint64 * (rank - 1))(*a["strides"])
        box = (ctypes.c_uint32 * rank)(*a["box"])
        estr = (ctypes.c_uint32 * rank)(*a["element_strides"])
        rc = fn(at, a["data_type"], rank, addresses[a["operand"]], dims, strides, box, estr,
                0, a["swizzle"], a["l2_promotion"], 0)       # interleave NONE; OOB fill NONE: zeros beyond dims
        if rc != 0:
            raise RuntimeError(f"cuTensorMapEncodeTiled({a['operand']}) failed with CUresult {rc}: {a}")
        out += ctypes.string_at(at, TMA_MAP_BYTES)
    return out


# --------------------------------------------------------------------------------------------------
# DSL: `schedule ... mma=wgmma` (compiler/passes/verify.py checks, compiler/ptx/emission.py emits)
# --------------------------------------------------------------------------------------------------

def config_from_schedule(name: str, form: Form, target: str, ptx_version: Version | None, schedule,
                         selector: int, static_metadata, accumulate_c: bool = True, d_type: str | None = None,
                         epilogue: EpiloguePlan | None = None) -> SparseWgmmaConfig:
    """The kernel of a tile with `schedule cta=MxNxK warps=Wx1 stages=S mma=wgmma`: W = 4, 8 or 12 consumer
    warps (1, 2 or 3 consumer warpgroups; a producer warpgroup is added), D = A*B + C in the accumulator type."""
    if static_metadata is not None:
        raise SpecError("mma=wgmma reads the metadata from memory (runtime metadata); this tile embeds it",
                        field="schedule.mma", hint="write 'metadata=runtime' or use mma=sync")
    if schedule.warps_n != 1 or schedule.warps_m % 4 or not 1 <= schedule.warps_m // 4 <= MAX_CONSUMERS:
        raise SpecError(f"warps={schedule.warps_m}x{schedule.warps_n}: mma=wgmma takes 4, 8 or 12 consumer warps "
                        f"along M (1 to {MAX_CONSUMERS} warpgroups; each warp supplies the metadata of 16 rows, PTX "
                        f"9.7.15.6.2)", field="schedule.warps", hint="write warps=8x1")
    if schedule.persistent not in ("none", "static"):
        raise SpecError(f"persistent={schedule.persistent}: the wgmma kernel's persistent CTAs are scheduled "
                        f"statically", field="schedule.persistent", hint="write persistent=static")
    raster = {} if schedule.raster is None else {"raster_group": schedule.raster}
    return SparseWgmmaConfig(name, form, target, cta_m=schedule.cta_m, cta_n=schedule.cta_n, cta_k=schedule.cta_k,
                             consumers=schedule.warps_m // 4, stages=schedule.stages, selector=selector,
                             ptx_version=ptx_version, cluster_m=schedule.cluster, accumulate_c=accumulate_c,
                             d_type=d_type, epilogue=epilogue,
                             persistent=schedule.persistent == "static" or schedule.split_k == SPLIT_K_STREAM,
                             promote=getattr(schedule, "promote", None), split_k=schedule.split_k, **raster)
