"""A complete PTX kernel around warp-level `mma.sp`: D = A*B + C with structured-sparse A.

Work split: a CTA has `warps_m x warps_n` warps; each warp owns `tiles_m x tiles_n` mma tiles of 16 x 8,
so a CTA computes a (16*tiles_m*warps_m) x (8*tiles_n*warps_n) block of D. Each warp loads its C
fragments into the accumulators, walks K in steps of the instruction K (loading A, B and metadata
registers straight from global memory, one 32-bit word per register: compiler/isa/mma_sp/fragments.py), and
stores D. No shared memory, no pipelining: correctness first.

Sizes: M, N, K multiples of the CTA tile and of the K step, each below 2^31, M / tile_m <= 65535 (grid
y); ABI `requires` and `limits`. Byte offsets that grow with them are 64-bit (mul.wide.u32).

Global layouts are those of compiler/sparse.py (compressed A row-major M x K/2, metadata
[M/16][K/k][32] u32 words, B as N x K, C/D row-major M x N). With `static_metadata` the metadata words
are embedded (an immediate, or a `.const` table indexed by lane / tile / k-step) instead of read from a
buffer.

Block-scaled kinds (sm_120a/sm_121a) read scale_A / scale_B from two more buffers: SFA is uint8
[M][K / blk] and SFB uint8 [N][K / blk], row-major, blk = K step / vector size (PTX 9.7.14.3 Table 35,
compiler/isa/mma_sp/block_scale.py). Every lane loads the `vector` consecutive scale bytes of one k-step
into byte 0.. of its scale register: SFA row m0 + 16i + g + 8*(t & 1), SFB row n0 + 8q + g, and the
instruction selects {byte-id 0, thread-id 0}: lanes 4g / 4g+1 supply rows g / g+8 of scale_A, lane 4g
column g of scale_B (lanes 4g+2, 4g+3 load the same bytes, which the instruction does not read).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..bits import log2
from ..diagnostics import SpecError
from ..isa.mma_sp.forms import ORDERED_METADATA_PTX, SHAPE_M, SHAPE_N, Form
from ..isa.mma_sp.metadata import unpack_metadata, validate_nibbles
from ..isa.targets import MAX_PTX, Version, format_version
from ..isa.types import TYPES
from .builder import (HAND_SCHEDULED, PtxBuilder, abi_params, launch_limits, require_kernel_name, target_lines,
                      vector)

CONST_BANK_BYTES = 65536      # a .const table must fit the 64 KB constant bank


@dataclass(frozen=True)
class MmaSpKernelConfig:
    name: str
    form: Form
    target: str
    ptx_version: Version | None = None        # None: the form's minimum, raised to 8.5 when allowed
    warps_m: int = 1
    warps_n: int = 1
    tiles_m: int = 1                          # mma tiles per warp along M
    tiles_n: int = 1                          # mma tiles per warp along N
    selector: int = 0
    # None: metadata words come from a global buffer. Otherwise a [pm][pk][32] word table
    # (compiler.isa.mma_sp.metadata.static_metadata): 16-row tile mt, k-step ks use entry [mt % pm][ks % pk].
    static_metadata: tuple[tuple[tuple[int, ...], ...], ...] | None = None

    @property
    def tile_m(self) -> int:
        return SHAPE_M * self.tiles_m * self.warps_m

    @property
    def tile_n(self) -> int:
        return SHAPE_N * self.tiles_n * self.warps_n

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n


@dataclass(frozen=True, eq=False)
class KernelPTX:
    name: str
    text: str                                 # the whole PTX module
    ptx_version: Version
    target: str
    abi: dict = field(repr=False)

    def grid(self, m: int, n: int, k: int) -> tuple[int, int, int]:
        """Launch grid for an M x N x K problem (checks the divisibility the kernel relies on)."""
        a = self.abi
        self.require_multiples(m, n, k, positive=False)
        return n // a["tile_n"], m // a["tile_m"], 1

    def require_multiples(self, m: int, n: int, k: int, *, positive: bool = True, m_unit: int | None = None) -> None:
        """SpecError unless M, N, K are (positive) multiples of the kernel's tile (M of `m_unit` if given)."""
        a = self.abi
        for what, v, d in (("M", m, m_unit or a["tile_m"]), ("N", n, a["tile_n"]), ("K", k, a["tile_k"])):
            if (positive and v <= 0) or v % d:
                raise SpecError(f"{what} = {v} is not a {'positive ' if positive else ''}multiple of {d}",
                                field=f"shape.{what}")

    @property
    def block(self) -> tuple[int, int, int]:
        return tuple(self.abi["block"])     # type: ignore[return-value]


def mma_sp_instruction(opcode: str, d: Sequence[str], a: Sequence[str], b: Sequence[str], c: Sequence[str],
                       meta: str, selector: int, scale_operands: str = "") -> str:
    """One warp-level mma.sp: operands d, a, b, c, e (metadata), f (selector) in the order of PTX
    9.7.14.6.3, then the block-scale operands (`scale_operands`, with its leading comma) if any."""
    return f"{opcode} {vector(d)}, {vector(a)}, {vector(b)}, {vector(c)}, {meta}, {selector}{scale_operands};"


def mma_sp_ptx_version(form: Form, target: str, ptx_version: Version | None, selector: int) -> Version:
    """The PTX version an mma.sp kernel of `form` is emitted for (`ptx_version`, or None: the form's
    minimum, raised to the one of .sp::ordered_metadata when allowed - ptxas advises it over plain .sp,
    which is slower); SpecError when the target, version or selector does not fit the form."""
    need, err = form.requirements(target, ptx_version)
    if err:
        raise err
    ptx = ptx_version
    if ptx is None:
        ptx = max(need, ORDERED_METADATA_PTX) if ORDERED_METADATA_PTX <= MAX_PTX else need
    form.check_selector(selector)
    return ptx


def _check_config(cfg: MmaSpKernelConfig) -> tuple[Version, bool]:
    form = cfg.form
    for what in ("warps_m", "warps_n", "tiles_m", "tiles_n"):
        v = getattr(cfg, what)
        if not isinstance(v, int) or v < 1:
            raise SpecError(f"{what} must be a positive integer, not {v!r}", field=f"tile.{what}")
    if cfg.threads > 1024:
        raise SpecError(f"{cfg.threads} threads per CTA exceed 1024", field="schedule.warps")
    if cfg.tiles_m * cfg.tiles_n * 2 > 255:       # each m16n8 tile: at least 2 accumulator registers a thread
        raise SpecError(f"{cfg.tiles_m} x {cfg.tiles_n} mma tiles per warp need at least "
                        f"{2 * cfg.tiles_m * cfg.tiles_n} accumulator registers a thread; a thread has 255",
                        field="tile.tiles_m")
    require_kernel_name(cfg.name)
    ptx = mma_sp_ptx_version(form, cfg.target, cfg.ptx_version, cfg.selector)
    ordered = form.uses_ordered_metadata(ptx)
    if cfg.static_metadata is not None:
        tab = cfg.static_metadata
        if not tab or not tab[0] or any(len(r) != len(tab[0]) for r in tab) or \
                any(len(w) != 32 for r in tab for w in r):
            raise SpecError("static metadata must be a [pm][pk][32] table of words", field="sparsity.metadata")
        if len(tab) * len(tab[0]) * 32 * 4 > CONST_BANK_BYTES:
            raise SpecError("static metadata table exceeds the 64 KB constant bank; use runtime metadata",
                            field="sparsity.metadata")
        for mt, row in enumerate(tab):
            for ks, words in enumerate(row):
                if any(not 0 <= w < 1 << 32 for w in words):
                    raise SpecError("metadata words must be 32-bit unsigned", field="sparsity.metadata")
                validate_nibbles(form.layout, unpack_metadata(form.layout, words), ordered,
                                 row0=16 * mt)
    return ptx, ordered


def emit_mma_sp_kernel(cfg: MmaSpKernelConfig) -> KernelPTX:
    """Emit the PTX module for `cfg` (same config -> same bytes)."""
    ptx, _ordered = _check_config(cfg)
    form, lay = cfg.form, cfg.form.layout
    tm, tn = cfg.tiles_m, cfg.tiles_n
    sbits = lay.storage_bits
    cbits = TYPES[form.c_type].bits
    ar, br, cr = form.a_regs, form.b_regs, form.c_regs
    acc_type = ".f32" if form.c_type == "f32" else ".b32"      # s32 and packed f16x2 live in .b32
    runtime_meta = cfg.static_metadata is None
    kname = cfg.name
    w = PtxBuilder(kname, **HAND_SCHEDULED)
    scaled = form.block_scale is not None
    w.add_params("u64", "a_values", *(("a_metadata",) if runtime_meta else ()), "b", "c", "d",
                 *(("sfa", "sfb") if scaled else ()))
    w.add_params("u32", "M", "N", "K")
    emit = w.module.append
    ins, add_imm = w.ins, w.add_imm

    emit(f"// tilec mma.sp kernel {kname}: D = A*B + C, A structured-sparse ({lay.granularity.name})")
    emit(f"// form {form.name}, target {cfg.target}, selector {cfg.selector}, "
         f"metadata {'runtime' if runtime_meta else 'static'}")
    emit(f"// CTA tile {cfg.tile_m} x {cfg.tile_n} ({cfg.warps_m}x{cfg.warps_n} warps, {tm}x{tn} mma tiles "
         f"per warp), K step {form.k}")
    w.module += target_lines(format_version(ptx), cfg.target)

    table = None
    if not runtime_meta:
        tab = cfg.static_metadata
        pm, pk = len(tab), len(tab[0])
        flat = [w for row in tab for words in row for w in words]
        if len(set(flat)) > 1:       # a single distinct word becomes an immediate, no table
            table = w.param("metadata")
            body = ", ".join(f"0x{w:08x}" for w in flat)
            emit(f"// static metadata words [{pm}][{pk}][32]: 16-row tile mt, k-step ks -> [mt % {pm}][ks % {pk}]")
            emit(f".const .align 4 .b32 {table}[{len(flat)}] = {{{body}}};")
            emit("")

    w.directives.append(f".maxntid {cfg.threads}, 1, 1")
    w.declare("pred", "%p<3>")
    w.declare("u32", "%tx", "%lane", "%warp", "%g", "%t", "%wm", "%wn", "%m0", "%n0", "%M", "%N", "%K", "%nks",
              "%x", "%y", "%kk")
    w.declare("u64", "%ga", "%gb", "%gc", "%gd", "%ge", "%off", "%t4", "%adr")
    w.declare("u64", f"%pa<{2 * tm}>", f"%pb<{tn}>", f"%pe<{tm}>")
    w.declare("b32", f"%a<{tm * ar}>", f"%b<{tn * br}>", f"%e<{tm}>")
    w.declare(acc_type, f"%acc<{tm * tn * cr}>")
    if scaled:
        w.declare("u32", "%sr")
        w.declare("u64", "%gsa", "%gsb", f"%psa<{tm}>", f"%psb<{tn}>")
        w.declare("b32", f"%sa<{tm}>", f"%sb<{tn}>")

    ins("// parameters and lane coordinates (9.7.14.6.2: g = lane >> 2, t = lane & 3)")
    for reg, name in (("%ga", "a_values"), ("%gb", "b"), ("%gc", "c"), ("%gd", "d")):
        w.global_pointer(reg, name)
    if runtime_meta:
        w.global_pointer("%ge", "a_metadata")
    if scaled:
        w.global_pointer("%gsa", "sfa")
        w.global_pointer("%gsb", "sfb")
    w.problem_dims("%tx")
    ins("and.b32 %lane, %tx, 31;")
    ins("shr.u32 %warp, %tx, 5;")
    ins("shr.u32 %g, %lane, 2;")
    ins("and.b32 %t, %lane, 3;")
    ins(f"div.u32 %wm, %warp, {cfg.warps_n};")
    ins(f"rem.u32 %wn, %warp, {cfg.warps_n};")
    ins("// first row / column of this warp's output block")
    ins("mov.u32 %x, %ctaid.y;")
    ins(f"mul.lo.u32 %m0, %x, {cfg.tile_m};")
    ins(f"mad.lo.u32 %m0, %wm, {SHAPE_M * tm}, %m0;")
    ins("mov.u32 %x, %ctaid.x;")
    ins(f"mul.lo.u32 %n0, %x, {cfg.tile_n};")
    ins(f"mad.lo.u32 %n0, %wn, {SHAPE_N * tn}, %n0;")
    ins("setp.ge.u32 %p0, %m0, %M;")
    ins("setp.ge.or.u32 %p0, %n0, %N, %p0;")
    ins("@%p0 bra.uni DONE;                 // warp-uniform: a whole warp is outside the problem")
    ins("shl.b32 %x, %t, 2;")
    ins("cvt.u64.u32 %t4, %x;               // byte offset of word t")

    # ---- A pointers: register j of tile i = word t + 4*(j>>1) of compressed row g + 8*(j&1) (+16 i)
    ins(f"// A: compressed rows of K/2 elements = K*{sbits}/16 bytes; register j of tile i is word")
    ins("//    t + 4*(j>>1) of row m0 + 16i + g + 8*(j&1) (fragments.a_register_word)")
    # the row pitch fits 32 bits: K < 2^31 (the ABI's limits) and at most 32-bit elements, K*32/16 < 2^32;
    # the row times the pitch is the 64-bit mul.wide
    w.scale("%y", "%K", sbits, 16)
    for i in range(tm):
        for h in range(2):
            ins("add.u32 %x, %m0, %g;")
            add_imm("%x", 16 * i + 8 * h)
            ins("mul.wide.u32 %off, %x, %y;")
            ins(f"add.u64 %pa{2 * i + h}, %ga, %off;")
            ins(f"add.u64 %pa{2 * i + h}, %pa{2 * i + h}, %t4;")

    # ---- B pointers: register j of tile q = word t + 4j of B^T row n0 + 8q + g
    ins(f"// B^T: rows of K elements = K*{sbits}/8 bytes; register j of tile q is word t + 4j of row")
    ins("//    n0 + 8q + g (fragments.b_register_word); row * K elements in 64 bits (K*4 bytes can exceed 2^32)")
    for q in range(tn):
        ins("add.u32 %x, %n0, %g;")
        add_imm("%x", 8 * q)
        ins("mul.wide.u32 %off, %x, %K;")
        w.scale64("%off", sbits, 8)
        ins(f"add.u64 %pb{q}, %gb, %off;")
        ins(f"add.u64 %pb{q}, %pb{q}, %t4;")

    # ---- metadata
    ins(f"shr.u32 %nks, %K, {log2(form.k)};          // k-steps")
    if runtime_meta:
        ins("// metadata words [M/16][K/k][32]: tile mt = m0/16 + i starts at word (mt*K/k)*32 + lane;")
        ins("//    mt * K/k in 64 bits (M/16 * K/k * 128 bytes can exceed 2^32)")
        for i in range(tm):
            ins("shr.u32 %x, %m0, 4;")
            add_imm("%x", i)
            ins("mul.wide.u32 %off, %x, %nks;")
            ins("shl.b64 %off, %off, 7;             // 32 words of 4 bytes per (tile, k-step)")
            ins(f"add.u64 %pe{i}, %ge, %off;")
            ins("mul.wide.u32 %off, %lane, 4;")
            ins(f"add.u64 %pe{i}, %pe{i}, %off;")
    else:
        tab = cfg.static_metadata
        pm, pk = len(tab), len(tab[0])
        if table is None:
            ins(f"// static metadata: every lane, tile and k-step uses the same word")
            for i in range(tm):
                ins(f"mov.b32 %e{i}, 0x{tab[0][0][0]:08x};")
        else:
            ins(f"// static metadata table: entry [(m0/16 + i) % {pm}][ks % {pk}], word lane")
            for i in range(tm):
                ins("shr.u32 %x, %m0, 4;")
                add_imm("%x", i)
                ins(f"rem.u32 %x, %x, {pm};")
                ins(f"mul.lo.u32 %x, %x, {pk * 32};")
                ins("add.u32 %x, %x, %lane;")
                ins("mul.wide.u32 %off, %x, 4;")
                ins(f"mov.u64 %pe{i}, {table};")
                ins(f"add.u64 %pe{i}, %pe{i}, %off;")
                if pk == 1:
                    ins(f"ld.const.b32 %e{i}, [%pe{i}];")
            ins("mov.u32 %kk, 0;")
    if scaled:
        from ..isa.mma_sp.block_scale import SCALE_VECTOR, block_elements

        vec = SCALE_VECTOR[form.block_scale.scale_vec]
        ins(f"// scale factors (PTX 9.7.14.3): SFA [M][K/{block_elements(form.k, form.block_scale.scale_vec)}], "
            f"SFB [N][K/{block_elements(form.k, form.block_scale.scale_vec)}] .{form.block_scale.scale_type} "
            f"bytes; {vec} per row/column per k-step")
        # K/k * vec < 2^31 / 64 * 4 (K < 2^31, block-scaled k >= 64): the row pitch fits 32 bits; the row
        # times it is the 64-bit mul.wide below
        ins(f"mul.lo.u32 %y, %nks, {vec};           // scale bytes per SFA row / SFB row")
        ins("and.b32 %sr, %t, 1;")
        ins("shl.b32 %sr, %sr, 3;")
        ins("add.u32 %sr, %sr, %g;")
        ins("add.u32 %sr, %sr, %m0;            // SFA row m0 + g + 8*(t&1): thread-id-a 0 reads lanes 4g, 4g+1")
        for i in range(tm):
            ins("mov.u32 %x, %sr;")
            add_imm("%x", 16 * i)
            ins("mul.wide.u32 %off, %x, %y;")
            ins(f"add.u64 %psa{i}, %gsa, %off;")
        for q in range(tn):
            ins("add.u32 %x, %n0, %g;              // SFB row n0 + 8q + g: thread-id-b 0 reads lane 4g")
            add_imm("%x", 8 * q)
            ins("mul.wide.u32 %off, %x, %y;")
            ins(f"add.u64 %psb{q}, %gsb, %off;")

    # ---- C -> accumulators; element c_i at row g + 8*(i>>1), col 2t + (i&1) (fragments.cd_element)
    cbytes = cbits // 8
    per_pair = cr // 2                 # registers holding elements (2h, 2h+1): 2 for 32-bit, 1 for f16x2

    def cd_rows(ptr_base: str, op: str) -> None:
        for i in range(tm):
            for h in range(2):
                ins("add.u32 %x, %m0, %g;")
                add_imm("%x", 16 * i + 8 * h)
                ins("mul.wide.u32 %adr, %x, %N;          // row * N elements in 64 bits")
                w.scale64("%adr", cbytes, 1)
                ins("shl.b32 %x, %t, 1;")
                ins("add.u32 %x, %x, %n0;")
                ins(f"mul.wide.u32 %off, %x, {cbytes};")
                ins("add.u64 %adr, %adr, %off;")
                ins(f"add.u64 %adr, %adr, {ptr_base};")
                for q in range(tn):
                    base = (i * tn + q) * cr + h * per_pair
                    regs = ", ".join(f"%acc{base + r}" for r in range(per_pair))
                    addr = f"[%adr+{8 * q * cbytes}]" if q else "[%adr]"
                    if per_pair == 2:
                        ins(f"{op}.global.v2{acc_type} " + (f"{{{regs}}}, {addr};" if op == "ld"
                                                             else f"{addr}, {{{regs}}};"))
                    else:
                        ins(f"{op}.global.b32 " + (f"{regs}, {addr};" if op == "ld" else f"{addr}, {regs};"))

    ins("// C fragments -> accumulators (row-major M x N)")
    cd_rows("%gc", "ld")

    # ---- K loop. Metadata per k-step: loads before the MMAs, the step to the next k-step after them
    if runtime_meta:
        meta_load = [f"ld.global.b32 %e{i}, [%pe{i}];" for i in range(tm)]
        meta_next = [f"add.u64 %pe{i}, %pe{i}, 128;        // next k-step: 32 words further" for i in range(tm)]
    elif table is not None and len(cfg.static_metadata[0]) > 1:
        meta_load = ["mul.wide.u32 %off, %kk, 128;"]
        for i in range(tm):
            meta_load += [f"add.u64 %adr, %pe{i}, %off;", f"ld.const.b32 %e{i}, [%adr];"]
        meta_next = ["add.u32 %kk, %kk, 1;", f"setp.eq.u32 %p2, %kk, {len(cfg.static_metadata[0])};",
                     "selp.u32 %kk, 0, %kk, %p2;"]
    else:
        meta_load = meta_next = []
    ins("setp.eq.u32 %p1, %nks, 0;")
    ins("@%p1 bra.uni STORE;")
    w.put("LOOP_K")
    for i in range(tm):
        for j in range(ar):
            off = 16 * (j >> 1)
            ins(f"ld.global.b32 %a{i * ar + j}, [%pa{2 * i + (j & 1)}{f'+{off}' if off else ''}];")
    for q in range(tn):
        for j in range(br):
            ins(f"ld.global.b32 %b{q * br + j}, [%pb{q}{f'+{16 * j}' if j else ''}];")
    for line in meta_load:
        ins(line)
    if scaled:
        # the k-step's `vec` scale bytes land in bytes 0.. of the register (byte-id 0 for every vector size)
        ld = {1: "ld.global.u8", 2: "ld.global.u16", 4: "ld.global.b32"}[vec]
        for i in range(tm):
            ins(f"{ld} %sa{i}, [%psa{i}];")
        for q in range(tn):
            ins(f"{ld} %sb{q}, [%psb{q}];")
    opcode = form.instruction(ptx)
    for i in range(tm):
        for q in range(tn):
            acc = [f"%acc{(i * tn + q) * cr + r}" for r in range(cr)]
            scales = f", %sa{i}, {{0, 0}}, %sb{q}, {{0, 0}}" if scaled else ""
            ins(mma_sp_instruction(opcode, acc, [f"%a{i * ar + j}" for j in range(ar)],
                                   [f"%b{q * br + j}" for j in range(br)], acc, f"%e{i}", cfg.selector, scales))
    a_step = (form.k // 2) * sbits // 8
    b_step = form.k * sbits // 8
    for i in range(2 * tm):
        ins(f"add.u64 %pa{i}, %pa{i}, {a_step};")
    for q in range(tn):
        ins(f"add.u64 %pb{q}, %pb{q}, {b_step};")
    if scaled:
        for i in range(tm):
            ins(f"add.u64 %psa{i}, %psa{i}, {vec};")
        for q in range(tn):
            ins(f"add.u64 %psb{q}, %psb{q}, {vec};")
    for line in meta_next:
        ins(line)
    w.count_down("%nks", "%p1", "LOOP_K")
    w.put("STORE")
    ins("// accumulators -> D (row-major M x N)")
    cd_rows("%gd", "st")
    w.put("DONE")
    ins("ret;")
    text = w.render()

    abi = _abi(cfg, ptx, w.params, runtime_meta)
    return KernelPTX(kname, text, ptx, cfg.target, abi)


def abi_head(kernel: str, kernel_kind: str | None, form: str, instruction: str, target: str, ptx: Version,
             params, buffers: dict) -> dict:
    """The first entries of a sparse kernel's ABI dict, in their order (`kernel_kind` only when given)."""
    head = {"kernel": kernel, **({"kernel_kind": kernel_kind} if kernel_kind else {}), "form": form,
            "instruction": instruction, "target": target, "ptx_version": format_version(ptx)}
    return {**head, "params": abi_params(kernel, params), "buffers": buffers}


def scale_buffers(form: Form, aligned: int = 1) -> dict:
    """ABI buffers sfa / sfb of a block-scaled form (both mma.sp GEMM kernels): row-major scale bytes, one
    per blk = k / vector K elements of a row of A / column of B (PTX 9.7.14.3, Table 35); `aligned` > 1
    states the alignment the kernel's vector loads need."""
    from ..isa.mma_sp.block_scale import block_elements

    blk = block_elements(form.k, form.block_scale.scale_vec)
    out = {}
    for name, rows, what in (("sfa", "M", "row m of A"), ("sfb", "N", "column n of B")):
        out[name] = {"element": form.block_scale.scale_type, "shape": [rows, f"K/{blk}"],
                     "layout": f"row-major: entry [{rows.lower()}][j] scales K elements {blk}j .. "
                               f"{blk}j+{blk - 1} of {what} (PTX 9.7.14.3)"
                               + (f"; {aligned}-byte aligned" if aligned > 1 else "")}
    return out


def _abi(cfg: MmaSpKernelConfig, ptx: Version, params, runtime_meta: bool) -> dict:
    form, lay = cfg.form, cfg.form.layout
    sbits = lay.storage_bits
    elem = {16: "one element per 2 bytes", 32: "one element per 4 bytes", 8: "one element per byte",
            4: "two elements per byte, even index in the low nibble"}[sbits]
    if sbits == 8 and TYPES[form.a_type].bits < 8:
        elem = "one element per byte (8-bit container: e2m1 in bits 5:2, e3m2/e2m3 in bits 5:0)"
    buffers = {
        "a_values": {"element": form.a_type, "shape": ["M", "K/2"], "bytes": f"M*K*{sbits}/16",
                     "layout": f"row-major compressed A (kept elements of each chunk in K order); {elem}"},
        "b": {"element": form.b_type, "shape": ["N", "K"], "bytes": f"N*K*{sbits}/8",
              "layout": f"B transposed: row n holds column n of the K x N matrix B; {elem}"},
        "c": {"element": form.c_type, "shape": ["M", "N"], "layout": "row-major"},
        "d": {"element": form.d_type, "shape": ["M", "N"], "layout": "row-major (written)"},
    }
    if sbits == 4:
        # shapes count elements; two share a byte, so the arrays passed hold K/4 (A) and K/2 (B) bytes a row
        for name in ("a_values", "b"):
            buffers[name]["packed"] = True
    if runtime_meta:
        buffers["a_metadata"] = {"element": "u32", "shape": ["M/16", f"K/{form.k}", 32],
                                 "layout": "per 16-row tile and k-step, the 32 per-lane metadata words "
                                           "(compiler.sparse.compress)"}
    if form.block_scale is not None:
        buffers.update(scale_buffers(form))
    return {
        **abi_head(cfg.name, None, form.name, form.instruction(ptx), cfg.target, ptx, params, buffers),
        "metadata": "runtime" if runtime_meta else "static",
        "selector": cfg.selector,
        "tile_m": cfg.tile_m, "tile_n": cfg.tile_n, "tile_k": form.k,
        "block": [cfg.threads, 1, 1],
        "grid": ["N / tile_n", "M / tile_m", 1],
        "requires": [f"M % {cfg.tile_m} == 0", f"N % {cfg.tile_n} == 0", f"K % {form.k} == 0"],
        "limits": launch_limits("MNK", ["N / tile_n", "M / tile_m", 1]),
    }
