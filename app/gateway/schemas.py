"""The request bodies the gateway reads. OpenAI's fields that change nothing about the reply
(user, store...) and fields it does not know are accepted and ignored; the ones it cannot honour
are refused by name when they ask for something (``app.gateway.unserved``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.gateway import SPLIT


class OpenAIRequest(BaseModel):
    """What chat and text completions share."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)
    PROMPT: ClassVar[str] = "prompt"
    """the field that holds the prompt"""

    model: str = Field(min_length=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    """``episode_id``, ``seat``, ``conversation_id``: where the call belongs (docs/gateway.md)"""

    def reply_limit(self) -> tuple[str, int | None]:
        """The field that bounds the reply's length, and its value (None: not given)."""
        return "max_tokens", self.max_tokens


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(OpenAIRequest):
    PROMPT: ClassVar[str] = "messages"

    messages: list[ChatMessageIn] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0)

    def reply_limit(self) -> tuple[str, int | None]:
        if self.max_completion_tokens is not None:  # OpenAI's newer name wins over max_tokens
            return "max_completion_tokens", self.max_completion_tokens
        return super().reply_limit()


class CompletionRequest(OpenAIRequest):
    prompt: str | list[str]
    logprobs: int | None = Field(None, ge=0)
    echo: bool = False


class EpisodeIn(BaseModel):
    """``POST /v1/episodes``: open an episode."""

    model_config = ConfigDict(extra="forbid")

    game: str | None = Field(None, min_length=1, max_length=200, description="default: the gateway's --game")
    task: dict[str, Any] = Field(default_factory=dict, description="the task: id, question, answer (ground truth)...")
    seats: list[str] | dict[str, str] = Field(
        default_factory=list, description="the seats that will call (any seat may when empty); as a mapping, "
        "seat -> the policy that plays it, as the client names it")
    split: str | None = Field(None, min_length=1, max_length=200, description=f"default: the gateway's ({SPLIT}, "
                              "or eval while a deploy gate runs); train: training data; any other (eval, "
                              "heldout) keeps the episode out of datasets")
    difficulty: str | None = None
    seed: int = 0


class RewardIn(BaseModel):
    """``POST /v1/episodes/{id}/rewards``: a reward on the episode or one of its turns."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    value: float
    name: str = Field("reward", min_length=1, max_length=200)
    seat: str | None = Field(None, description="default: the seat of turn_id; required without turn_id")
    turn_id: str | None = None
    info: dict[str, Any] | None = None


class JudgmentIn(BaseModel):
    """``POST /v1/episodes/{id}/judgments``: a preference between two seats and/or a rubric score."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    judge_seat: str = Field("judge", min_length=1, max_length=200)
    judge_policy: str = Field("external", min_length=1, max_length=200)
    winner_seat: str | None = None
    loser_seat: str | None = None
    preferred_turn_id: str | None = None
    rejected_turn_id: str | None = None
    judge_turn_id: str | None = None
    rationale: str = ""
    rubric: str | None = None
    score: float | None = None
    scored_seat: str | None = None


class EpisodeEndIn(BaseModel):
    """``POST /v1/episodes/{id}/end``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    status: Literal["succeeded", "failed", "timeout"] = "succeeded"
    reward: float | None = Field(None, description="the episode's headline reward")
    outcome: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
