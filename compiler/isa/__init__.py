"""The PTX facts tilec uses, in one place: everything here is stated by the PTX ISA (or, where a fact is not
in its text, by the named outside source), as data with the section or table it comes from.

- `types`: element types and their PTX names (PTX ISA 5.2 "Fundamental types").
- `swizzle`: majors and swizzle modes of shared-memory matrices: descriptor codes (9.7.16.4.1, Table 40),
  atoms and Swizzle<B,M,S> functors (9.7.16.3.3).
- `sparsity`: structured-sparsity granularities 2:4, 1:2, 4:8 of mma.sp and tcgen05.mma.sp (9.7.14.6.1,
  9.7.16.10.8).
- `targets`: `.target` names and the PTX ISA version each needs.
- `tcgen05_kinds`: `tcgen05.mma` kinds, legal A/B/D types, K and valid shapes (9.7.16.2.1 Table 39,
  Tables 42-44, 49, 50).
- `tcgen05_forms`: `tcgen05.mma` instruction forms, their PTX versions and targets (9.7.16.10.9,
  Tables 60/61), and the supporting tcgen05 instructions.
- `tmem`: Tensor Memory geometry, data-path layouts (9.7.16.10.5, incl. `.ws` and 2-CTA), sparse
  metadata (9.7.16.10.8.4) and block-scale factor (9.7.16.10.7) layouts.
- `mma_sp`: warp-level `mma.sp` forms, fragment and metadata layouts (9.7.14.6).
- `wgmma`: Hopper sparse `wgmma.mma_async.sp` forms and the wgmma matrix descriptor (9.7.15.5-6).
- `bulk_copy`: the non-tensor bulk copy shared -> global (`cp.async.bulk ... .bulk_group`, 9.7.9.25.4.1)
  and its bulk async-group commit / wait instructions: PTX version, target, alignment.

Layering: this package imports nothing from the front end, the IR, the passes or the PTX writers
(compiler.frontend / ir / passes / ptx); they all read it. Submodules load on demand.
"""
