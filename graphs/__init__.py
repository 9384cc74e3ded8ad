"""Games as LangGraph state graphs, seats, policies (model backends), tasks and judges."""
