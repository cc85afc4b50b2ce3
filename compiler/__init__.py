"""tilec: GEMM tile DSL -> PTX for tensor cores. Public API is re-exported lazily."""
