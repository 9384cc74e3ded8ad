"""Answer extraction, ground-truth verification, and the critic/judge output parsers."""

from __future__ import annotations

import threading
import time

import pytest

from graphs.judges.answers import extract_answer
from graphs.judges.boxed import last_boxed
from graphs.judges.ground_truth import is_correct
from graphs.judges.llm_judge import parse_winner
from graphs.judges.verdict import parse_verdict


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Answer: 42", "42"),
        ("answer: -5", "-5"),
        ("**Answer:** $1,000$.", "1000"),
        ("**Answer: 7**", "7"),
        ("Answer: **7**", "7"),
        ("Final Answer: 1,000,000 dollars.", "1000000"),
        ("Answer: 12 apples", "12"),
        ("Answer: $12.50 per hour", "12.50"),
        ("Answer: \\$18.90", "18.90"),
        ("Answer: 3 + 4 = 7", "7"),
        ("Answer: x = 6", "6"),
        ("Answer: 3/4", "3/4"),
        ("Answer: 10%", "10%"),
        ("Answer: \\(  8 \\)", "8"),
        ("Answer: \\boxed{12}", "12"),
        ("Answer: $\\frac{\\sqrt{3}}{2}$", "\\frac{\\sqrt{3}}{2}"),
        ("Answer: (C)", "(C)"),
        ("**Answer:**\n\n42", "42"),
        ("Answer: 12\nlater...\nAnswer: 13", "13"),  # the last answer line counts
        ("The sum is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("Answer: <number>", None),  # the prompt's placeholder echoed back
        ("Answer: I don't know", None),
        ("Answer:", None),
        ("the answer is 5", "5"),  # no answer line: the last number (flexible extract)
        ("So the total is 18 + 9 = 27 pages.", "27"),
        ("It costs $1,200.", "1200"),
        ("", None),
        ("no answer here at all", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_an_unparseable_answer_line_falls_back_to_the_last_box() -> None:
    assert extract_answer("So \\boxed{9}.\nAnswer: see above") == "9"


@pytest.mark.parametrize(
    "garbage",
    [
        "Answer: " + "9" * 20_000,
        "Answer:" * 5_000,
        "\\boxed{" * 5_000,
        "}" * 1_000 + "\\boxed{" + "{" * 1_000,
        "Answer: $$$$$$",
        "Answer: \x00\x01\ufffd",
        "Answer: ١٢٣",
        "A" * 50_000 + "nswer: 1",
    ],
)
def test_extract_answer_survives_garbage_quickly(garbage: str) -> None:
    started = time.perf_counter()
    extract_answer(garbage)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{5}", "5"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{3} and an unclosed \\boxed{4", "3"),
        ("no box", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        ("1,000", "1000"),
        ("1000", "1,000"),
        ("12.0", "12"),
        ("-3", "-3"),
        ("\\$18.90", "18.9"),
        ("0.5", "\\frac{1}{2}"),
        ("\\frac12", "0.5"),
        ("14/3", "\\dfrac{14}{3}"),
        ("(3, -1)", "(3,-1)"),
        ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2"),
        ("2^{100}", "1267650600228229401496703205376"),
        ("x = 6", "6"),
    ],
)
def test_is_correct_accepts_equal_answers(pred: str, gold: str) -> None:
    assert is_correct(pred, gold)


@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        (None, "5"),
        ("", "5"),
        ("4", "5"),
        ("3.0001", "3"),
        ("1/3", "\\frac{1}{2}"),
        ("garbage words", "5"),
        ("}{", "5"),
        ("\\", "5"),
        ("$$", "5"),
        ("1/0", "5"),
        ("9" * 5_000, "5"),
    ],
)
def test_is_correct_rejects_different_or_garbage_answers(pred: str | None, gold: str) -> None:
    assert not is_correct(pred, gold)


@pytest.mark.parametrize("tower", ["9^{9^{9}}", "10^10^10", "\\sqrt{2}^{10^{9}}", "(10^{6})!"])
def test_is_correct_refuses_astronomical_values_instead_of_hanging(tower: str) -> None:
    started = time.perf_counter()
    assert not is_correct(tower, "5")
    assert time.perf_counter() - started < 5.0


def test_is_correct_works_off_the_main_thread() -> None:
    """math-verify's own signal-based timeouts would raise here."""
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.extend([is_correct("\\frac{1}{2}", "0.5"), is_correct("3", "4")]))
    worker.start()
    worker.join(timeout=30)
    assert results == [True, False]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Verdict: correct", True),
        ("The sum is wrong.\nVerdict: incorrect", False),
        ("**Verdict:** Incorrect", False),
        ("verdict: **CORRECT**.", True),
        ("Verdict: `incorrect`", False),
        ("Verdict: incorrect\nOn second thought...\nVerdict: correct", True),
        ("The answer is correct.", True),  # no verdict line: a sentence judging the solution
        ("The proposed solution is incorrect. The correct answer is: 0", False),
        ("The original answer was not correct.", False),
        ("The solution is **right**", True),
        ("The correct answer is: 0.", None),  # says what is right, judges nothing
        ("Verdict: correctly done", None),
        ("", None),
    ],
)
def test_parse_verdict(text: str, expected: bool | None) -> None:
    assert parse_verdict(text) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Winner: A", "a"),
        ("Rationale...\n**Winner:** Debater B", "b"),
        ("winner: debater_a", "a"),
        ("Winner: b.", "b"),
        ("Winner: B\nWinner: A", "a"),
        ("Winner: Alice", None),
        ("Winner: both", None),
        ("A wins", None),
        ("", None),
    ],
)
def test_parse_winner(text: str, expected: str | None) -> None:
    assert parse_winner(text) == expected
