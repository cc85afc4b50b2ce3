"""Hypothesis strategies over the generators (shrinkable: every choice is a hypothesis draw)."""
from __future__ import annotations

from hypothesis import strategies as st

from . import generate, mutate


@st.composite
def generated_sources(draw) -> str:
    """A whole file from the grammar and the legality tables (generate.source)."""
    return generate.source(generate.HypothesisChooser(draw))


@st.composite
def mutated_sources(draw) -> str:
    """A corpus file (examples/, tests/lit/) after one to four token/character mutations."""
    return mutate.mutated_corpus_file(generate.HypothesisChooser(draw))


@st.composite
def damaged_bytes(draw) -> bytes:
    """A corpus file's bytes with damaged UTF-8 (for the CLI, which reads the file itself)."""
    c = generate.HypothesisChooser(draw)
    return mutate.mutate_bytes(c, c.choice(mutate.corpus()))


def sources() -> st.SearchStrategy[str]:
    return st.one_of(generated_sources(), mutated_sources())
