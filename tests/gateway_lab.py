"""A `sparring gateway` for tests: a tiny random model as the base, random LoRA versions in a
real registry, the real app served by uvicorn in a thread on a free loopback port, a SQLite store
(or another store the test names)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
import torch
from sqlalchemy import Engine, text
from tiny_model import save_random_lora, save_tiny_model, tiny_model, tiny_tokenizer
from uvicorn_thread import serving

from app.gateway.app import create_app, gateway_session
from app.gateway.service import Gateway
from app.settings import Settings, load_settings
from app.wiring import PolicyFactory
from graphs.policies.base import SamplingParams
from storage.engine import open_store
from training.registry import promote, publish

JSON_COLUMNS = {"messages", "prompt_token_ids", "completion_token_ids", "logprobs", "sampling", "task", "seats",
                "outcome", "info", "summary", "config"}


@dataclass
class Lab:
    """A store with a tiny base model's settings, and LoRA versions to publish for it."""

    root: Path
    settings: Settings
    engine: Engine

    def publish(self, role: str, *, active: bool = True, seed: int = 1) -> str:
        """A new version of ``role`` (a random LoRA, different per ``seed``), promoted when ``active``."""
        lora = self.lora(tiny_model(tiny_tokenizer()), f"lora-{role}-{seed}", seed)
        return self.register(role, lora, active=active)

    def lora(self, model: torch.nn.Module, folder: str, seed: int) -> Path:
        """A random LoRA for ``model``'s shape, saved in ``folder`` as trained on the lab's base model."""
        model.config.name_or_path = self.settings.model
        return save_random_lora(model, self.root / folder, seed=seed)

    def register(self, role: str, lora: Path, *, active: bool = True) -> str:
        """Publish the LoRA folder ``lora`` as the next version of ``role``, promoted when ``active``."""
        record = publish(self.engine, role=role, trained_dir=lora, adapters_root=self.root / "adapters",
                         base_model=self.settings.model, trainer="sft", config={}, parent=None,
                         dataset_snapshot_id=None, metrics={})
        if active:
            promote(self.engine, record.name, eval={})
        return record.name

    def rows(self, sql: str, **params: object) -> list[dict]:
        """The rows of ``sql``, their JSON columns decoded."""
        with self.engine.connect() as conn:
            found = [dict(r._mapping) for r in conn.execute(text(sql), params)]
        return [{k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v for k, v in row.items()}
                for row in found]


def make_lab(root: Path, database_url: str | None = None) -> Lab:
    """A lab in ``root``, on a SQLite file there unless ``database_url`` names another store."""
    base = save_tiny_model(root / "tiny")
    settings = load_settings(model=str(base), database_url=database_url or f"sqlite:///{root / 'gateway.db'}",
                             device="cpu", cache_dir=str(root / "cache"), data_dir=str(root / "data"))
    return Lab(root, settings, open_store(settings.database_url))


@dataclass
class Served:
    base_url: str
    """the OpenAI base URL, ending in /v1"""
    gateway: Gateway

    def flush(self) -> None:
        """Wait until everything the gateway logged so far is in the store."""
        self.gateway.book.recorder.flush()


@contextmanager
def serve(lab: Lab, *, token: str | None = None, host: str = "127.0.0.1", max_tokens: int = 64,
          max_body_bytes: int = 64 * 1024, game: str = "external") -> Iterator[Served]:
    """The gateway over ``lab``'s store and model, bound to 127.0.0.1 (``host`` is the bind the app
    believes it has: another one turns the token on, without exposing the test)."""
    factory = PolicyFactory(lab.settings, SamplingParams(), lab.engine)
    factory.model_backend()
    with gateway_session(lab.engine, factory, game=game, max_tokens=max_tokens) as gateway:
        app = create_app(gateway, token=token, host=host, max_body_bytes=max_body_bytes)
        with serving(app) as port:
            yield Served(f"http://127.0.0.1:{port}/v1", gateway)


@contextmanager
def held_worker(served: Served) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Holds the in-process backend's worker inside its next forward pass until ``release`` is
    set: a generation that is surely running while the test acts. Yields (entered, release)."""
    entered, release = threading.Event(), threading.Event()

    def gate(_module: object, _args: object) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(timeout=120)

    hook = served.gateway.names.factory.model_backend().model.get_input_embeddings().register_forward_pre_hook(gate)
    try:
        yield entered, release
    finally:
        release.set()
        hook.remove()


@pytest.fixture(scope="module")
def served(lab: Lab) -> Iterator[Served]:
    """The gateway over the requesting module's ``lab`` fixture, for the whole module."""
    with serve(lab) as running:
        yield running


@pytest.fixture(scope="module")
def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
