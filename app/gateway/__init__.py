"""`sparring gateway`: an OpenAI-compatible server over sparring's model backends that logs
every call as a turn, so agents sparring did not write can play and be trained (docs/gateway.md).

``app`` builds the FastAPI application; ``openai_api`` serves /v1/models, /v1/chat/completions
and /v1/completions; ``episodes_api`` opens, rewards, judges and ends episodes; ``naming`` maps
a model name to a policy; ``service`` places a call, bounds its reply and generates it;
``book`` keeps the open episodes and turns calls into records, which ``ledger`` writes (and
outlives an outage of the store); ``replies`` writes OpenAI's response bodies; ``guard`` checks
who may call and how much; ``unserved`` refuses the request fields the gateway does not serve;
``errors`` is OpenAI's error format. ``scripts`` runs a user's script against a gateway started in
this process (the deploy gate of an external game), ``rounds`` a retrain round of such a game.
"""

MAX_BODY_BYTES = 4 * 1024 * 1024
"""the largest request body the gateway reads by default (``--max-body-bytes``)"""

MAX_TOKENS = 4096
"""the most tokens one request may ask to generate by default (``--max-tokens``; at most the model's context)"""

SPLIT = "train"
"""the split of an episode opened without one: training data (the dataset builders read split train only)"""
