"""Host halves of the GPU correctness checks (tests/gpu/test_*.py run them on a GPU; tests/test_*_host.py and
other CPU tests run everything but the launches).

    smem_dump       tcgen05 copy code, canonical layouts and descriptors, through smem dumps on sm_90a
    wgmma_read      the read side of tilec's smem descriptors, through Hopper wgmma
    mma_sp_hw       every mma.sp form an sm_80 / sm_89 / sm_90 GPU can run, through tilec's kernel emitter
    sparse_kernels  exact problems, ABI-driven launches and the benchmarks' schedules and 2:4 packer
    nvcc_link       CUDA C++ callers of tilec fragments built and linked with nvcc (README "Embedding")
    fragment_gemm   a CUDA C++ GEMM loop calling the mma.sp fragment out of line / inlined: packing, build, CPU emulation

Imported as `tests.gpu.harness.<name>` with the repository root on sys.path (`python -m pytest` from the
root, pyproject's pytest `pythonpath`, or PYTHONPATH); the CLIs of smem_dump, wgmma_read and mma_sp_hw run
as `python -m tests.gpu.harness.<name> ...` from the root. Nothing here imports cupy or torch at module
level, and this package imports nothing, so a device worker (`python -m tests.gpu.harness.smem_dump
device-worker`) needs only numpy and cupy.
"""
