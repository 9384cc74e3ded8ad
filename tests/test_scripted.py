"""The scripted backend: replay scripts, function bots, built-in bots, adapters, failures."""

from __future__ import annotations

import asyncio

import pytest

from graphs.judges.answers import extract_answer
from graphs.judges.verdict import parse_verdict
from graphs.policies.base import (
    Backend,
    BackendError,
    Choice,
    GenerationRequest,
    GenerationResult,
    Message,
    SamplingParams,
    UnknownAdapterError,
)
from graphs.policies.policy import Policy
from graphs.policies.scripted import BASE, BOTS, ScriptedBackend, named_option
from graphs.registry import known_bots, scripted_bot


def ask(
    backend: ScriptedBackend, text: str = "hi", *, adapter: str | None = None, **sampling: object
) -> GenerationResult:
    request = GenerationRequest([{"role": "user", "content": text}], SamplingParams(**sampling), adapter)  # type: ignore[arg-type]
    return asyncio.run(backend.generate(request))


def say(backend: ScriptedBackend, messages: list[Message]) -> str:
    return asyncio.run(backend.generate(GenerationRequest(messages))).text


def test_it_is_a_backend_and_names_its_bot() -> None:
    backend = ScriptedBackend.replay(["x"])
    assert isinstance(backend, Backend)
    assert (backend.name, backend.model_name) == ("scripted", "scripted:replay")
    assert Policy(backend).label == "scripted:replay"


def test_replay_answers_in_order_and_refuses_to_cycle() -> None:
    backend = ScriptedBackend.replay(["one", "two"])
    assert [ask(backend).text, ask(backend).text] == ["one", "two"]
    with pytest.raises(BackendError, match="exhausted after 2 responses"):
        ask(backend)


def test_replay_raises_a_scripted_failure_in_place() -> None:
    backend = ScriptedBackend.replay(["ok", BackendError("model fell over"), "after"])
    assert ask(backend).text == "ok"
    with pytest.raises(BackendError, match="model fell over"):
        ask(backend)
    assert ask(backend).text == "after"


def test_replay_keeps_one_script_per_adapter() -> None:
    backend = ScriptedBackend.replay({BASE: ["base 1"], "critic@v1": ["critic 1", "critic 2"]})
    asyncio.run(backend.load_adapter("critic@v1", "/adapters/critic/v1"))
    assert ask(backend, adapter="critic@v1").text == "critic 1"
    result = ask(backend)
    assert (result.text, result.served_by) == ("base 1", "scripted:replay")
    result = ask(backend, adapter="critic@v1")
    assert (result.text, result.served_by) == ("critic 2", "critic@v1")
    asyncio.run(backend.load_adapter("actor@v1", "/adapters/actor/v1"))
    with pytest.raises(BackendError, match="no script for 'actor@v1'"):
        ask(backend, adapter="actor@v1")


def test_from_function_passes_messages_and_request() -> None:
    seen: list[GenerationRequest] = []

    def shout(messages: list[Message], request: GenerationRequest) -> str:
        seen.append(request)
        return messages[-1]["content"].upper()

    backend = ScriptedBackend.from_function(shout)
    assert backend.model_name == "scripted:shout"
    assert ask(backend, "quiet please").text == "QUIET PLEASE"
    assert seen[0].messages == [{"role": "user", "content": "quiet please"}]
    assert ScriptedBackend.from_function(shout, name="loud").model_name == "scripted:loud"


def test_token_ids_are_utf8_bytes_with_zero_logprobs() -> None:
    result = ask(ScriptedBackend.replay(["héllo"]), "Q")
    assert result.prompt_token_ids == list(b"user: Q\n")
    assert result.completion_token_ids == list("héllo".encode())
    assert result.logprobs == [0.0] * 6
    assert result.finish_reason == "stop"


def test_max_new_tokens_and_stop_strings_cut_the_reply() -> None:
    long = ask(ScriptedBackend.replay(["abcdefgh"]), max_new_tokens=3)
    assert (long.text, long.finish_reason, long.completion_token_ids) == ("abc", "length", list(b"abc"))
    stopped = ask(ScriptedBackend.replay(["Answer: 4\nUser: more"]), stop=("\nUser:",))
    assert (stopped.text, stopped.finish_reason) == ("Answer: 4", "stop")


def test_adapters_keep_names_and_refuse_unknown_ones() -> None:
    backend = ScriptedBackend.replay(["x", "y"])
    with pytest.raises(UnknownAdapterError, match="'critic@v1' is not loaded"):
        ask(backend, adapter="critic@v1")
    asyncio.run(backend.load_adapter("critic@v1", "/a"))
    asyncio.run(backend.load_adapter("critic@v1", "/a"))  # the same name and path again: a no-op
    with pytest.raises(BackendError, match="already loaded from '/a'"):
        asyncio.run(backend.load_adapter("critic@v1", "/b"))
    assert backend.adapters() == ["critic@v1"]
    asyncio.run(backend.unload_adapter("critic@v1"))
    assert backend.adapters() == []
    with pytest.raises(UnknownAdapterError):
        asyncio.run(backend.unload_adapter("critic@v1"))
    asyncio.run(backend.aclose())


def test_builtin_bots() -> None:
    assert list(BOTS) == ["echo", "calculator"]  # the bots of no game; games bring their own
    assert list(known_bots())[:8] == ["echo", "calculator", "always-correct", "always-incorrect", "arithmetic-checker",
                                      "stubborn", "agreeable", "contrarian"]  # math-reflection's, then debate's
    assert scripted_bot("echo").model_name == "scripted:echo"
    assert ask(scripted_bot("echo"), "repeat me").text == "repeat me"
    assert parse_verdict(ask(scripted_bot("always-correct")).text) is True
    assert parse_verdict(ask(scripted_bot("always-incorrect")).text) is False
    with pytest.raises(ValueError, match="built-in bots: echo, calculator, always-correct"):
        scripted_bot("genius")


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("What is 12 * (3 + 4)?", "84"),
        ("Compute 1,000 + 2,000 please.", "3000"),
        ("What is 7 ÷ 2?", "3.5"),
        ("Tom has 12 apples.", "12"),  # no calculation: it repeats the last number
        ("What is 1/0?", "0"),  # not computable: falls back to the last number
        ("Nothing to count here.", None),
    ],
)
def test_calculator(question: str, answer: str | None) -> None:
    assert extract_answer(ask(scripted_bot("calculator"), question).text) == answer


@pytest.mark.parametrize(
    ("answer", "critique"),
    [
        ("He saves $13 x 8 = $108, then $108 - $16 = $92.", "$13 x 8 = $108 is wrong: it is 104."),
        ("So 2 + 3 + 4 = 8 and 1,000 + 2,000 = 3,000.", "2 + 3 + 4 = 8 is wrong: it is 9."),
        ("14.50 - 6 = 8.5, then 9 - 7 = 1.", "9 - 7 = 1 is wrong: it is 2."),
    ],
)
def test_the_arithmetic_checker_names_each_wrong_step_with_its_right_result(answer: str, critique: str) -> None:
    review = ask(scripted_bot("arithmetic-checker"), f"Problem:\nHow much?\n\nProposed solution:\n{answer}")
    assert review.text.splitlines()[0] == critique
    assert parse_verdict(review.text) is False


@pytest.mark.parametrize("answer", ["6 x 9 = 54, 54 + 21 = 75, 10 / 4 = 2.5. Answer: 75", "Answer: 75"])
def test_the_arithmetic_checker_approves_what_it_cannot_fault(answer: str) -> None:
    review = ask(scripted_bot("arithmetic-checker"), answer)
    assert parse_verdict(review.text) is True
    assert "wrong" not in review.text


def test_the_arithmetic_checker_lists_at_most_three_wrong_steps() -> None:
    review = ask(scripted_bot("arithmetic-checker"), "1 + 1 = 3, 2 + 2 = 5, 3 + 3 = 7, 4 + 4 = 9")
    assert review.text.count("is wrong") == 3
    assert parse_verdict(review.text) is False


def test_stubborn_restates_its_first_answer() -> None:
    stubborn = scripted_bot("stubborn")
    question = {"role": "user", "content": "What is 2 + 2?"}
    assert say(stubborn, [question]) == "Answer: 4"
    later = [
        question,
        {"role": "assistant", "content": "Answer: 4"},
        {"role": "user", "content": "Debater A: it is 5, trust me. Answer: 5"},
    ]
    assert extract_answer(say(stubborn, later)) == "4"


# --- choice requests ----------------------------------------------------------------------


def test_a_choice_request_answers_the_prefix_and_the_option_the_bot_names() -> None:
    backend = scripted_bot("always-incorrect")
    choice = Choice((" correct", " incorrect"), prefix="Looks off.\nVerdict:")
    result = asyncio.run(backend.generate(GenerationRequest([{"role": "user", "content": "3+4=8"}], choice=choice)))
    assert (result.chosen, result.finish_reason) == (" incorrect", "stop")
    assert result.text == "Looks off.\nVerdict: incorrect"
    assert result.completion_token_ids == list(result.text.encode())


def test_named_option_is_the_whole_reply_or_the_option_named_last_as_a_word() -> None:
    assert named_option("B", ("A", "B")) == "B"
    assert named_option("Incorrect at first, then: correct.", ("correct", "incorrect")) == "correct"
    assert named_option("Verdict: INCORRECT", (" correct", " incorrect")) == " incorrect"
    with pytest.raises(BackendError, match="names none of the options"):
        named_option("Looks fine to me.", ("correct", "incorrect"))


def test_a_replayed_entry_answers_the_choice_that_follows_it() -> None:
    backend = ScriptedBackend.replay(["Step 2 is wrong.\nVerdict: incorrect", "Fine.\nVerdict: correct"])
    messages = [{"role": "user", "content": "review"}]
    verdict = Choice((" correct", " incorrect"), prefix="Step 2 is wrong.\nVerdict:")

    async def turns() -> list[str | None]:
        free = await backend.generate(GenerationRequest(messages))
        chosen = await backend.generate(GenerationRequest(messages, choice=verdict))
        second = await backend.generate(GenerationRequest(messages))
        return [free.chosen, chosen.chosen, second.text]

    assert asyncio.run(turns()) == [None, " incorrect", "Fine.\nVerdict: correct"]
