"""A complete `.entry` kernel for one dense tcgen05 tile (cta_group::1, A and B from shared memory;
optional disable-output-lane masks and scale-input-d; `.ws` with M=128 and its zero-column mask).
Tiles outside that subset are rejected by `check_kernel_support`, which layout-selection calls.

Kernel ABI (also reported by `tilec compile --emit json`):
  params : A (u64), B (u64), D (u64) global pointers; m_total, n_total (u32) problem sizes, multiples of
           the tile's M and N. K is the tile's `loop K` (fixed).
  data   : A is [m_total][K] row-major when A is K-major, [K][m_total] when MN-major;
           B is [n_total][K] row-major when K-major (i.e. B transposed), [K][n_total] when MN-major;
           D is [m_total][n_total] row-major in the D type. Elements are stored at their container
           width (the same bytes the smem layout holds).
  launch : grid (n_total / N, m_total / M, 1), block (128, 1, 1), static shared memory only.

Per CTA: warp 0 allocates TMEM (PTX 9.7.16.7.1); thread 0 initializes an mbarrier. For each K stage
all 128 threads copy A and B from global memory into the canonical swizzled layout chosen by
layout-selection (16-byte chunks, the offset computed from the layout's copy map), make the writes
visible to the async proxy (`fence.proxy.async.shared::cta`, PTX 9.7.16.6.5), and thread 0 issues the
stage's `tcgen05.mma`s with the materialized descriptors (enable-input-d false only for the very first)
and `tcgen05.commit`s to the mbarrier; everyone waits on the barrier's phase. Finally each warp reads
its 32 TMEM lanes with `tcgen05.ld.32x32b.x8` (PTX 9.7.16.8.3; D layout of 9.7.16.10.5: lane = row for
M=128, Layout F lanes 32*(i>>4)+(i&15) for M=64) and stores D; warp 0 frees TMEM.
"""
from __future__ import annotations

import re

from ..diagnostics import SpecError
from ..ir import Op
from ..tcgen05_forms import DISABLE_LANE_REGS, SCALE_INPUT_D_RANGE
from ..types import TYPES
from .builder import KernelBuilder

THREADS = 128

# PTX 4.4 "Identifiers": [a-zA-Z]{followsym}* | [_$%]{followsym}+ with followsym = [a-zA-Z0-9_$]. The tile
# name becomes the .entry name (and prefixes the kernel's .shared symbols). WARP_SZ is a predefined
# identifier (PTX 4.4, "Predefined Identifiers"; ptxas 13.0 rejects an entry of that name).
_PTX_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_$]*|[_$%][A-Za-z0-9_$]+")
_PREDEFINED_IDENTIFIERS = ("WARP_SZ",)


def _collector_reuses(spec) -> bool:
    """`::use` / `::lastuse` read a collector buffer filled by an earlier MMA with the same A (or B for
    .ws) source (PTX 9.7.16.10.9.1 .collector_usage). Every MMA of this kernel reads a different K step,
    so such a buffer would hold stale data."""
    return spec.collector is not None and spec.collector.split("::")[-1] in ("use", "lastuse")


# What this emitter does not generate. Rows: (applies to the spec, field to blame, message, hint).
# Checked by layout-selection (check_kernel_support) so the user gets a located diagnostic, not a crash.
_UNSUPPORTED = (
    (lambda s: s.cta_group != 1, "engine.cta_group",
     "the tcgen05 kernel emitter handles cta_group::1 only (a CTA pair needs a cluster launch)",
     "use cta_group=1"),
    (lambda s: s.operands["A"].space != "smem", "A.space",
     "the tcgen05 kernel emitter stages A through shared memory only (A in tensor memory needs tcgen05.cp)",
     "write 'A: <type> smem;'"),
    (lambda s: s.block_scale is not None or "SFA" in s.operands or "SFB" in s.operands, "block_scale",
     "the tcgen05 kernel emitter does not load block-scale factors into tensor memory yet", None),
    # .ws D layouts (PTX 9.7.16.10.5): M=128 is Layout D like the non-ws form; M=64 / M=32 are layouts E / G,
    # which the epilogue does not read.
    (lambda s: s.ws and s.m != 128, "shape.M",
     "the tcgen05 kernel emitter reads D of tcgen05.mma.ws only for M=128 (data-path Layout D)", "use M=128"),
    (_collector_reuses, "engine.collector",
     "collector ::use / ::lastuse would read a buffer holding another K step's operand: every MMA of this "
     "kernel reads a new K step", "use ::fill or ::discard, or drop collector="),
)


def check_kernel_support(spec) -> None:
    """Raise SpecError (with the field to blame) for a legal tile this emitter cannot turn into a kernel,
    and for operand values the instruction text needs but nothing upstream bounds."""
    if not _PTX_IDENTIFIER.fullmatch(spec.name) or spec.name in _PREDEFINED_IDENTIFIERS:
        raise SpecError(f"tile name '{spec.name}' is not a valid PTX identifier (it names the .entry)", "tile",
                        "use letters, digits and '_', starting with a letter (PTX 4.4)")
    for applies, field, message, hint in _UNSUPPORTED:
        if applies(spec):
            raise SpecError(message, field, hint)
    if spec.disable_output_lane is not None:
        # 9.7.16.10.9.1: a vector of 4 (cta_group::1) .b32 masks, bit i of element 0 = TMEM lane i.
        lanes = spec.disable_output_lane
        if len(lanes) != DISABLE_LANE_REGS[spec.cta_group] or any(not 0 <= v < 1 << 32 for v in lanes):
            raise SpecError(f"disable_output_lane takes {DISABLE_LANE_REGS[spec.cta_group]} 32-bit masks with "
                            f"cta_group::{spec.cta_group}, got {list(map(hex, lanes))}",
                            "disable_output_lane.value", "bit i of mask j disables TMEM lane 32*j + i")
    if spec.scale_input_d is not None and spec.scale_input_d not in SCALE_INPUT_D_RANGE:
        # 9.7.16.10.9.1: "The valid range of values for argument scale-input-d is [0, 15]".
        raise SpecError(f"scale_input_d is an immediate in [0, 15], not {spec.scale_input_d}",
                        "scale_input_d.value", "D is scaled by 2^-scale_input_d")


def _tmem_columns(n: int) -> int:
    cols = 32
    while cols < n:
        cols *= 2
    return cols


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def emit_tcgen05_kernel(tile: Op) -> tuple[str, dict]:
    from ..tcgen05_forms import (tcgen05_alloc, tcgen05_commit, tcgen05_dealloc,
                                 tcgen05_relinquish_alloc_permit)

    spec = tile.payload
    check_kernel_support(spec)       # layout-selection reported these with a location already
    form = tile.facts["form"]
    kb_elems = tile.facts["k_block"]
    k_total = spec.total_k
    n_blocks = k_total // kb_elems
    d_type = TYPES[spec.operands["D"].dtype]
    cols = _tmem_columns(spec.n)
    kb = KernelBuilder(spec.name)
    for p in ("A", "B", "D"):
        kb.params.append(("u64", p))
    kb.params += [("u32", "m_total"), ("u32", "n_total")]
    kb.directives.append(f".reqntid {THREADS}, 1, 1")
    smem_bytes = tile.facts["smem_bytes"]
    kb.shared += [f".shared .align 1024 .b8 {spec.name}_smem[{smem_bytes}];",
                  f".shared .align 8 .b64 {spec.name}_mbar;",
                  f".shared .align 4 .b32 {spec.name}_tmem_slot;"]
    smem, mbar, slot = f"{spec.name}_smem", f"{spec.name}_mbar", f"{spec.name}_tmem_slot"
    e = kb.emit

    tid, warp, lane = kb.regs("r", 3)
    e(f"mov.u32 {tid}, %tid.x;")
    e(f"shr.u32 {warp}, {tid}, 5;")
    e(f"and.b32 {lane}, {tid}, 31;")
    p_w0, p_t0 = kb.reg("p"), kb.reg("p")
    e(f"setp.eq.u32 {p_w0}, {warp}, 0;")
    e(f"setp.eq.u32 {p_t0}, {tid}, 0;")
    kb.comment(f"warp 0 allocates {cols} TMEM columns for D ({spec.m} lanes x {spec.n} columns used)")
    skip = kb.label("alloc_done")
    e(f"@!{p_w0} bra {skip};")
    e(tcgen05_alloc(slot, cols, form.cta_group))
    e(tcgen05_relinquish_alloc_permit(form.cta_group))
    kb.put_label(skip)
    e(f"@{p_t0} mbarrier.init.shared::cta.b64 [{mbar}], 1;")
    e("tcgen05.fence::before_thread_sync;")
    e("bar.sync 0;")
    e("tcgen05.fence::after_thread_sync;")
    taddr = kb.reg("r")
    e(f"ld.shared.b32 {taddr}, [{slot}];")

    sbase = kb.reg("r")
    e(f"mov.u32 {sbase}, {smem};")
    bx, by, m0, n0 = kb.regs("r", 4)
    e(f"mov.u32 {bx}, %ctaid.x;")
    e(f"mov.u32 {by}, %ctaid.y;")
    e(f"mul.lo.u32 {m0}, {by}, {spec.m};")
    e(f"mul.lo.u32 {n0}, {bx}, {spec.n};")
    m_total, n_total = kb.regs("r", 2)
    e(f"ld.param.u32 {m_total}, [{kb.param('m_total')}];")
    e(f"ld.param.u32 {n_total}, [{kb.param('n_total')}];")
    gptr = {}
    for p in ("A", "B", "D"):
        raw, g = kb.regs("rd", 2)
        e(f"ld.param.u64 {raw}, [{kb.param(p)}];")
        e(f"cvta.to.global.u64 {g}, {raw};")
        gptr[p] = g

    # Descriptor base: the 14-bit start-address field holds (address >> 4); materialized descriptors
    # carry the offset inside the buffer, the kernel adds the buffer's own address (PTX 9.7.16.4.1).
    sb4, sb4w = kb.reg("r"), kb.reg("rd")
    e(f"shr.u32 {sb4}, {sbase}, 4;")
    e(f"cvt.u64.u32 {sb4w}, {sb4};")
    idesc = kb.reg("r")
    e(f"mov.b32 {idesc}, {int(tile.op('tilec.instr_desc').attrs['value']):#010x};")
    p_true = kb.reg("p")
    e(f"setp.eq.u32 {p_true}, 0, 0;")
    # Optional trailing operands (9.7.16.10.9.1 operand order): {disable-output-lane} .b32 masks,
    # scale-input-d immediate, and for .ws the .b64 zero-column mask descriptor (9.7.16.4.3).
    extra: dict = {}
    if spec.disable_output_lane is not None:
        lanes = kb.regs("r", len(spec.disable_output_lane))
        for reg, mask in zip(lanes, spec.disable_output_lane):
            e(f"mov.b32 {reg}, {mask:#010x};")
        extra["disable_lanes"] = lanes
    if spec.scale_input_d is not None:
        extra["scale_input_d"] = spec.scale_input_d
    zcm_op = tile.op("tilec.zero_column_mask")
    if zcm_op is not None:
        zcm = kb.reg("rd")
        e(f"mov.b64 {zcm}, {int(zcm_op.attrs['value']):#018x};")
        extra["zcm"] = zcm

    kreg, phase = kb.regs("r", 2)
    e(f"mov.u32 {kreg}, 0;")
    e(f"mov.u32 {phase}, 0;")
    loop = kb.label("k_stage")
    kb.put_label(loop)
    for name in ("A", "B"):
        lay_op = tile.op("tilec.smem_layout", name)
        if lay_op is not None:
            _emit_copy(kb, spec, name, lay_op, gptr[name], sbase, tid, kreg,
                       m0 if name == "A" else n0, m_total if name == "A" else n_total, kb_elems)
    e("fence.proxy.async.shared::cta;")
    e("bar.sync 0;")
    e("tcgen05.fence::after_thread_sync;")
    skip_mma = kb.label("mma_done")
    e(f"@!{p_t0} bra {skip_mma};")
    p_acc = kb.reg("p")
    e(f"setp.ne.u32 {p_acc}, {kreg}, 0;")
    da = tile.op("tilec.smem_desc", "A").attrs["values"]
    db = tile.op("tilec.smem_desc", "B").attrs["values"]
    for s in range(len(da)):
        ra, rb = kb.regs("rd", 2)
        e(f"add.u64 {ra}, {sb4w}, {int(da[s]):#018x};")
        e(f"add.u64 {rb}, {sb4w}, {int(db[s]):#018x};")
        e(form.render(f"[{taddr}]", ra, rb, idesc, p_acc if s == 0 else p_true, **extra))
    e(tcgen05_commit(mbar, form.cta_group))
    kb.put_label(skip_mma)
    wait = kb.label("wait")
    p_done = kb.reg("p")
    kb.put_label(wait)
    e(f"mbarrier.try_wait.parity.shared::cta.b64 {p_done}, [{mbar}], {phase};")
    e(f"@!{p_done} bra {wait};")
    e(f"xor.b32 {phase}, {phase}, 1;")
    e(f"add.u32 {kreg}, {kreg}, 1;")
    p_more = kb.reg("p")
    e(f"setp.lt.u32 {p_more}, {kreg}, {n_blocks};")
    e(f"@{p_more} bra {loop};")

    _emit_epilogue(kb, spec, d_type, taddr, warp, lane, m0, n0, n_total, gptr["D"])

    e("tcgen05.fence::before_thread_sync;")
    e("bar.sync 0;")
    e("tcgen05.fence::after_thread_sync;")
    skip = kb.label("dealloc_done")
    e(f"@!{p_w0} bra {skip};")
    e(tcgen05_dealloc(taddr, cols, form.cta_group))
    kb.put_label(skip)
    e("ret;")

    abi = {
        "params": [
            {"name": "A", "type": "u64", "layout": _global_layout(spec, "A")},
            {"name": "B", "type": "u64", "layout": _global_layout(spec, "B")},
            {"name": "D", "type": "u64", "layout": f"[m_total][n_total] {d_type.name} row-major"},
            {"name": "m_total", "type": "u32", "constraint": f"multiple of {spec.m}"},
            {"name": "n_total", "type": "u32", "constraint": f"multiple of {spec.n}"},
        ],
        "grid": ["n_total / %d" % spec.n, "m_total / %d" % spec.m, "1"],
        "block": [THREADS, 1, 1],
        "shared_bytes": smem_bytes + 12,
        "tmem_columns": cols,
        "k": k_total,
    }
    return kb.render(), abi


def _global_layout(spec, name: str) -> str:
    o = spec.operands[name]
    mn = "m_total" if name == "A" else "n_total"
    major = o.major or "K"
    k = spec.total_k
    return (f"[{mn}][{k}] {o.dtype} row-major (K-major)" if major == "K"
            else f"[{k}][{mn}] {o.dtype} row-major (MN-major)")


def _emit_copy(kb: KernelBuilder, spec, name, lay_op: Op, gbase, sbase, tid, kreg, mn0, mn_total, k_block):
    """Cooperative global -> shared copy of one K stage of operand `name` in 16-byte chunks."""
    lay = lay_op.facts["layout"]
    cm = lay.copy_map()
    e = kb.emit
    ebits = lay.container_bits
    total = cm.lines * cm.chunks_per_line
    kb.comment(f"copy {name}: {lay.mn}x{lay.k} {lay.dtype}, {lay.major}-major, swizzle {lay.swizzle}, "
               f"{total} chunks of 16 B")
    c = kb.reg("r")
    e(f"mov.u32 {c}, {tid};")
    top, done = kb.label(f"copy_{name}"), kb.label(f"copy_{name}_done")
    kb.put_label(top)
    p = kb.reg("p")
    e(f"setp.ge.u32 {p}, {c}, {total};")
    e(f"@{p} bra {done};")
    line, chunk = kb.regs("r", 2)
    cpl = cm.chunks_per_line
    if _pow2(cpl):
        e(f"shr.u32 {line}, {c}, {cpl.bit_length() - 1};")
        e(f"and.b32 {chunk}, {c}, {cpl - 1};")
    else:
        e(f"div.u32 {line}, {c}, {cpl};")
        e(f"rem.u32 {chunk}, {c}, {cpl};")
    coord = {"line": line, "chunk": chunk}
    off = kb.reg("r")
    e(f"mov.u32 {off}, {lay_op.attrs['offset']};")
    for t in cm.terms:
        v = kb.reg("r")
        src = coord[t.coord]
        if t.shift:
            e(f"shr.u32 {v}, {src}, {t.shift};")
            src = v
        if t.width is not None:
            e(f"and.b32 {v}, {src}, {(1 << t.width) - 1};")
            src = v
        e(f"mad.lo.u32 {off}, {src}, {t.stride}, {off};")
    if cm.swizzle_bits:
        # Swizzle<B,M,S> on byte addresses: bits [M,M+B) ^= bits [M+S,M+S+B). Swizzle<B,4,3> for
        # 32B/64B/128B (PTX 9.7.16.3.3); Swizzle<2,5,2> for 128B_base32B (32-byte granules, see
        # compiler/layout.py). The buffer is 1024-B aligned, so swizzling the offset equals swizzling
        # the address.
        s = kb.reg("r")
        e(f"shr.u32 {s}, {off}, {cm.swizzle_shift};")
        e(f"and.b32 {s}, {s}, {((1 << cm.swizzle_bits) - 1) << cm.swizzle_base};")
        e(f"xor.b32 {off}, {off}, {s};")
    # Global address of the chunk. Global memory holds the elements packed at their value width
    # (PTX 5.5.1.1.1: sub-byte tensors are "packed contiguously in the global memory"); a chunk of
    # shared memory holds `data_bytes_per_chunk` of them and, for the padded f8f6f4 formats
    # .b4x16_p64 / .b6x16_p32, zero padding up to 16 bytes (PTX 9.7.16.10.4.4; compiler/layout.py).
    vbits = lay.elem_bits
    data_bytes = lay.data_bytes_per_chunk
    k_stored = spec.total_k // 2 if (name == "A" and spec.sparsity is not None) else spec.total_k
    row_bytes_k = k_stored * vbits // 8
    stage_k_bytes = lay.k * vbits // 8
    g = kb.reg("r")
    if lay.major == "K":
        # element (mn0 + line, kreg*k_block + chunk*T) of a [mn_total][K] row-major array
        e(f"add.u32 {g}, {mn0}, {line};")
        e(f"mul.lo.u32 {g}, {g}, {row_bytes_k};")
        e(f"mad.lo.u32 {g}, {kreg}, {stage_k_bytes}, {g};")
    else:
        # element (kreg*k_block + line, mn0 + chunk*T) of a [K][mn_total] row-major array (MN-major
        # operands are never sub-byte: PTX 9.7.16.10.1, so value and container widths agree)
        pitch, krow, mnb = kb.regs("r", 3)
        e(f"mul.lo.u32 {pitch}, {mn_total}, {vbits};")
        e(f"shr.u32 {pitch}, {pitch}, 3;")           # bytes per K row
        e(f"mad.lo.u32 {krow}, {kreg}, {lay.k}, {line};")
        e(f"mul.lo.u32 {mnb}, {mn0}, {vbits};")
        e(f"shr.u32 {mnb}, {mnb}, 3;")
        e(f"mad.lo.u32 {g}, {krow}, {pitch}, {mnb};")
    e(f"mad.lo.u32 {g}, {chunk}, {data_bytes}, {g};")
    gw, ga = kb.regs("rd", 2)
    e(f"cvt.u64.u32 {gw}, {g};")
    e(f"add.u64 {ga}, {gbase}, {gw};")
    x = kb.regs("r", 4)
    _emit_chunk_load(kb, x, ga, data_bytes)
    sa = kb.reg("r")
    e(f"add.u32 {sa}, {sbase}, {off};")
    e(f"st.shared.v4.b32 [{sa}], {{{', '.join(x)}}};")
    e(f"add.u32 {c}, {c}, {THREADS};")
    e(f"bra.uni {top};")
    kb.put_label(done)


# 16-byte chunk loads by the bytes of data a chunk holds: 16 (every full-width type, packed fp4),
# 8 (.b4x16_p64: 16 fp4 values; 8-byte aligned since rows are multiples of 16 B) and 12 (.b6x16_p32:
# 16 fp6 values; only 4-byte aligned, chunk * 12). Missing words are the zero padding.
_CHUNK_LOADS = {16: ("v4", 1), 8: ("v2", 1), 12: ("", 3)}


def _emit_chunk_load(kb: KernelBuilder, x: list[str], addr: str, data_bytes: int) -> None:
    vec, count = _CHUNK_LOADS[data_bytes]
    e = kb.emit
    if vec:
        width = int(vec[1:])
        regs = x[:width]
        e(f"ld.global.{vec}.b32 {{{', '.join(regs)}}}, [{addr}];")
    else:
        width = count
        for i in range(count):
            e(f"ld.global.b32 {x[i]}, [{addr}+{4 * i}];")
    for reg in x[width:]:
        e(f"mov.b32 {reg}, 0;")


def _emit_epilogue(kb: KernelBuilder, spec, d_type, taddr, warp, lane, m0, n0, n_total, dptr):
    """TMEM -> registers -> global D, 8 columns at a time (tcgen05.ld.32x32b.x8)."""
    e = kb.emit
    e("tcgen05.fence::after_thread_sync;")
    # Warp w may only access TMEM lanes 32w..32w+31 (PTX 9.7.16.8.3 access restrictions).
    wl, tw = kb.regs("r", 2)
    e(f"shl.b32 {wl}, {warp}, 21;")            # (32*warp) << 16: lane field of the TMEM address
    e(f"add.u32 {tw}, {taddr}, {wl};")
    row = kb.reg("r")
    p_row = kb.reg("p")
    if spec.m == 64:
        # Layout F (PTX 9.7.16.10.5, M=64 half data path, lane alignment 0): row i lives in lane
        # 32*(i>>4) + (i&15), so warp w holds rows 16w..16w+15 in its first 16 lanes.
        e(f"mad.lo.u32 {row}, {warp}, 16, {lane};")
        e(f"setp.lt.u32 {p_row}, {lane}, 16;")
    else:
        e(f"mad.lo.u32 {row}, {warp}, 32, {lane};")
        e(f"setp.lt.u32 {p_row}, {lane}, 32;")
    grow = kb.reg("r")
    e(f"add.u32 {grow}, {m0}, {row};")
    esz = d_type.bits // 8
    roff, rofw, dbase = kb.reg("r"), kb.reg("rd"), kb.reg("rd")
    e(f"mad.lo.u32 {roff}, {grow}, {n_total}, {n0};")
    e(f"mul.wide.u32 {rofw}, {roff}, {esz};")
    e(f"add.u64 {dbase}, {dptr}, {rofw};")
    col = kb.reg("r")
    e(f"mov.u32 {col}, 0;")
    top = kb.label("store_d")
    kb.put_label(top)
    ta = kb.reg("r")
    e(f"add.u32 {ta}, {tw}, {col};")
    v = kb.regs("r", 8)
    e(f"tcgen05.ld.sync.aligned.32x32b.x8.b32 {{{', '.join(v)}}}, [{ta}];")
    e("tcgen05.wait::ld.sync.aligned;")
    cw, addr = kb.regs("rd", 2)
    e(f"mul.wide.u32 {cw}, {col}, {esz};")
    e(f"add.u64 {addr}, {dbase}, {cw};")
    if esz == 4:
        e(f"@{p_row} st.global.v4.b32 [{addr}], {{{', '.join(v[:4])}}};")
        e(f"@{p_row} st.global.v4.b32 [{addr}+16], {{{', '.join(v[4:])}}};")
    else:
        # A 16-bit D occupies the low half of its own 32-bit TMEM column (PTX 9.7.16.10.4.1).
        h = kb.regs("h", 8)
        for hi, vi in zip(h, v):
            e(f"cvt.u16.u32 {hi}, {vi};")
        e(f"@{p_row} st.global.v4.b16 [{addr}], {{{', '.join(h[:4])}}};")
        e(f"@{p_row} st.global.v4.b16 [{addr}+8], {{{', '.join(h[4:])}}};")
    e(f"add.u32 {col}, {col}, 8;")
    p = kb.reg("p")
    e(f"setp.lt.u32 {p}, {col}, {spec.n};")
    e(f"@{p} bra {top};")
