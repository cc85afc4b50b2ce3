"""tcgen05.cp on the emulator (compiler/emulator/tcgen05.py), on a hand-written kernel: 128 threads write a
2048-byte shared-memory matrix whose row r holds the words 16r+1 .. 16r+4 (no swizzle, 16-byte rows, 8-row
core matrices 128 bytes apart: SBO = 128, PTX 9.7.16.4.1); thread 0 copies it into TMEM with
`.128x128b` (row i -> lane i, columns 0-3) and its first 32 rows with `.32x128b.warpx4` (row i -> lanes i,
32 + i, 64 + i, 96 + i, columns 4-7), commits and waits; each warp reads its lane quarter back with
tcgen05.ld.32x32b.x8 and stores it. The source rows are read through compiler/sim/smem.py's descriptor
walk; under the adversarial policy the copies complete late, in the thread's tcgen05 order."""
from __future__ import annotations

import numpy as np
import pytest

from compiler.descriptors.smem import SmemDesc
from compiler.emulator import EmulationError
from compiler.emulator.tcgen05 import run_kernel


def kernel(copies: str) -> str:
    full = SmemDesc(0, lbo=2048, sbo=128).encode()
    return f""".version 8.8
.target sm_100a
.address_size 64
.visible .entry cp(
    .param .u64 cp_param_D
)
.reqntid 128, 1, 1
{{
    .reg .pred %p<4>;
    .reg .b32 %r<40>;
    .reg .b64 %rd<8>;
    .shared .align 1024 .b8 cp_src[2048];
    .shared .align 8 .b64 cp_bar;
    .shared .align 4 .b32 cp_slot;
    mov.u32 %r0, %tid.x;
    shr.u32 %r1, %r0, 5;
    mov.u32 %r2, cp_src;
    mad.lo.u32 %r3, %r0, 16, %r2;
    mad.lo.u32 %r4, %r0, 16, 1;
    st.shared.u32 [%r3], %r4;
    add.u32 %r4, %r4, 1;
    st.shared.u32 [%r3+4], %r4;
    add.u32 %r4, %r4, 1;
    st.shared.u32 [%r3+8], %r4;
    add.u32 %r4, %r4, 1;
    st.shared.u32 [%r3+12], %r4;
    fence.proxy.async.shared::cta;
    mov.u32 %r5, cp_bar;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r5], 1;
    fence.mbarrier_init.release.cluster;
    mov.u32 %r6, cp_slot;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra.uni $L_alloc_done;
    tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r6], 32;
    tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
$L_alloc_done:
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    tcgen05.fence::after_thread_sync;
    ld.shared.b32 %r7, [%r6];
    @!%p0 bra $L_copied;
    shr.u32 %r8, %r2, 4;
    cvt.u64.u32 %rd0, %r8;
    add.u64 %rd1, %rd0, {full:#018x};
{copies}
    tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r5];
$L_copied:
    mov.u32 %r10, 0;
$L_wait:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r5], %r10;
    @!%p2 bra.uni $L_wait;
    tcgen05.fence::after_thread_sync;
    shl.b32 %r11, %r1, 21;
    add.u32 %r12, %r7, %r11;
    tcgen05.ld.sync.aligned.32x32b.x8.b32 {{%r20, %r21, %r22, %r23, %r24, %r25, %r26, %r27}}, [%r12];
    tcgen05.wait::ld.sync.aligned;
    ld.param.u64 %rd2, [cp_param_D];
    cvta.to.global.u64 %rd2, %rd2;
    mul.wide.u32 %rd3, %r0, 32;
    add.u64 %rd4, %rd2, %rd3;
    st.global.v4.b32 [%rd4], {{%r20, %r21, %r22, %r23}};
    st.global.v4.b32 [%rd4+16], {{%r24, %r25, %r26, %r27}};
    tcgen05.fence::before_thread_sync;
    bar.sync 0;
    @%p1 bra.uni $L_end;
    tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r7, 32;
$L_end:
    ret;
}}
"""


COPIES = """    tcgen05.cp.cta_group::1.128x128b [%r7], %rd1;
    add.u32 %r9, %r7, 4;
    tcgen05.cp.cta_group::1.32x128b.warpx4 [%r9], %rd1;"""


def run(copies: str = COPIES, policy: str | None = None) -> np.ndarray:
    m = run_kernel(kernel(copies), {"D": np.zeros(128 * 8, np.uint32)}, (1, 1), entry="cp", policy=policy, seed=3)
    return m.gmem.array("D").view(np.uint32).reshape(128, 8)


@pytest.mark.parametrize("policy", [None, "adversarial", "random"])
def test_shapes_and_replicas(policy):
    d = run(policy=policy)
    rows = np.arange(128)[:, None] * 16 + 1 + np.arange(4)[None, :]
    # .128x128b: lane i, columns 0-3 = row i
    assert np.array_equal(d[:, :4], rows)
    # .32x128b.warpx4: lane i of every quarter, columns 4-7 = row i % 32
    assert np.array_equal(d[:, 4:], rows[np.arange(128) % 32])


def test_misaligned_column_and_unmodelled_shape():
    with pytest.raises(EmulationError, match="multiple of 4"):
        run(COPIES.replace("add.u32 %r9, %r7, 4;", "add.u32 %r9, %r7, 2;"))
    with pytest.raises(EmulationError, match="not modelled"):
        run("    tcgen05.cp.cta_group::1.4x256b [%r7], %rd1;")


def test_copy_read_outside_shared_memory():
    # the start address moved past the 2048-byte matrix and the rest of the window
    with pytest.raises(EmulationError, match="outside"):
        run(COPIES.replace("tcgen05.cp.cta_group::1.128x128b [%r7], %rd1;",
                           "add.u64 %rd5, %rd1, 0x3000;\n    tcgen05.cp.cta_group::1.128x128b [%r7], %rd5;"))
