"""Play episodes of your own two-agent game through `sparring gateway` with the plain `openai` client.

Start the gateway first (`sparring gateway`), then run `python examples/gateway_client.py`
(`--episodes 32` to collect a dataset, `--solver solver` once a solver adapter is deployed). A
solver answers, a reviewer checks the answer, the script scores the solver's turn against the
ground truth and ends the episode; `sparring episodes list --game external` shows it, turn by
turn, with the token ids a dataset builder trains on. Model names: `base`, `ROLE` (the role's
active adapter) or `ROLE@vN`; `curl -s http://127.0.0.1:8766/v1/models` lists them.
`examples/gateway_train.sh` runs the whole loop: play, build, train, deploy, play again.
"""

from __future__ import annotations

import argparse
import os

from openai import OpenAI

BASE_URL = os.environ.get("SPARRING_GATEWAY_URL", "http://127.0.0.1:8766/v1")
QUESTIONS = [("What is 17 + 25?", "42"), ("What is 9 + 14?", "23"), ("What is 30 + 6?", "36")]
"""few questions, each asked again and again: its answers are siblings, which DPO pairs by reward"""

client = OpenAI(base_url=BASE_URL, api_key=os.environ.get("SPARRING_API_TOKEN", "none"))


def play(question: str, truth: str, solver: str) -> None:
    """One episode: the solver (model ``solver``) answers, the reviewer (the base model) checks."""
    episode = client.post("/episodes", cast_to=object,
                          body={"task": {"id": question, "question": question, "answer": truth},
                                "seats": ["solver", "reviewer"]})["id"]

    def say(seat: str, model: str, prompt: str):  # noqa: ANN202 (the openai ChatCompletion)
        """One call of ``seat``: a turn of the episode, logged by the gateway."""
        return client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], max_tokens=64, temperature=0.7,
            logprobs=True, extra_headers={"X-Sparring-Episode": episode, "X-Sparring-Seat": seat})

    answer = say("solver", solver, f"{question} Answer with the number only.")
    answer_text = answer.choices[0].message.content or ""
    review = say("reviewer", "base", f"Question: {question}\nAnswer: {answer_text}\nIs the answer correct? yes or no.")
    correct = truth in answer_text
    client.post(f"/episodes/{episode}/rewards", cast_to=object,
                body={"turn_id": answer.model_extra["sparring"]["turn_id"], "name": "correct", "value": float(correct)})
    client.post(f"/episodes/{episode}/end", cast_to=object, body={"reward": float(correct)})
    tokens = len(answer.choices[0].model_extra["token_ids"])
    print(f"episode {episode}: solver ({answer.model_extra['sparring']['served_by']}) said {answer_text!r} "
          f"({tokens} tokens logged), reviewer said {review.choices[0].message.content!r}, reward {float(correct)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1, help="episodes to play, cycling through the questions")
    parser.add_argument("--solver", default="base", help="the solver's model name: base, solver, solver@v2...")
    args = parser.parse_args()
    for i in range(args.episodes):
        play(*QUESTIONS[i % len(QUESTIONS)], args.solver)
