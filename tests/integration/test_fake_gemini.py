"""The fake Gemini endpoint speaks what the real google-genai client sends."""

import pytest
from google import genai
from google.genai import types

from tests.fake_gemini import FakeGemini, error_reply, fake_embedding, json_reply


def _client(fake):
    return genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url))


def test_embeddings_through_the_real_client_are_the_fakes_vectors():
    with FakeGemini() as fake:
        client = _client(fake)  # held: a collected Client closes its HTTP client
        result = client.models.embed_content(
            model="text-embedding-005",
            contents=["alpha", "beta"],
            config=types.EmbedContentConfig(output_dimensionality=8),
        )
        assert [e.values for e in result.embeddings] == [
            fake_embedding("alpha", 8),
            fake_embedding("beta", 8),
        ]
        (call,) = fake.requests
        assert call.method in ("batchEmbedContents", "embedContent")
        assert call.model == "text-embedding-005"


def test_scripted_replies_come_in_order_then_the_default():
    with FakeGemini() as fake:
        fake.script("generateContent", error_reply(503), json_reply({"x": 1}))
        client = _client(fake)
        with pytest.raises(genai.errors.ServerError) as first:
            client.models.generate_content(model="m", contents="hi")
        assert first.value.code == 503
        reply = client.models.generate_content(model="m", contents="hi")
        # The usage is the request's own, as Gemini reports it: "hi" is one token.
        assert reply.text == '{"x": 1}' and reply.usage_metadata.prompt_token_count == 1
        # Nothing scripted any more: the default answers 500 and says why.
        with pytest.raises(genai.errors.ServerError) as last:
            client.models.generate_content(model="m", contents="hi")
        assert last.value.code == 500 and "no scripted reply" in str(last.value)
        assert [r.prompt_text() for r in fake.calls("generateContent")] == ["hi"] * 3
