"""A user's script played against a gateway started in this process: how the deploy gate of an
external game evaluates a version, and how `sparring retrain` practises one (docs/gateway.md).

The gateway is the one `sparring gateway` serves, on a free loopback port, logging under a run of
its own (``config.purpose`` says what for) whose episodes are opened in ``split`` unless the script
names another. The script is a command line (split into words as a shell would, run without one),
run once to its end, with these in its environment:

- ``SPARRING_GATEWAY_URL``: the gateway's OpenAI base URL (``http://127.0.0.1:PORT/v1``);
- ``SPARRING_GATEWAY_MODEL``: the model name the role's seat calls (``ROLE@vN``, ``ROLE`` or ``base``);
- ``SPARRING_GATEWAY_ROLE``: that role, the seat the model plays (``X-Sparring-Seat``);
- ``SPARRING_GATEWAY_SPLIT``: the split its episodes are opened in (``eval`` in a gate).

A script that exits with another status than 0, or that logs no episode, is a ScriptError that
says so (with the end of what it wrote to stderr); its run is then marked failed.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine

from app.gateway import MAX_TOKENS
from app.gateway.app import create_app, gateway_session
from app.gateway.naming import BASE
from app.wiring import PolicyFactory
from storage.gateway_rows import run_episode_count
from training.deploy import GateResult
from training.external_gate import EVAL_SPLIT, HEADLINE, gate_runs
from training.registry import AdapterRecord, active_version

URL, MODEL = "SPARRING_GATEWAY_URL", "SPARRING_GATEWAY_MODEL"
ROLE, SPLIT = "SPARRING_GATEWAY_ROLE", "SPARRING_GATEWAY_SPLIT"
STDERR_LINES = 12
"""how many of a failed script's last stderr lines its error shows"""
START_WITHIN_S = 60


class ScriptError(RuntimeError):
    pass


@dataclass(frozen=True)
class ScriptRun:
    run_id: str
    episodes: int


def run_script(engine: Engine, factory: PolicyFactory, command: str, *, game: str, role: str, model: str,
               split: str, purpose: str) -> ScriptRun:
    """Run ``command`` once against a gateway logging episodes of ``game`` under a new run."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ScriptError(f"cannot read the script's command line {command!r}: {exc}") from exc
    if not argv:
        raise ScriptError("the script's command line is empty: give the command that runs it, e.g. "
                          "'python my_agent.py'")
    config = {"purpose": purpose, "script": command, "model": model}
    with gateway_session(engine, factory, game=game, max_tokens=MAX_TOKENS, config=config, split=split) as gateway:
        run_id = gateway.book.run_id
        with serving(create_app(gateway)) as base_url:
            env = {**os.environ, URL: base_url, MODEL: model, ROLE: role, SPLIT: split}
            try:
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            except OSError as exc:
                raise ScriptError(f"{purpose}: cannot run {command!r}: {exc}") from exc
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-STDERR_LINES:]) or "(nothing on stderr)"
            raise ScriptError(f"{purpose}: {command!r} exited with status {done.returncode} (run {run_id}); "
                              f"the end of its stderr: {tail}")
    episodes = run_episode_count(engine, run_id)
    if not episodes:
        raise ScriptError(f"{purpose}: {command!r} logged no episode (run {run_id}): it must call the gateway at "
                          f"${URL} (opening episodes with POST /v1/episodes)")
    return ScriptRun(run_id, episodes)


def gate_with_script(engine: Engine, factory: PolicyFactory, candidate: AdapterRecord, command: str, *,
                     game: str, metric: str = HEADLINE, margin: float = 0.0,
                     say: Callable[[str], None] = lambda message: None) -> GateResult:
    """``training.external_gate.gate_runs`` on two runs of the evaluation script ``command``: the
    role's seat played by the candidate (``ROLE@vN``), then by the active version (or ``base``)."""
    active = active_version(engine, candidate.role)
    runs = []
    for model in (candidate.name, active.name if active else BASE):
        say(f"evaluating {model}: {command}")
        runs.append(run_script(engine, factory, command, game=game, role=candidate.role, model=model,
                               split=EVAL_SPLIT, purpose=f"gate {candidate.name}: evaluate {model}"))
    return gate_runs(engine, candidate, runs[0].run_id, runs[1].run_id, game=game,
                     base_model=factory.model_backend().model_name, metric=metric, margin=margin)


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on a free loopback port in a thread until the block ends; yields its /v1 URL.
    The app's lifespan is off: the backends it serves belong to the caller, who closes them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_WITHIN_S
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        if not server.started:
            raise ScriptError(f"the gateway for the script did not start within {START_WITHIN_S} s")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join()
        listener.close()
