"""Robustness fuzzing for tilec: generators of DSL text, mutations of real tiles, and the harness
that runs the whole pipeline and decides what counts as a crash.

    harness     run one input in-process (`check_source`) or through the CLI (`check_cli`)
    vocab       the words and numbers the generators use, read from the compiler's own tables
    generate    tile text from the grammar and vocabulary, driven by any `Chooser`
    mutate      token- and byte-level mutations of a corpus of real .tile files
    strategies  hypothesis strategies over `generate` and `mutate`
    negative    the negative table: one illegal tile per class, with the token it must blame

Everything is deterministic for a given seed (random.Random) or hypothesis draw sequence.
"""
