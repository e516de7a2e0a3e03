"""Each embedding provider declares the weight of its vector ranking in hybrid
search's fusion; `AM_SEARCH_VECTOR_WEIGHT` overrides it."""

import pytest

from shared.config import load_settings
from shared.embeddings import provider_vector_weight
from shared.memory.ranking import Fusion


@pytest.fixture(autouse=True)
def _no_search_environment(monkeypatch):
    for name in ("AM_SEARCH_VECTOR_WEIGHT", "AM_SEARCH_TEXT_WEIGHT", "AM_SEARCH_RRF_K"):
        monkeypatch.delenv(name, raising=False)


def _settings(provider: str, **overrides):
    dim = 384 if provider == "e5" else 768
    return load_settings(embedding_provider=provider, embedding_dim=dim, **overrides)


@pytest.mark.parametrize(("provider", "weight"), [("hash", 0.4), ("e5", 6.0), ("gemini", 6.0)])
def test_a_search_weighs_the_vector_ranking_as_its_provider_declares(provider, weight):
    assert provider_vector_weight(provider) == weight
    fusion = Fusion.from_settings(_settings(provider))
    assert (fusion.vector_weight, fusion.text_weight, fusion.k, fusion.top) == (weight, 0.6, 20, 5)


@pytest.mark.parametrize("provider", ["hash", "e5", "gemini"])
def test_an_explicit_vector_weight_overrides_the_providers(provider, monkeypatch):
    monkeypatch.setenv("AM_SEARCH_VECTOR_WEIGHT", "0.25")
    assert Fusion.from_settings(_settings(provider)).vector_weight == 0.25
    # 0, full text alone, is a setting, not "unset".
    assert Fusion.from_settings(_settings(provider, search_vector_weight=0)).vector_weight == 0
