"""The sparse wgmma kernel's metadata TMA x coordinate (issue 17 follow-up): TMA coordinates are s32 (PTX ISA
9.7.9.25.5.1), and the metadata map holds w words per k-step (16 compact, 32 with every lane), i.e. w / k
words per K element. With more than one (tf32, k = 16, with all 32 lanes: 2) its x coordinate passes 2^31
once K (in whole K blocks) passes 2^30, while K itself may reach 2^31 - 1; the ABI's `limits` then state the
true bound and compiler.runtime refuses a launch beyond it (ArgumentError naming the condition, through
abi.unmet). Since tf32 takes the compact layout (16 words: one per K element) every form reaches K = 2^31 - 1;
the bound's mechanism is checked on a tf32 kernel forced to the 32-lane layout."""
from __future__ import annotations

import pytest

from compiler.isa.mma_sp.forms import find_form
from compiler.ptx.sparse_wgmma_kernel import SparseWgmmaConfig, emit_sparse_wgmma, tma_boxes
from compiler.runtime import abi as rabi

TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
S8 = find_form("m16n8k64", "s8", "s8", "s32", "s32")


def last_metadata_word(cfg: SparseWgmmaConfig, k: int) -> int:
    """The largest x coordinate any metadata word of a K x ... problem has: the last K block's box start
    (kb * x_per_block, tma_boxes) plus its width - 1."""
    box = next(b for b in tma_boxes(cfg) if b.tensor == 2)
    blocks = -(-k // cfg.cta_k)
    return (blocks - 1) * box.x_per_block + box.inner - 1


@pytest.mark.parametrize("cta_k", [16, 32, 64])
def test_tf32_metadata_coordinate_bounds_k(cta_k):
    cfg = SparseWgmmaConfig("w", TF32, cta_k=cta_k, stages=2)
    cfg.__dict__["meta_lanes"] = tuple(range(32))      # the 32-lane layout (cached_property's slot)
    abi = emit_sparse_wgmma(cfg).abi
    largest = rabi.largest(abi, "K")
    assert largest == 1 << 30                                       # Kb / 16 * 32 <= 2^31
    assert last_metadata_word(cfg, largest) == (1 << 31) - 1        # the last word's coordinate still fits s32
    assert last_metadata_word(cfg, largest + 1) >= 1 << 31          # one K element more would not
    bad = rabi.unmet(abi, 128, 256, largest + 1)
    assert bad == [f"(K + {cta_k - 1}) // {cta_k} * {cta_k} // 16 * 32 <= {1 << 31}"]


@pytest.mark.parametrize("form,cta_k", [(F16, 64), (S8, 64), (TF32, 16)])
def test_other_forms_reach_k_below_2_31(form, cta_k):
    cfg = SparseWgmmaConfig("w", form, cta_k=cta_k)
    abi = emit_sparse_wgmma(cfg).abi
    assert rabi.largest(abi, "K") == (1 << 31) - 1
    assert last_metadata_word(cfg, (1 << 31) - 1) < 1 << 31
