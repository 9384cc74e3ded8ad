"""Constrained choice scoring (graphs/policies/choice.py) on a tiny random Llama, checked against
plain, unbatched forward passes."""

from __future__ import annotations

import pytest
import torch
from tiny_model import tiny_model, tiny_tokenizer
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from graphs.policies.base import Choice, GenerationResult, SamplingParams
from graphs.policies.choice import chat_prompt_ids, choose, option_token_ids

MESSAGES = [{"role": "user", "content": "Is 3 + 4 = 7? Check it."}]
VERDICT = Choice((" correct", " incorrect"), prefix="The sum is right.\nVerdict:")
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    return tiny_model(tokenizer)


def plain_logprobs(model: LlamaForCausalLM, prompt: list[int], completion: list[int]) -> list[float]:
    """Each completion token's logprob from one unpadded forward pass over prompt + completion."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [logprobs[len(prompt) + j - 1, token].item() for j, token in enumerate(completion)]


def run(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, choice: Choice, sampling: SamplingParams
) -> GenerationResult:
    with torch.inference_mode():
        return choose(model, tokenizer, MESSAGES, choice, sampling, served_by="tiny")


@pytest.mark.parametrize(
    "choice",
    [VERDICT, Choice(("A", "B", "C")), Choice((" yes", " yes please", " no"), prefix="Answer:")],
    ids=["verdict", "letters", "an-option-begins-another"],
)
def test_greedy_choice_is_the_argmax_of_plain_forward_scores(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, choice: Choice
) -> None:
    prompt = chat_prompt_ids(tokenizer, MESSAGES)
    completions = option_token_ids(tokenizer, choice)
    plain = [plain_logprobs(model, prompt, c) for c in completions]
    shared = 0
    while all(len(c) > shared + 1 for c in completions) and len({c[shared] for c in completions}) == 1:
        shared += 1
    scores = [sum(p[shared:]) for p in plain]
    best = max(range(len(scores)), key=scores.__getitem__)
    assert sorted(scores)[-1] - sorted(scores)[-2] > 1e-3  # a clear winner, far above round-off

    result = run(model, tokenizer, choice, GREEDY)

    assert result.chosen == choice.options[best]
    assert result.text == choice.prefix + choice.options[best]
    assert result.prompt_token_ids == prompt
    assert result.completion_token_ids == completions[best]
    assert result.logprobs == pytest.approx(plain[best], abs=1e-4)
    assert (result.finish_reason, result.served_by) == ("stop", "tiny")


def test_the_prefix_and_option_are_tokenized_together(tokenizer: PreTrainedTokenizerBase) -> None:
    ids = option_token_ids(tokenizer, VERDICT)
    assert [tokenizer.decode(i) for i in ids] == [VERDICT.prefix + o for o in VERDICT.options]
    assert ids[0][-1] == tokenizer(" correct", add_special_tokens=False)["input_ids"][-1]


def test_sampled_choices_are_options_reproducible_by_seed_and_follow_the_scores(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase
) -> None:
    choice = Choice(("A", "B", "C"))
    greedy = run(model, tokenizer, choice, GREEDY).chosen
    hot = [run(model, tokenizer, choice, SamplingParams(temperature=5.0, seed=s)).chosen for s in range(40)]
    cold = [run(model, tokenizer, choice, SamplingParams(temperature=0.01, seed=s)).chosen for s in range(10)]
    again = [run(model, tokenizer, choice, SamplingParams(temperature=5.0, seed=s)).chosen for s in range(40)]
    assert set(hot) <= set(choice.options)
    assert len(set(hot)) > 1  # a flat distribution draws more than one option
    assert cold == [greedy] * 10  # a nearly greedy temperature keeps the best option
    assert hot == again


def test_choice_options_are_validated() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        Choice(())
    with pytest.raises(ValueError, match="non-empty"):
        Choice(("yes", ""))
    with pytest.raises(ValueError, match="distinct"):
        Choice(("yes", "yes"))


def test_last_positions_keep_the_same_logits_as_the_int(tmp_path) -> None:
    """The backend asks for the last positions' logits as positions (a contiguous gather, which a
    frozen bfloat16 lm_head multiplies fast), not as the int (a strided slice): same logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from graphs.policies.logits_to_keep import last_positions
    from tiny_model import save_tiny_model

    model = AutoModelForCausalLM.from_pretrained(save_tiny_model(tmp_path / "tiny")).eval()
    ids = torch.randint(0, model.config.vocab_size, (3, 7))
    assert last_positions(7, 2, torch.device("cpu")).tolist() == [5, 6]
    with torch.no_grad():
        for count in (1, 3):
            by_int = model(input_ids=ids, logits_to_keep=count).logits
            by_positions = model(input_ids=ids, logits_to_keep=last_positions(7, count, ids.device)).logits
            assert by_positions.shape == by_int.shape == (3, count, model.config.vocab_size)
            torch.testing.assert_close(by_positions, by_int)
