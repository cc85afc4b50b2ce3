"""The sparse wgmma GEMM (compiler/ptx/sparse_wgmma_kernel.py): execution model, geometry, ptxas,
configuration errors and DSL wiring.

1. Execution model: `WgmmaModel` below runs the emitted PTX text itself, warp by warp with numpy registers
   of 32 lanes, and implements from the PTX ISA text the pieces this kernel relies on:
   * mbarrier (9.7.13.15): init count, arrive, arrive.expect_tx, complete_tx, try_wait.parity (the
     phase of parity P is complete when the current phase's parity differs from P; a fresh barrier
     counts phase -1 as complete). Extra arrivals, uninitialised barriers and deadlocks fail.
   * cp.async.bulk.tensor.2d (TMA): the box of the tensor map at the given coordinates (bounds-checked),
     written with the map's swizzle applied to the absolute shared address (bits [4, 4+B) ^= bits
     [7, 7+B), B = 1/2/3 for 32B/64B/128B; CU_TENSOR_MAP_SWIZZLE_*), completing its bytes on the
     mbarrier. A map must be fenced (fence.proxy.tensormap) before its first use.
   * wgmma.mma_async.sp (9.7.15.6): descriptors decoded from the bits (9.7.15.5.1.2.2: start, LBO, SBO,
     swizzle, base offset; K-major rows W bytes apart in 8-row atoms, SBO between atoms, the swizzle XOR
     on absolute addresses: the phase rule measured on the H100, docs/verification.md), warp w of the
     warpgroup computing rows 16w..16w+15 (9.7.15.6.2) with the metadata of the selected thread pair
     (9.7.15.6.1; decoded by compiler.sparse.decompress, whose slot table is H100-verified for mma.sp and
     which PTX draws with the same figures), D in the Figure 149 fragment layout restated here.
     wgmma.commit_group / wait_group per warp; an accumulator or metadata register touched while its
     wgmma is in flight fails.
   * bar.sync with ids and thread counts; divergent `ret`.
   Copies land at issue ("eager") or only when every warp is stuck ("lazy", in random order), and wgmma
   groups execute at issue or only when wait_group retires them (reading shared memory and metadata
   then): a slot released before its wgmma finished, a missing wait or a stale phase gives wrong numbers
   or a deadlock in one of the runs. Shared memory starts as garbage and the dynamic window is not
   1024-aligned (the kernel rounds it up).
2. Geometry: the descriptor encoder against the H100-checked tcgen05->wgmma conversion of
   benchmarks/wgmma_read_check.py; the copy engine's address swizzle equals compiler/layout.py's canonical
   layout for every region; the Figure 149 fragment map against that benchmark's.
3. ptxas (CUDA 13.0) assembles every form for sm_90a without spills.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler import sparse
from compiler.diagnostics import SpecError
from compiler.layout import swizzle_bytes
from compiler.isa.mma_sp.forms import find_form
from compiler.isa.mma_sp.fragments import metadata_suppliers
from compiler.isa.wgmma import DESCRIPTOR_SWIZZLE, wgmma_descriptor
from compiler.ptx.sparse_wgmma_kernel import (TMA_MAP_BYTES, TMA_SWIZZLE, SparseWgmmaConfig, descriptor_base,
                                              descriptor_offset, emit_sparse_wgmma, fragment_coord, layouts,
                                              tensor_map_args, tma_boxes)

REPO = Path(__file__).resolve().parents[1]
F16 = find_form("m16n8k32", "f16", "f16", "f32", "f32")
BF16 = find_form("m16n8k32", "bf16", "bf16", "f32", "f32")
TF32 = find_form("m16n8k16", "tf32", "tf32", "f32", "f32")
S8 = find_form("m16n8k64", "s8", "s8", "s32", "s32")
U8S8 = find_form("m16n8k64", "u8", "s8", "s32", "s32")
E4M3 = find_form("m16n8k64", "e4m3", "e4m3", "f32", "f32")
E5M2 = find_form("m16n8k64", "e5m2", "e5m2", "f32", "f32")

# the configurations benchmarks/sparse_wgmma.py times on the H100
BENCH = [dict(cta_m=128, cta_n=256, cta_k=64, stages=4), dict(cta_m=128, cta_n=256, cta_k=64, stages=5),
         dict(cta_m=256, cta_n=128, cta_k=64, stages=5), dict(cta_m=256, cta_n=128, cta_k=64, stages=6)]
M32 = np.uint64(0xFFFFFFFF)
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def cfg_of(form=F16, name="wg", **kw) -> SparseWgmmaConfig:
    return SparseWgmmaConfig(name, form, **kw)


def _bench_module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod          # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------------------------------
# 1. execution model
# --------------------------------------------------------------------------------------------------

def _split_ops(rest: str) -> list[str]:
    ops, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            ops.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        ops.append(cur.strip())
    return ops


def _regs(x: str) -> list[str]:
    return [r.strip() for r in x.strip("{}").split(",")]


class Stuck(Exception):
    pass


# mode -> (when TMA copies land, whether wgmma groups run only when wait_group retires them)
MODES = {"eager": ("eager", False), "lazy": ("lazy", True), "late_mma": ("eager", True)}


CLUSTER_BIT = 24          # the model's shared::cluster addresses: (rank + 1) << 24 | CTA-local shared address


class WgmmaModel:
    """Runs the emitted PTX text of one kernel over a grid, a cluster of CTAs at a time (module docstring,
    part 1). Per CTA: shared memory, mbarriers, warps; warps of every CTA of the cluster interleave."""

    def __init__(self, text, cfg, mem, buffers, params, tmaps, mode, order, rng, smem_window=528):
        self.cfg, self.mem, self.buffers, self.params = cfg, mem, buffers, params
        self.tmaps, self.order, self.rng = tmaps, order, rng
        self.land, self.late_mma = MODES[mode]
        self.window = smem_window                    # the dynamic buffer's shared address (not aligned)
        self.prog, self.labels = self._parse(text)
        self.stats = {"tma": 0, "wgmma": 0, "arrive": 0, "multicast": 0}
        self.storage = sparse._np_dtype(cfg.form.a_type), sparse._np_dtype(cfg.form.b_type)

    @staticmethod
    def _parse(text):
        prog, labels = [], {}
        body = text[text.index("{", text.index(".entry")) + 1:text.rindex("}")]
        for raw in body.splitlines():
            ln = raw.split("//")[0].strip()
            if not ln or ln.startswith(".reg"):
                continue
            if ln.endswith(":"):
                labels[ln[:-1]] = len(prog)
                continue
            assert ln.endswith(";"), ln
            ln = ln[:-1]
            guard = None
            if ln.startswith("@"):
                g, ln = ln.split(None, 1)
                guard = (g[1] == "!", g.lstrip("@!"))
            op, _, rest = ln.partition(" ")
            prog.append((guard, op, _split_ops(rest)))
        return prog, labels

    # -- values and memory -----------------------------------------------------------------------------
    def val(self, w, x):
        if x == "%tid.x":
            return w["tid"].astype(np.uint64)
        if x == "%ctaid.x":
            return np.full(32, w["cta"]["ctaid"], np.uint64)
        if x == "%cluster_ctarank":
            return np.full(32, w["cta"]["rank"], np.uint64)
        if x.startswith("%"):
            self.check_free(w, x)
            return w["r"][x]
        if x.startswith("0f"):
            return np.full(32, int(x[2:], 16), np.uint64)
        if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", x):
            return np.full(32, int(x, 0) & 0xFFFFFFFFFFFFFFFF, np.uint64)
        assert x == f"{self.cfg.name}_smem", x
        return np.full(32, self.window, np.uint64)

    def check_free(self, w, reg):
        """A register a pending wgmma reads or writes may not be touched (9.7.15.5.2: wait first)."""
        for grp in w["groups"] + [w["open"]]:
            for op in grp:
                assert reg not in op["busy"], f"{reg} accessed while its wgmma is in flight"

    def setr(self, w, name, value, act):
        self.check_free(w, name)
        old = w["r"].get(name)
        if value.dtype == bool:
            w["r"][name] = np.where(act, value, old if old is not None else False)
        else:
            w["r"][name] = np.where(act, value, old if old is not None else np.uint64(0)).astype(np.uint64)

    def addr(self, w, x):
        m = re.fullmatch(r"\[(%\w+)(?:\+(-?\d+))?\]", x)
        return self.val(w, m.group(1)).astype(np.int64) + int(m.group(2) or 0)

    def in_buffer(self, a, n, names=None):
        return any(s <= a and a + n <= s + size for nm, (s, size) in self.buffers.items()
                   if names is None or nm in names)

    def in_window(self, a, n=1):
        return self.window <= a and a + n <= self.window + self.cfg.smem_bytes

    def sread(self, cta, a, n):
        assert self.in_window(a, n), f"shared read {a:#x}+{n}"
        return cta["smem"][a:a + n]

    def swrite(self, cta, a, data):
        assert self.in_window(a, len(data)), f"shared write {a:#x}"
        cta["smem"][a:a + len(data)] = data

    def cluster_target(self, w, a):
        """(CTA, local address) of a shared::cluster address (a plain shared address is the own CTA's)."""
        rank, local = divmod(int(a), 1 << CLUSTER_BIT)
        cta = self.ctas[rank - 1] if rank else w["cta"]
        assert not all(x["done"] for x in cta["warps"]), "shared::cluster access to a CTA that has exited"
        return cta, local

    # -- mbarriers (9.7.13.15) -----------------------------------------------------------------------------
    @staticmethod
    def bar_state(cta, a):
        assert a % 8 == 0 and a in cta["mbar"], f"mbarrier at {a:#x} not initialised"
        return cta["mbar"][a]

    def bar_arrive(self, cta, a, tx=0):
        b = self.bar_state(cta, a)
        b["tx"] += tx
        b["pending"] -= 1
        assert b["pending"] >= 0, f"more arrivals than expected on mbarrier {a:#x}"
        self.bar_check(b)
        self.stats["arrive"] += 1

    def bar_complete_tx(self, cta, a, nbytes):
        b = self.bar_state(cta, a)
        b["tx"] -= nbytes                        # may go negative first: a peer's bytes before our expect_tx
        self.bar_check(b)

    @staticmethod
    def bar_check(b):
        if b["pending"] == 0 and b["tx"] == 0:
            b["phase"] += 1
            b["pending"] = b["count"]

    # -- TMA ----------------------------------------------------------------------------------------------
    def tma(self, w, dst, tm, coords, bar, mask=None):
        assert tm in w["fenced"], "tensor map used before fence.proxy.tensormap"
        spec = self.tmaps[tm]
        x, y = coords
        inner, rows = spec["box"]
        eb = spec["elem_bytes"]
        assert 0 <= x and x + inner <= spec["dims"][0] and 0 <= y and y + rows <= spec["dims"][1], "TMA box out of bounds"
        assert dst % 128 == 0 and dst < 1 << CLUSTER_BIT, "TMA destination: a 128-byte aligned local address"
        stride = spec["strides"][0]
        row_bytes = inner * eb
        data = []
        for r in range(rows):
            src = spec["address"] + (y + r) * stride + x * eb
            assert self.in_buffer(src, row_bytes, (spec["operand"],))
            data.append(self.mem[src:src + row_bytes])
        block = np.concatenate(data)
        logical = dst + np.arange(block.size)
        xor_bits = {"none": 0, "32B": 1, "64B": 2, "128B": 3}[spec["swizzle"]]
        phys = logical ^ (((logical >> 7) & ((1 << xor_bits) - 1)) << 4)
        # multicast: the same offsets (data and mbarrier) in every CTA of the mask
        targets = [w["cta"]] if mask is None else [c for c in self.ctas if mask >> c["rank"] & 1]
        self.stats["tma"] += 1
        self.stats["multicast"] += mask is not None
        for cta in targets:
            copy = (cta, phys, block, bar)
            if self.land == "eager":
                self.land_copy(copy)
            else:
                self.pending.append(copy)

    def land_copy(self, copy):
        cta, phys, block, bar = copy
        assert all(self.in_window(int(a)) for a in (phys.min(), phys.max()))
        cta["smem"][phys] = block
        self.bar_complete_tx(cta, bar, block.size)

    # -- wgmma (9.7.15.6) ---------------------------------------------------------------------------------
    def read_operand(self, cta, desc, rows, row_bytes, row0):
        """Bytes [rows][row_bytes] of a K-major operand from its descriptor, rows row0.. (9.7.15.5.1.2)."""
        start = (desc & 0x3FFF) << 4
        lbo = ((desc >> 16) & 0x3FFF) << 4
        sbo = ((desc >> 32) & 0x3FFF) << 4
        base_offset = (desc >> 49) & 7
        swz = {v: k for k, v in DESCRIPTOR_SWIZZLE.items()}[desc >> 62]
        assert desc & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (7 << 49) | (3 << 62)) == 0, "unused bits"
        r = np.arange(row0, row0 + rows)[:, None]
        b = np.arange(row_bytes)[None, :]
        if swz == "none":        # core matrices 8 rows x 16 B; LBO between K-adjacent ones, SBO between 8-row groups
            a = start + (r // 8) * sbo + (r % 8) * 16 + (b // 16) * lbo + b % 16
        else:                    # rows W bytes apart inside an 8-row atom, SBO between atoms
            width = {"32B": 32, "64B": 64, "128B": 128}[swz]
            assert row_bytes <= width
            bits = {"32B": 1, "64B": 2, "128B": 3}[swz]
            a = start + (r // 8) * sbo + (r % 8) * width + b
            a = a ^ ((((a >> 7) - base_offset) & ((1 << bits) - 1)) << 4)
        assert self.in_window(int(a.min())) and self.in_window(int(a.max())), "descriptor read"
        return cta["smem"][a]

    def run_wgmma(self, w, op):
        cfg, form = self.cfg, self.cfg.form
        warp = (int(w["tid"][0]) // 32) % 4
        comp = self.read_operand(w["cta"], op["a"], 16, 32, 16 * warp).view(self.storage[0])   # 16 rows x K/2
        bt = self.read_operand(w["cta"], op["b"], cfg.cta_n, 64, 0).view(self.storage[1])      # N rows x K
        words = w["r"][op["meta"]].astype(np.uint32)
        sup = metadata_suppliers(form.layout, op["sel"])
        lane = np.arange(32)
        # the hardware reads the selected threads only: lane (g, t) plays supplier 2*sel + (t & 1) (pairs)
        src = (lane & ~3) + (np.array(sup)[lane % len(sup)] if len(sup) < 4 else lane % 4)
        dense = sparse.decompress(comp, words[src].reshape(1, 1, 32), form.a_type, form.shape)
        prod = dense.astype(np.float64) @ bt.astype(np.float64).T                   # 16 x N
        g, t = lane // 4, lane % 4
        for i, reg in enumerate(op["acc"]):
            row = g + 8 * ((i >> 1) & 1)                                            # Figure 149
            col = 8 * (i >> 2) + 2 * t + (i & 1)
            old = w["r"][reg] if op["scale_d"] else np.zeros(32, np.uint64)
            if cfg.acc_type == "f32":
                v = old.astype(np.uint32).view(np.float32).astype(np.float64) + prod[row, col]
                w["r"][reg] = v.astype(np.float32).view(np.uint32).astype(np.uint64)
            else:
                v = old.astype(np.uint32).view(np.int32).astype(np.int64) + np.rint(prod[row, col]).astype(np.int64)
                w["r"][reg] = (v & 0xFFFFFFFF).astype(np.uint64)
        self.stats["wgmma"] += 1

    # -- one warp until it blocks -------------------------------------------------------------------------
    def step_warp(self, w):
        """Run until ret / a barrier / a failed try_wait / a release; returns (state, progressed)."""
        prog, labels = self.prog, self.labels
        progressed = False
        while True:
            guard, op, ops = prog[w["pc"]]
            w["pc"] += 1
            act = w["alive"].copy()
            if guard:
                act &= w["r"][guard[1]].astype(bool) ^ guard[0]
            if op == "bra.uni":
                assert act[w["alive"]].all() or not act.any(), "non-uniform branch"
                if act.any():
                    w["pc"] = labels[ops[0]]
                continue
            if not act.any():
                continue
            if op == "ret":
                w["alive"] &= ~act
                if not w["alive"].any():
                    return "ret", True
                continue
            if op in ("bar.sync", "barrier.cluster.arrive.release.aligned"):
                assert act.all() and w["alive"].all(), f"{op} by part of a warp"
                if op == "bar.sync":
                    w["bar"] = (w["cta"]["rank"], int(self.val(w, ops[0])[0]),
                                int(ops[1]) if len(ops) > 1 else self.cfg.threads)
                else:                              # arrive + the wait that follows: the whole cluster
                    w["bar"] = ("cluster", 0, self.cfg.threads * len(self.ctas))
                return "bar", True
            if op.startswith("mbarrier.try_wait"):
                a = self.addr(w, ops[1])[act]
                parity = self.val(w, ops[2])[act]
                ok = np.array([self.bar_state(w["cta"], int(x))["phase"] % 2 != int(p) for x, p in zip(a, parity)])
                full = np.zeros(32, bool)
                full[act] = ok
                self.setr(w, ops[0], full, act)
                if not ok.all():
                    return "spin", progressed
                continue
            self.exec(w, op, ops, act)
            progressed = True
            if op.startswith("mbarrier.arrive.shared"):
                return "yield", True             # whoever waits on a release may run before this warp goes on

    def exec(self, w, op, ops, act):
        v = lambda x: self.val(w, x)                      # noqa: E731
        base = op.split(".")[0]
        cta = w["cta"]
        if base == "ld" and ".param." in op:
            self.setr(w, ops[0], np.full(32, self.params[ops[1].strip("[]")], np.uint64), act)
        elif base in ("mov", "cvta"):
            self.setr(w, ops[0], v(ops[1]), act)
        elif op == "and.pred":
            self.setr(w, ops[0], v(ops[1]).astype(bool) & v(ops[2]).astype(bool), act)
        elif base in ("and", "shr", "shl", "add", "sub", "xor", "min", "div", "rem"):
            a, b = v(ops[1]), v(ops[2])
            mask = M64 if op.endswith("64") else M32
            r = {"and": lambda: a & b, "shr": lambda: a >> b, "shl": lambda: a << b, "add": lambda: a + b,
                 "sub": lambda: a - b, "xor": lambda: a ^ b, "min": lambda: np.minimum(a, b),
                 "div": lambda: a // b, "rem": lambda: a % b}[base]()
            self.setr(w, ops[0], r & mask, act)
        elif op in ("mul.lo.u32", "mad.lo.u32"):
            r = v(ops[1]) * v(ops[2]) + (v(ops[3]) if base == "mad" else np.uint64(0))
            self.setr(w, ops[0], r & M32, act)
        elif op == "mul.lo.u64":
            self.setr(w, ops[0], v(ops[1]) * v(ops[2]), act)
        elif op in ("mul.wide.u32", "mad.wide.u32"):
            r = (v(ops[1]) & M32) * (v(ops[2]) & M32) + (v(ops[3]) if base == "mad" else np.uint64(0))
            self.setr(w, ops[0], r, act)
        elif op == "cvt.u64.u32":
            self.setr(w, ops[0], v(ops[1]) & M32, act)
        elif base == "setp":
            a, b = v(ops[1]), v(ops[2])
            r = {"gt": a > b, "lt": a < b, "ge": a >= b, "ne": a != b, "eq": a == b}[op.split(".")[1]]
            self.setr(w, ops[0], r, act)
        elif base in ("fence", "prefetch"):
            if op.startswith("fence.proxy.tensormap"):
                w["fenced"].update(int(x) for x in self.addr(w, ops[0])[act])
        elif op == "barrier.cluster.wait.acquire.aligned":
            pass                                            # folded into the arrive (step_warp)
        elif op == "mapa.shared::cluster.u32":
            assert (v(ops[1]) < 1 << CLUSTER_BIT).all()
            self.setr(w, ops[0], ((v(ops[2]) + np.uint64(1)) << np.uint64(CLUSTER_BIT)) | v(ops[1]), act)
        elif op == "mbarrier.init.shared::cta.b64":
            for a in self.addr(w, ops[0])[act]:
                assert int(a) not in cta["mbar"], "mbarrier initialised twice"
                cta["mbar"][int(a)] = {"count": int(ops[1]), "pending": int(ops[1]), "tx": 0, "phase": 0}
        elif op.startswith("mbarrier.arrive"):
            tx = int(ops[2]) if "expect_tx" in op else 0
            for a in self.addr(w, ops[1])[act]:
                target, local = self.cluster_target(w, a) if ".shared::cluster" in op else (cta, int(a))
                self.bar_arrive(target, local, tx)
        elif op.startswith("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"):
            m = re.fullmatch(r"\[(%\w+), \{(%\w+), (%\w+)\}\]", ops[1])
            dst, bar = self.addr(w, ops[0]), self.addr(w, ops[2])
            tm, cx, cy = (v(m.group(i)) for i in (1, 2, 3))
            mask = v(ops[3]) if op.endswith(".multicast::cluster") else None
            for lane in np.flatnonzero(act):
                self.tma(w, int(dst[lane]), int(tm[lane]), (int(cx[lane]), int(cy[lane])), int(bar[lane]),
                         None if mask is None else int(mask[lane]))
        elif op.startswith("wgmma.mma_async.sp"):
            assert act.all() and w["alive"].all(), "wgmma by part of a warp"
            acc = _regs(ops[0])
            da, db = v(ops[1]), v(ops[2])                     # descriptors are read at issue
            assert (da == da[0]).all() and (db == db[0]).all(), "descriptor not uniform across the warp"
            rec = {"acc": acc, "a": int(da[0]), "b": int(db[0]), "meta": ops[3], "sel": int(ops[4]),
                   "scale_d": bool(v(ops[5]).astype(bool).all()), "busy": set(acc) | {ops[3]}}
            if self.late_mma:
                w["open"].append(rec)
            else:
                self.run_wgmma(w, rec)
        elif op == "wgmma.fence.sync.aligned":
            pass
        elif op == "wgmma.commit_group.sync.aligned":
            w["groups"].append(w["open"])
            w["open"] = []
        elif op == "wgmma.wait_group.sync.aligned":
            while len(w["groups"]) > int(ops[0]):
                grp = w["groups"].pop(0)
                for rec in grp:
                    rec["busy"] = set()
                    self.run_wgmma(w, rec)
        elif op in ("ld.shared.b32", "ld.shared.v4.b32"):
            regs = _regs(ops[0])
            a = self.addr(w, ops[1])
            full = [np.zeros(32, np.uint64) for _ in regs]
            for lane in np.flatnonzero(act):
                words = self.sread(cta, int(a[lane]), 4 * len(regs)).view(np.uint32)
                for i in range(len(regs)):
                    full[i][lane] = words[i]
            for reg, x in zip(regs, full):
                self.setr(w, reg, x, act)
        elif base == "st" and ".shared." in op:
            a = self.addr(w, ops[0])
            words = np.stack([v(r).astype(np.uint32) for r in _regs(ops[1])], -1)
            for lane in np.flatnonzero(act):
                self.swrite(cta, int(a[lane]), words[lane].view(np.uint8))
        elif base == "ld" and ".global." in op:
            regs = _regs(ops[0])
            a = self.addr(w, ops[1])
            full = [np.zeros(32, np.uint64) for _ in regs]
            for lane in np.flatnonzero(act):
                assert self.in_buffer(int(a[lane]), 4 * len(regs), ("c",)), "global read outside C"
                words = self.mem[int(a[lane]):int(a[lane]) + 4 * len(regs)].view(np.uint32)
                for i in range(len(regs)):
                    full[i][lane] = words[i]
            for reg, x in zip(regs, full):
                self.setr(w, reg, x, act)
        elif base == "st" and ".global." in op:
            a = self.addr(w, ops[0])
            words = np.stack([v(r).astype(np.uint32) for r in _regs(ops[1])], -1)
            for lane in np.flatnonzero(act):
                data = words[lane].view(np.uint8)
                assert self.in_buffer(int(a[lane]), data.size, ("d",)), f"global write {int(a[lane]):#x}"
                self.mem[int(a[lane]):int(a[lane]) + data.size] = data
        elif op in ("cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32"):
            import ml_dtypes
            dt = ml_dtypes.bfloat16 if "bf16" in op else np.float16
            hi, lo = (v(x).astype(np.uint32).view(np.float32).astype(dt).view(np.uint16).astype(np.uint64)
                      for x in ops[1:3])
            self.setr(w, ops[0], (hi << np.uint64(16)) | lo, act)
        else:
            raise NotImplementedError(op)

    def run_cluster(self, first: int, size: int):
        """CTAs first .. first+size-1 (one cluster), their warps interleaved until every one returned."""
        self.ctas = [{"ctaid": first + r, "rank": r, "mbar": {},
                      "smem": self.rng.integers(0, 256, self.window + self.cfg.smem_bytes, dtype=np.uint8)}  # garbage
                     for r in range(size)]
        self.pending = []
        warps = [{"pc": 0, "r": {}, "tid": np.arange(32) + 32 * i, "alive": np.ones(32, bool), "groups": [],
                  "open": [], "fenced": set(), "bar": None, "done": False, "cta": cta}
                 for cta in self.ctas for i in range(self.cfg.threads // 32)]
        for cta in self.ctas:
            cta["warps"] = [w for w in warps if w["cta"] is cta]
        steps = 0
        while not all(w["done"] for w in warps):
            steps += 1
            assert steps < 100000, "runaway"
            order = warps if self.order == "forward" else warps[::-1]
            progressed = False
            for w in order:
                if w["done"] or w["bar"] is not None:
                    continue
                state, moved = self.step_warp(w)
                progressed |= moved
                w["done"] = state == "ret"
            # barriers: release a group once `count` threads wait on the same (CTA, id) / the cluster's
            for key in {w["bar"][:2] for w in warps if w["bar"] is not None}:
                waiting = [w for w in warps if w["bar"] is not None and w["bar"][:2] == key]
                counts = {w["bar"][2] for w in waiting}
                assert len(counts) == 1, "bar.sync with different counts"
                if 32 * len(waiting) == counts.pop():
                    for w in waiting:
                        w["bar"] = None
                    progressed = True
            if not progressed:
                if not self.pending:
                    raise Stuck(f"deadlock in CTAs {first}..: " + ", ".join(
                        f"warp {i} pc {w['pc']} {'bar' if w['bar'] else 'done' if w['done'] else 'spin'}"
                        for i, w in enumerate(warps)))
                self.land_copy(self.pending.pop(int(self.rng.integers(len(self.pending)))))
        assert not self.pending, "copies still in flight at exit"
        for w in warps:
            assert not w["groups"] and not w["open"], "wgmma in flight at exit"


def run_model(cfg, m, n, k, mode="eager", order="forward", seed=0, transform=None):
    """Emit `cfg` (text passed through `transform` if given), run it on random sparse data; return
    (D, reference D, model stats)."""
    rng = np.random.default_rng(seed)
    form = cfg.form
    a = sparse.random_sparse(rng, m, k, form.a_type, form.shape)
    b = sparse.random_values(rng, (k, n), form.b_type)
    values, meta = sparse.compress(a, form.a_type, form.shape)
    bt = sparse.pack_b(b, form.b_type, form.shape)
    kern = emit_sparse_wgmma(cfg)
    acc_np = np.float32 if cfg.acc_type == "f32" else np.int32
    c = None
    if cfg.accumulate_c:
        c = (sparse.random_values(rng, (m, n), "f16").astype(np.float32) if acc_np is np.float32
             else rng.integers(-1000, 1000, (m, n)).astype(np.int32))
    out_np = {"f32": np.float32, "s32": np.int32, "f16": np.float16}.get(cfg.out_type)
    if out_np is None:
        import ml_dtypes
        out_np = ml_dtypes.bfloat16
    arrays = {"a_values": values, "a_metadata": meta, "b": bt, "d": np.zeros((m, n), out_np),
              "tensor_maps": np.zeros(3 * TMA_MAP_BYTES, np.uint8)}
    if c is not None:
        arrays["c"] = c
    mem = np.zeros(sum(x.nbytes + 8192 for x in arrays.values()) + 8192, np.uint8)
    buffers, at = {}, 4096
    for name, arr in arrays.items():
        raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        mem[at:at + raw.size] = raw
        buffers[name] = (at, raw.size)
        at += (raw.size + 4095) // 4096 * 4096 + 4096        # a gap: stray accesses hit no buffer
    s, size = buffers["d"]
    mem[s:s + size] = 0xFF                                   # poison: unwritten elements show
    params = {f"{cfg.name}_{nm}": buffers[nm][0] for nm in arrays if nm != "a_values" and nm != "a_metadata"
              and nm != "b"}
    params.update({f"{cfg.name}_M": m, f"{cfg.name}_N": n, f"{cfg.name}_K": k})
    tmaps = {}
    for i, t in enumerate(tensor_map_args(kern.abi, m, n, k)):
        tmaps[buffers["tensor_maps"][0] + i * TMA_MAP_BYTES] = {
            **t, "address": buffers[t["operand"]][0], "elem_bytes": {0: 1, 1: 2, 2: 4}[t["data_type"]],
            "swizzle": {code: name for name, code in TMA_SWIZZLE.items()}[t["swizzle"]]}
    text = transform(kern.text) if transform else kern.text
    model = WgmmaModel(text, cfg, mem, buffers, params, tmaps, mode, order, rng)
    for first in range(0, kern.grid(m, n, k)[0], cfg.cluster_m):
        model.run_cluster(first, cfg.cluster_m)
    d = mem[s:s + size].view(out_np).reshape(m, n)
    if cfg.acc_type == "s32":
        ref = a.astype(np.int64) @ b.astype(np.int64) + (c.astype(np.int64) if c is not None else 0)
        ref = ((ref + 2**31) % 2**32 - 2**31).astype(np.int32)
    else:
        af, bf = a.astype(np.float64), b.astype(np.float64)
        ref = (af @ bf + (c.astype(np.float64) if c is not None else 0)).astype(np.float32).astype(out_np)
    return d, ref, model.stats


MODEL_CASES = [
    # (form, config, M, N, K): the benchmark tiles (2 consumers of 64 and of 128 rows) with K blocks fewer
    # than, equal to and more than the ring (wrapping phases, an odd block count ending mid-unroll), staged
    # f16 D and f32 D + C; one consumer; 1 and 4 k-steps per block (32B-swizzled A; B in two 128-byte K
    # atoms); the other forms; direct D stores; raster groups that do not divide the tile rows
    (F16, dict(BENCH[0], accumulate_c=False, d_type="f16"), 128, 512, 320),
    (F16, dict(BENCH[2], accumulate_c=False, d_type="f16", raster_group=3), 512, 256, 128),
    (F16, dict(cta_m=128, cta_n=128, cta_k=64, stages=2), 256, 128, 448),
    (F16, dict(cta_m=64, cta_n=64, cta_k=32, consumers=1, stages=3, raster_group=3), 192, 128, 160),
    (BF16, dict(cta_m=256, cta_n=64, cta_k=128, stages=2, accumulate_c=False, d_type="bf16"), 256, 128, 384),
    (F16, dict(cta_m=128, cta_n=96, cta_k=64, stages=3, stage_d=False, selector=1), 128, 192, 192),
    (TF32, dict(cta_m=128, cta_n=64, cta_k=32, stages=3), 128, 128, 96),
    (S8, dict(cta_m=128, cta_n=64, cta_k=128, stages=3), 256, 64, 384),
    (U8S8, dict(cta_m=128, cta_n=48, cta_k=64, consumers=2, stages=2, stage_d=False), 128, 96, 192),
    (E4M3, dict(cta_m=128, cta_n=128, cta_k=128, stages=2, accumulate_c=False, d_type="f16"), 128, 128, 256),
    # CTA pairs sharing B (cluster_m = 2): the benchmark tiles; B in two K atoms, each halved; one consumer
    (F16, dict(BENCH[1], cluster_m=2, accumulate_c=False, d_type="f16"), 256, 256, 448),
    (F16, dict(BENCH[3], cluster_m=2, raster_group=2, accumulate_c=False, d_type="f16"), 512, 128, 384),
    (BF16, dict(cta_m=128, cta_n=64, cta_k=128, stages=2, cluster_m=2), 512, 128, 384),
    (S8, dict(cta_m=64, cta_n=32, cta_k=64, consumers=1, stages=3, cluster_m=2, raster_group=3), 384, 64, 320),
]
# every case eagerly; "lazy" (copies land late in random order, wgmma groups run when retired) and
# "late_mma" (copies land at once, wgmma groups run when retired) by default for a benchmark tile, an
# odd one and a CTA pair, every case in the slow sweep
LAZY_DEFAULT = {("lazy", 3), ("lazy", 10), ("late_mma", 0), ("late_mma", 13)}
MODEL_RUNS = [pytest.param(*case, "eager", "forward", id=f"{i}-eager") for i, case in enumerate(MODEL_CASES)] + \
    [pytest.param(*case, mode, "reverse", id=f"{i}-{mode}", marks=() if (mode, i) in LAZY_DEFAULT else pytest.mark.slow)
     for i, case in enumerate(MODEL_CASES) for mode in ("lazy", "late_mma")]


@pytest.mark.parametrize("form,kw,m,n,k,mode,order", MODEL_RUNS)
def test_emitted_ptx_computes_the_gemm(form, kw, m, n, k, mode, order):
    if form.a_type in ("bf16", "e4m3") or kw.get("d_type") == "bf16":
        pytest.importorskip("ml_dtypes")
    cfg = cfg_of(form, **kw)
    d, ref, stats = run_model(cfg, m, n, k, mode, order, seed=m + n + k)
    tiles = (m // cfg.cta_m) * (n // cfg.cta_n)
    blocks = k // cfg.cta_k
    # every copy and instruction happened: 2 + B-atom boxes per block; ksteps x m-blocks x consumers x 4 warps
    assert stats["tma"] == tiles * blocks * len(tma_boxes(cfg))
    assert stats["multicast"] == (tiles * blocks * (len(tma_boxes(cfg)) - 2) if cfg.cluster_m > 1 else 0)
    assert stats["wgmma"] == tiles * blocks * cfg.ksteps * cfg.m_blocks * cfg.consumers * 4
    assert np.array_equal(d.view(np.uint8), ref.view(np.uint8)), \
        f"{np.count_nonzero(d.view(np.uint8) != ref.view(np.uint8))} bytes differ"


# Mutations the model must catch: the consumer releases the slot it is reading; it releases the block
# before before that block's wgmma group completed;
# the producer waits on parity 1 always (a refill does not wait for the consumers); no wait_group 1; the A
# descriptor one k-step off; the metadata of the wrong warp.
MUTATIONS = {
    "early_release": lambda t: t.replace("shl.b32 %x, %pn, 3;", "shl.b32 %x, %st, 3;"),
    "release_before_wait": lambda t: t.replace("wgmma.wait_group.sync.aligned 1;", "").replace(
        "mov.u32 %pn, %st;", "wgmma.wait_group.sync.aligned 1;\n    mov.u32 %pn, %st;"),
    "no_wait_group": lambda t: t.replace("wgmma.wait_group.sync.aligned 1;", "wgmma.fence.sync.aligned;"),
    "producer_ignores_empty": lambda t: t.replace("xor.b32 %x, %ph, 1;", "mov.u32 %x, 1;", 1),
    "a_kstep_off": lambda t: t.replace("add.u64 %da, %da, 2;", "add.u64 %da, %da, 4;"),
    "metadata_of_warp_0": lambda t: t.replace("add.u32 %x, %x, %warp;", "add.u32 %x, %x, 0;"),
}
# CTA pairs: a consumer releases only its own CTA's slot (the peer's producer may then overwrite it);
# no cluster barrier before exit (a peer's release reaches an exited CTA); B halves both from rank 0
CLUSTER_MUTATIONS = {
    "local_release_only": lambda t: t.replace("mapa.shared::cluster.u32 %y, %x, 1;", "mapa.shared::cluster.u32 %y, %x, %rk;"),
    "no_exit_sync": lambda t: t[:t.rindex("barrier.cluster.arrive")] + t[t.rindex("barrier.cluster.wait.acquire.aligned;") + 37:],
    "same_half": lambda t: t.replace("mad.lo.u32 %c2, %rk,", "mad.lo.u32 %c2, 0,"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_model_catches_broken_kernels(name):
    cfg = cfg_of(F16, **dict(BENCH[0], stages=2, accumulate_c=False, d_type="f16"))
    kern_text = emit_sparse_wgmma(cfg).text
    mutated = MUTATIONS[name](kern_text)
    assert mutated != kern_text, "mutation did not apply"
    caught = []
    for mode in ("lazy", "late_mma"):
        try:
            d, ref, _ = run_model(cfg, 128, 256, 384, mode, "reverse", seed=3, transform=MUTATIONS[name])
            caught.append(not np.array_equal(d.view(np.uint8), ref.view(np.uint8)))
        except (AssertionError, Stuck, KeyError):
            caught.append(True)                    # the model refused to run it
        if caught[-1]:
            break
    assert any(caught), f"{name} went unnoticed"


@pytest.mark.parametrize("name", list(CLUSTER_MUTATIONS))
def test_model_catches_broken_cluster_kernels(name):
    cfg = cfg_of(F16, **dict(BENCH[0], stages=2, cluster_m=2, accumulate_c=False, d_type="f16"))
    kern_text = emit_sparse_wgmma(cfg).text
    assert CLUSTER_MUTATIONS[name](kern_text) != kern_text, "mutation did not apply"
    caught = []
    for mode in ("lazy", "late_mma"):
        try:
            d, ref, _ = run_model(cfg, 256, 256, 384, mode, "reverse", seed=5, transform=CLUSTER_MUTATIONS[name])
            caught.append(not np.array_equal(d.view(np.uint8), ref.view(np.uint8)))
        except (AssertionError, Stuck, KeyError):
            caught.append(True)
        if caught[-1]:
            break
    assert any(caught), f"{name} went unnoticed"


# --------------------------------------------------------------------------------------------------
# 2. geometry
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", BENCH + [dict(cta_m=128, cta_n=64, cta_k=32), dict(cta_m=256, cta_n=64, cta_k=128)],
                         ids=str)
def test_descriptors_match_the_h100_checked_conversion(kw):
    """wgmma_descriptor(layout strides) == benchmarks/wgmma_read_check.py's conversion of tilec's tcgen05
    descriptor of the same tile (that path read 206/206 tiles correctly on the H100, docs/verification.md)."""
    wrc = _bench_module("wgmma_read_check")
    cfg = cfg_of(F16, **kw)
    for op, lay in zip("AB", layouts(cfg)):
        region = cfg.regions[op]
        step = (32 if op == "A" else 64) * 8 // cfg.storage_bits
        base = 4096 + region.offset                   # a slot base on the 1024-byte repeat
        for s in range(cfg.ksteps):
            theirs = wrc.wgmma_descriptor(lay.descriptor(s * step, step, base_address=base).encode())
            ours = descriptor_base(cfg, op) + ((4096 + descriptor_offset(cfg, op, 0, s)) >> 4)
            assert ours == theirs, (op, s, hex(ours), hex(theirs))


def test_descriptor_bits_by_hand():
    # 9.7.15.5.1.2.2: start 0x1240 -> 0x124 at bits 0-13; LBO 16 -> 1 at 16-29; SBO 1024 -> 64 at 32-45;
    # 128-byte swizzle = 1 at bits 62-63
    assert wgmma_descriptor(0x1240, 16, 1024, "128B") == 0x124 | 1 << 16 | 64 << 32 | 1 << 62
    # 64-byte swizzle = 2, 32-byte = 3; SBO 512 -> 32
    assert wgmma_descriptor(0, 16, 512, "64B") == 1 << 16 | 32 << 32 | 2 << 62
    assert wgmma_descriptor(0, 16, 256, "32B") >> 62 == 3
    with pytest.raises(SpecError):
        wgmma_descriptor(0, 16, 1024, "128B", base_offset=8)


@pytest.mark.parametrize("kw", BENCH + [dict(cta_m=128, cta_n=64, cta_k=32), dict(cta_m=256, cta_n=64, cta_k=128)],
                         ids=str)
def test_copy_engine_swizzle_is_the_canonical_layout(kw):
    """Every byte a TMA box writes (row r, byte c of the box at its slot offset, swizzled on the address)
    lands where compiler/layout.py's canonical K-major layout of the region puts that element."""
    cfg = cfg_of(F16, **kw)
    lay_a, lay_b = layouts(cfg)
    eb = cfg.storage_bits // 8
    for box in tma_boxes(cfg):
        if box.tensor == 2:
            continue
        region, lay = (cfg.regions["A"], lay_a) if box.tensor == 0 else (cfg.regions["B"], lay_b)
        width = box.inner * eb
        for r in range(box.outer):
            for c in range(0, width, eb):
                tma_addr = swizzle_bytes(box.offset + r * width + c, region.swizzle) if region.swizzle != "none" \
                    else box.offset + r * width + c
                k_elem = (box.x0 * eb + c) // eb
                assert tma_addr == region.offset + lay.offset(r, k_elem), (box, r, c)


def test_fragment_map_matches_figure_149():
    wrc = _bench_module("wgmma_read_check")
    for n in (64, 256):
        theirs = wrc.fragment_map(n)
        for i, dr, dc in theirs:
            for warp in range(4):
                for lane in range(32):
                    row, col = fragment_coord(i, warp, lane)
                    assert (row, col) == (16 * warp + lane // 4 + dr, 2 * (lane % 4) + dc)


def test_tensor_map_arguments():
    cfg = cfg_of(F16, **dict(BENCH[0], accumulate_c=False, d_type="f16"))
    kern = emit_sparse_wgmma(cfg)
    a, b, e = tensor_map_args(kern.abi, 8192, 4096, 2048)
    # A values: K/2 = 1024 f16 per row (UINT16 = 1), M rows, row stride 2048 B; box 32 x 128 (64 B rows,
    # 64-byte swizzle = CU_TENSOR_MAP_SWIZZLE_64B = 2)
    assert (a["data_type"], a["dims"], a["strides"], a["box"], a["swizzle"]) == (1, (1024, 8192), (2048,), (32, 128), 2)
    # B^T: K = 2048 f16 per row, N rows, stride 4096 B; box 64 x 256 (128 B rows, SWIZZLE_128B = 3)
    assert (b["dims"], b["strides"], b["box"], b["swizzle"]) == ((2048, 4096), (4096,), (64, 256), 3)
    # metadata: K/32 = 64 k-steps x 32 words per 16-row tile (UINT32 = 2), M/16 rows; box 2 k-steps x 8 tiles
    assert (e["data_type"], e["dims"], e["strides"], e["box"], e["swizzle"]) == (2, (2048, 512), (8192,), (64, 8), 0)


# --------------------------------------------------------------------------------------------------
# 3. ptxas, configuration errors, DSL
# --------------------------------------------------------------------------------------------------

def _assemble(ptxas, text: str, tmp_path: Path) -> str:
    src = tmp_path / "k.ptx"
    src.write_text(text)
    res = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stderr


PTXAS_CASES = [(F16, b) for b in BENCH] + [
    (F16, dict(cta_m=128, cta_n=256, cta_k=64, stages=4, accumulate_c=True)),       # f32 D + C (the DSL example)
    (BF16, dict(cta_m=256, cta_n=128, cta_k=64, stages=5, d_type="bf16", accumulate_c=False)),
    (TF32, dict(cta_m=128, cta_n=256, cta_k=32, stages=4)),
    (E4M3, dict(cta_m=128, cta_n=256, cta_k=128, stages=4, d_type="f16", accumulate_c=False)),
    (E5M2, dict(cta_m=256, cta_n=128, cta_k=128, stages=3)),
    (S8, dict(cta_m=128, cta_n=256, cta_k=128, stages=4)),
    (U8S8, dict(cta_m=64, cta_n=128, cta_k=64, consumers=1, stages=4)),
    (F16, dict(BENCH[1], cluster_m=2, d_type="f16")),                                 # CTA pairs sharing B
    (F16, dict(BENCH[3], cluster_m=2, d_type="f16")),
]


@pytest.mark.parametrize("form,kw", PTXAS_CASES, ids=lambda x: getattr(x, "name", None) or str(x))
def test_ptxas_assembles_without_spills(ptxas, tmp_path, form, kw):
    kw = {"accumulate_c": False, **kw}
    cfg = cfg_of(form, **kw)
    kern = emit_sparse_wgmma(cfg)
    log = _assemble(ptxas, kern.text, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    assert regs <= cfg.max_regs                     # one CTA of cfg.threads fits the register file
    assert f"wgmma.mma_async.sp.sync.aligned.m64n{cfg.cta_n}k{form.k}" in kern.text
    assert kern.text.count("cp.async.bulk.tensor.2d") == len(tma_boxes(cfg))
    assert (".reqnctapercluster 2, 1, 1" in kern.text) == (cfg.cluster_m == 2)


def test_emission_is_deterministic():
    cfg = cfg_of(F16, **BENCH[0])
    assert emit_sparse_wgmma(cfg).text == emit_sparse_wgmma(cfg).text


@pytest.mark.parametrize("kw,field,needle", [
    (dict(target="sm_90"), "schedule.mma", "requires sm_90a"),
    (dict(cta_n=264), "schedule.cta", "not an N"),
    (dict(cta_m=192), "schedule.cta", "64 or 128"),
    (dict(consumers=3, cta_m=192), "schedule.warps", "1 or 2 consumer"),
    (dict(cta_m=256, cta_n=256), "schedule.cta", "accumulator"),
    (dict(cta_k=96), "schedule.cta", "cta K"),
    (dict(stages=9), "schedule.stages", "2..8"),
    (dict(cta_m=256, cta_n=128, cta_k=128, stages=4), "schedule.stages", "exceed"),
    (dict(selector=2), "sparsity.selector", "selector 2"),
    (dict(d_type="s32"), "D.dtype", "cannot be stored"),
    (dict(cluster_m=4), "schedule", "cluster_m = 4"),
    (dict(cta_n=24, cluster_m=2), "schedule", "cluster_m = 2"),
])
def test_config_errors(kw, field, needle):
    with pytest.raises(SpecError) as e:
        emit_sparse_wgmma(cfg_of(F16, **kw))
    assert e.value.field == field and needle in e.value.message, e.value


def test_forms_without_wgmma_are_rejected():
    k16 = find_form("m16n8k16", "f16", "f16", "f32", "f32")            # not the k32 wgmma step
    with pytest.raises(SpecError, match="m64nNk32"):
        emit_sparse_wgmma(cfg_of(k16))
    s4 = find_form("m16n8k128", "s4", "s4", "s32", "s32")              # no 4-bit wgmma.sp (9.7.15.6.3)
    with pytest.raises(SpecError, match="no form"):
        emit_sparse_wgmma(cfg_of(s4))
    f16acc = find_form("m16n8k32", "f16", "f16", "f16", "f16")
    with pytest.raises(SpecError, match="accumulates in f32"):
        emit_sparse_wgmma(cfg_of(f16acc))


def test_dsl_example_selects_the_wgmma_kernel(ptxas, tmp_path):
    from compiler import compile_source
    src = (REPO / "examples" / "sparse_wgmma_f16.tile").read_text()
    res = compile_source(src)
    ptx = res.ptx
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async.sp.sync.aligned.m64n256k32.f32.f16.f16" in ptx
    assert "cp.async.bulk.tensor.2d" in ptx and "mma.sp::ordered_metadata" not in ptx
    log = _assemble(ptxas, ptx, tmp_path)
    assert "0 bytes spill stores" in log


def test_dsl_wgmma_needs_sm_90a():
    from compiler import CompileError, compile_source
    src = (REPO / "examples" / "sparse_wgmma_f16.tile").read_text().replace("target sm_90a;", "target sm_80;")
    with pytest.raises(CompileError) as e:
        compile_source(src)
    assert "sm_90a" in str(e.value)
