"""Written arithmetic checked exactly (graphs.judges.arithmetic): the wrong steps, the checker's
notes and the corrected solution, on model-like text."""

from __future__ import annotations

import pytest

from graphs.judges.arithmetic import MAX_CORRECTIONS, checker_notes, corrected, evaluate, wrong_steps


def test_a_wrong_result_is_corrected_where_it_is_stated_and_wherever_it_is_used_later() -> None:
    """The later step that used the wrong 108 is recomputed in turn, and so is the answer line."""
    answer = "He buys 13 x 8 = 108 apples. Then 108 + 20 = 128 apples.\nAnswer: 128"
    assert wrong_steps(answer) == [("13 x 8 = 108", "104")]
    assert checker_notes(answer) == "13 x 8 = 108 is wrong: it is 104."
    assert corrected(answer) == "He buys 13 x 8 = 104 apples. Then 104 + 20 = 124 apples.\nAnswer: 124"


def test_dollars_and_thousands_separators_are_read_and_replaced() -> None:
    answer = "She has $1,200 + $300 = $1,400. Half is $1,400 / 2 = $700.\nAnswer: $700"
    assert corrected(answer) == "She has $1,200 + $300 = $1500. Half is $1500 / 2 = $750.\nAnswer: $750"


def test_numbers_before_the_wrong_step_and_other_numbers_stay() -> None:
    """Only mentions after the wrong result change: the 14 of the question's restatement stays."""
    answer = "Tom has 14 pens. 6 + 8 = 14 is right, but 14 - 5 = 8, so 8 pens and 140 clips.\nAnswer: 8"
    assert corrected(answer) == "Tom has 14 pens. 6 + 8 = 14 is right, but 14 - 5 = 9, so 9 pens and 140 clips.\nAnswer: 9"


@pytest.mark.parametrize("answer", ["6 x 9 = 54, 54 + 21 = 75.\nAnswer: 75", "Answer: 75", ""])
def test_nothing_to_correct_is_none(answer: str) -> None:
    assert corrected(answer) is None and checker_notes(answer) is None


def test_it_gives_up_on_a_result_it_cannot_replace_and_on_too_many_wrong_steps() -> None:
    assert corrected("3 - 5 = -1 so the answer is -1.") is None  # a negative result is not replaced
    many = " ".join(f"{i} + 1 = {i}." for i in range(1, MAX_CORRECTIONS + 3))
    assert len(wrong_steps(many)) == MAX_CORRECTIONS + 2 and corrected(many) is None


def test_the_notes_name_the_first_three_wrong_steps() -> None:
    notes = checker_notes("1 + 1 = 3, 2 + 2 = 5, 3 + 3 = 7, 4 + 4 = 9")
    assert notes == "1 + 1 = 3 is wrong: it is 2. 2 + 2 = 5 is wrong: it is 4. 3 + 3 = 7 is wrong: it is 6."


@pytest.mark.parametrize("expression", ["__import__('os').system('true')", "2 ** 10", "1 / 0", "(1 +"])
def test_evaluate_reads_plain_arithmetic_only(expression: str) -> None:
    assert evaluate(expression) is None
    assert evaluate("12 * (3 + 4) - 6 / 4") == 82.5
