"""The metric kit games compute their figures with: estimates with intervals and paired
comparisons (``stats``), a run's metrics (``run_metrics``) and per-episode rewards read from the
store (``episode_rewards``). Evaluation, training and the CLI use it too; it knows no game."""
