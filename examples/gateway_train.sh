#!/usr/bin/env bash
# Train an agent sparring did not write (docs/gateway.md, "Training what played through the gateway"):
# play through the gateway, build, train, deploy, play again. The agent is examples/gateway_client.py,
# plain `openai` code; every step here is one sparring command.
#
#   bash examples/gateway_train.sh              # the bundled model, the store of your settings
#   PORT=9000 EPISODES=64 bash examples/gateway_train.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-8766}
EPISODES=${EPISODES:-32}
export SPARRING_GATEWAY_URL="http://127.0.0.1:$PORT/v1"
field() { python -c "import json, sys; print(json.load(sys.stdin)[0]['$1'])"; }

# 1. serve: every call is a logged turn of an episode of the game "external"
sparring gateway --port "$PORT" &
gateway=$!
trap 'kill $gateway' EXIT
until curl -sf "$SPARRING_GATEWAY_URL/models" > /dev/null; do sleep 1; done

# 2. play: the solver is the base model; its answers are rewarded against the ground truth
python examples/gateway_client.py --episodes "$EPISODES"
sparring episodes list --game external --seat solver --limit 5

# 3. build and train: SFT on the solver's right answers (DPO: `datasets build dpo`, answers to one
#    question ranked by reward; PPO rows carry the logged token ids and logprobs)
snapshot=$(sparring datasets build sft --game external --role solver --format json | field snapshot)
version=$(sparring train sft --role solver --dataset "$snapshot" --format json | field adapter)

# 4. deploy: the gateway's model "solver" is that version from the next request on (no restart)
sparring adapters promote "$version"

# 5. play again: the solver's turns are served by the new version (served_by in each turn)
python examples/gateway_client.py --episodes 6 --solver solver
sparring episodes list --game external --policy "$version"
