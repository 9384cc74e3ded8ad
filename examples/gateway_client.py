"""Play one episode of your own two-agent game through `sparring gateway` with the plain `openai` client.

Start the gateway first (`sparring gateway`), then run `python examples/gateway_client.py`. A
solver answers, a reviewer checks the answer, the script scores the solver's turn against the
ground truth and ends the episode; `sparring episodes list --game external` shows it, turn by
turn, with the token ids a dataset builder trains on. Model names: `base`, `ROLE` (the role's
active adapter) or `ROLE@vN`; `curl -s http://127.0.0.1:8766/v1/models` lists them.
"""

from __future__ import annotations

import os

from openai import OpenAI

BASE_URL = os.environ.get("SPARRING_GATEWAY_URL", "http://127.0.0.1:8766/v1")
client = OpenAI(base_url=BASE_URL, api_key=os.environ.get("SPARRING_API_TOKEN", "none"))

question, truth = "What is 17 + 25?", "42"
episode = client.post("/episodes", cast_to=object,
                      body={"task": {"id": "sum-17-25", "question": question, "answer": truth},
                            "seats": ["solver", "reviewer"]})["id"]


def say(seat: str, model: str, prompt: str):  # noqa: ANN201 (the openai ChatCompletion)
    """One call of ``seat``: a turn of the episode, logged by the gateway."""
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=64, temperature=0.7, logprobs=True,
        extra_headers={"X-Sparring-Episode": episode, "X-Sparring-Seat": seat})


answer = say("solver", "base", f"{question} Answer with the number only.")
answer_text = answer.choices[0].message.content or ""
review = say("reviewer", "base", f"Question: {question}\nAnswer: {answer_text}\nIs the answer correct? yes or no.")
correct = truth in answer_text
client.post(f"/episodes/{episode}/rewards", cast_to=object,
            body={"turn_id": answer.model_extra["sparring"]["turn_id"], "name": "correct", "value": float(correct)})
client.post(f"/episodes/{episode}/end", cast_to=object, body={"reward": float(correct)})
tokens = len(answer.choices[0].model_extra["token_ids"])
print(f"episode {episode}: solver said {answer_text!r} ({tokens} tokens logged), "
      f"reviewer said {review.choices[0].message.content!r}, reward {float(correct)}")
