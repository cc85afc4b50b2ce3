"""`pipeline-planning`: the shared-memory ring of each TMA-fed kernel (compiler/ptx/pipeline.py RingPlan),
printed as `tilec.pipeline {k_block, stages, smem_bytes, stage_bytes, tx_bytes, full_arrivals,
empty_arrivals, barrier_offset}` on the tile. A codegen pass (it lives beside the kernels, as
kernel-selection does): a ring's bytes are its kernel's slot geometry. ptx-emission hands the printed
plan to the kernel, which emits its barrier protocol from it (compiler/ptx/pipeline.py RingCode) and
refuses a plan that disagrees with its slots.

Tiles planned: those whose kernel is the sparse wgmma GEMM (a TMA producer warp, consumer warpgroups), and
scheduled tcgen05 tiles (the warp-specialised kernel, compiler/ptx/tcgen05_ws_kernel.py), whose
`tilec.pipeline` from layout-selection (k_block, stages, smem_bytes) gets the ring's fields from their
`tilec.ws_plan`. The other tcgen05 kernels keep layout-selection's stage plan.
"""
from __future__ import annotations

from ..ir import Op
from ..passes import Pass, PassContext

RING_KERNELS = ("sparse_wgmma",)


class PipelinePlanning(Pass, name="pipeline-planning", requires=("kernels",), provides=("pipeline",),
                       description="plan each TMA-fed kernel's smem ring: stages, bytes, barriers, arrivals"):

    def apply(self, module, ctx: PassContext) -> None:
        from ..passes.derive import tile_view
        from .emission import kernel_config

        def plan(tile: Op) -> None:
            if tile.op("tilec.kernel").attrs.get("kernel") == "tcgen05_ws":
                from .tcgen05_ws_kernel import smem_ring

                op = tile.op("tilec.pipeline")
                if "stage_bytes" not in op.attrs:
                    ring = smem_ring(tile)
                    ring.check()
                    op.attrs.update(ring.attrs())
                return
            if tile.op("tilec.kernel").attrs.get("kernel") not in RING_KERNELS or tile.op("tilec.pipeline"):
                return
            cfg = kernel_config(tile_view(tile), module)
            ring = cfg.ring
            ring.check()
            tile.body.append(Op("tilec.pipeline", None, {"k_block": cfg.cta_k, "stages": ring.stages,
                                                          "smem_bytes": cfg.smem_bytes, **ring.attrs()},
                                loc=tile.locs.get("schedule", tile.loc)))

        ctx.each_tile(module, plan, having="tilec.kernel", field="schedule")

