"""sparring from Python: what the CLI does, as functions that return result objects.

The CLI parses its options, calls these and formats what they return; a notebook or a script
calls them directly::

    from app import api

    engine = api.open_store("sqlite:///sparring.db")
    result = api.play("math-reflection", episodes=8, seats={"critic": "scripted:always-correct"})
    print(result.run_id, result.succeeded, result.summary["pass@turn-1"])

Bad input raises ``api.InputError`` (a ValueError) whose message says what to change; work that
could not run raises ``api.RunError``. Neither prints anything.
"""

from app.api.datasets import BuildProgress, build_dataset
from app.api.deploy import DeployProgress, deploy
from app.api.errors import InputError, RunError, SparringError
from app.api.evaluate import EvaluatedSet, EvaluationProgress, EvaluationReport, evaluate
from app.api.play import PlayProgress, PlayResult, play
from app.api.retrain import RetrainProgress, RetrainResult, retrain
from app.api.store import StaleWork, clean_up_stale_work, open_store, settings
from app.api.train import TrainProgress, TrainResult, train

__all__ = [
    "BuildProgress",
    "DeployProgress",
    "EvaluatedSet",
    "EvaluationProgress",
    "EvaluationReport",
    "InputError",
    "PlayProgress",
    "PlayResult",
    "RetrainProgress",
    "RetrainResult",
    "RunError",
    "SparringError",
    "StaleWork",
    "TrainProgress",
    "TrainResult",
    "build_dataset",
    "clean_up_stale_work",
    "deploy",
    "evaluate",
    "open_store",
    "play",
    "retrain",
    "settings",
    "train",
]
