"""Who may call `sparring gateway`, and how much: loopback names only on a loopback bind, the
token on any other, a body size limit, no CORS; refusals in OpenAI's error format."""

from __future__ import annotations

import httpx
import openai
import pytest
from gateway_lab import Lab, make_lab, serve
from typer.testing import CliRunner

from app.cli import app

TOKEN = "a-token-of-at-least-16-characters"
ASK = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("guarded"))


def test_a_loopback_gateway_answers_loopback_names_only(lab):
    with serve(lab) as served:
        assert httpx.get(f"{served.base_url}/models").status_code == 200
        rebound = httpx.get(f"{served.base_url}/models", headers={"Host": "evil.example:8766"})
        assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "host_refused"
        preflight = httpx.options(f"{served.base_url}/chat/completions",
                                  headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in preflight.headers
        assert preflight.headers["x-frame-options"] == "DENY"


def test_another_bind_needs_the_token_as_the_api_key(lab):
    with serve(lab, token=TOKEN, host="0.0.0.0") as served:
        with pytest.raises(openai.AuthenticationError) as exc:
            openai.OpenAI(base_url=served.base_url, api_key="wrong", max_retries=0).models.list()
        assert exc.value.response.json()["error"]["code"] == "invalid_api_key"
        allowed = openai.OpenAI(base_url=served.base_url, api_key=TOKEN, max_retries=0)
        assert allowed.chat.completions.create(model="base", messages=ASK, max_tokens=2).choices[0].finish_reason
        served.flush()
        assert len(lab.rows("SELECT id FROM turns")) == 1  # the refused call logged nothing


def test_a_body_over_the_limit_is_refused_before_it_is_read(lab):
    with serve(lab, max_body_bytes=2048) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        with pytest.raises(openai.APIStatusError) as exc:
            client.chat.completions.create(model="base", messages=[{"role": "user", "content": "x" * 4096}],
                                           max_tokens=2)
        assert exc.value.status_code == 413 and exc.value.response.json()["error"]["code"] == "body_too_large"
        chunked = httpx.post(f"{served.base_url}/chat/completions", content=iter([b"{" + b" " * 3000, b"}"]))
        assert chunked.status_code == 413


def test_the_command_refuses_another_bind_without_a_token(lab, monkeypatch):
    monkeypatch.delenv("SPARRING_API_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["gateway", "--host", "0.0.0.0", "--db", lab.settings.database_url])
    assert result.exit_code == 2
    assert "SPARRING_API_TOKEN" in " ".join(result.output.split())
