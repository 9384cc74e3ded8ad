"""The manual's pages that are read from the code, written by mkdocs-gen-files at build time:

- each game's facts (seats, bots, options, metrics, rewards, tasks) from the game registry, put
  where its hand-written page says ``<!-- facts -->`` (games/NAME.md; a game without a page,
  e.g. one of SPARRING_GAMES, gets a page of its facts alone);
- the settings reference, from ``app.settings.Settings``;
- the CLI reference: every command's ``--help`` as it prints at 80 columns;
- the index of ``docs/results/``: every results page there, newest first.
"""

from __future__ import annotations

import re
from pathlib import Path

import mkdocs_gen_files
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import app
from app.commands.game_help import GameFacts, game_facts
from app.settings import OTHER_VARIABLES, PREFIX, Settings
from graphs.registry import game_registry

DOCS = Path(__file__).resolve().parents[1]
FACTS_MARK = "<!-- facts -->"
RESULTS_MARK = "<!-- results -->"
OTHER_VARIABLE_USES = {
    "SPARRING_GAMES": "further game modules, comma-separated (each exports `GAME`)",
    "SPARRING_API_TOKEN": "the token `sparring serve` requires on any address but 127.0.0.1 (16+ characters)",
    "SPARRING_TEST_POSTGRES_URL": "the PostgreSQL server the tests use (without it those tests are skipped)",
    "SPARRING_BENCH_POSTGRES_URL": "the PostgreSQL server the benchmarks use",
}


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def facts_markdown(facts: GameFacts) -> str:
    lines = ["## At a glance", "", "*Generated from the game registry (`graphs/registry.py`).*", "",
             f"> {cell(facts.description)}", "",
             "| seat | kind | default policy | what it does |", "| --- | --- | --- | --- |"]
    lines += [f"| `{s['name']}` | {s['kind']} | `{s['default']}` | {cell(s['description'])} |" for s in facts.seats]
    own = ", ".join(f"`scripted:{bot}`" for bot in facts.bots) or "none of its own"
    builtin = ", ".join(f"`{bot}`" for bot in facts.builtin_bots)
    lines += ["", f"**Bots:** {own}. Any seat also takes the built-in bots ({builtin}) as "
              "`--seat SEAT=scripted:BOT`.", "", "### Options", ""]
    if facts.options:
        lines += ["Options of `sparring play`, `eval`, `retrain` and `deploy` (retrain names debate's "
                  "rounds `--game-rounds`):", "", "| option | type | default | meaning |", "| --- | --- | --- | --- |"]
        lines += [f"| `{o.flag}` | {o.kind} | `{o.default}` | {cell(o.help)} |" for o in facts.options]
    else:
        lines.append("None.")
    gates = "; ".join(f"`{seat}` on `{metric}`" for seat, metric in facts.learners.items())
    reported = ", ".join(f"`{m}`" for m in facts.metrics) or "every metric the game computes"
    lines += ["", "### Metrics and rewards", "", f"The deploy gate judges {gates}. `sparring retrain` reports "
              f"{reported}.", "", "| reward | meaning |", "| --- | --- |"]
    lines += [f"| `{name}` | {cell(text)} |" for name, text in facts.rewards.items()]
    accepted = cell(facts.tasks_accepted)
    lines += ["", "### Tasks", "", f"`--tasks {facts.tasks_default}` by default; it accepts {accepted}."]
    return "\n".join(lines) + "\n"


def game_pages() -> None:
    for name, game in game_registry().items():
        facts = facts_markdown(game_facts(game))
        page = DOCS / "games" / f"{name}.md"
        if page.is_file():
            text = page.read_text(encoding="utf-8")
            if FACTS_MARK not in text:
                raise ValueError(f"{page} has no {FACTS_MARK} line: put it where the game's facts go")
            text = text.replace(FACTS_MARK, facts)
        else:
            text = f"# {name}\n\n{game.description}\n\n{facts}"
        with mkdocs_gen_files.open(f"games/{name}.md", "w") as out:
            out.write(text)


def settings_page() -> None:
    home = str(Path.home())
    lines = ["# Settings", "", "*Generated from `app/settings.py`.*", "",
             "Every setting is an environment variable or a line of a `.env` file in the working directory; "
             "`sparring settings` prints the effective values and where each came from (keys masked).", "",
             "| variable | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory is not None else field.default
        kind = getattr(field.annotation, "__name__", None) or str(field.annotation).replace("typing.", "")
        shown = "none" if default is None else str(default).replace(home, "~")
        lines.append(f"| `{PREFIX}{name.upper()}` | {cell(kind)} | `{cell(shown)}` | {cell(field.description)} |")
    lines += ["", "Read elsewhere than the settings class:", "", "| variable | meaning |", "| --- | --- |"]
    lines += [f"| `{name}` | {OTHER_VARIABLE_USES.get(name, '')} |" for name in sorted(OTHER_VARIABLES)]
    with mkdocs_gen_files.open("settings.md", "w") as out:
        out.write("\n".join(lines) + "\n")


def _commands(command, path=()):
    yield path, command
    for name, child in getattr(command, "commands", {}).items():
        yield from _commands(child, (*path, name))


def cli_page() -> None:
    runner = CliRunner()
    lines = ["# CLI reference", "", "*Generated from the typer app (`app/cli.py`): each command's `--help` as it "
             "prints at 80 columns.*", ""]
    for path, _ in _commands(get_command(app)):
        result = runner.invoke(app, [*path, "--help"], prog_name="sparring", env={"COLUMNS": "80"})
        if result.exit_code != 0:
            raise RuntimeError(f"sparring {' '.join(path)} --help failed: {result.output}")
        lines += [f"## sparring {' '.join(path)}".rstrip(), "", "```text", result.output.rstrip(), "```", ""]
    with mkdocs_gen_files.open("cli.md", "w") as out:
        out.write("\n".join(lines))


def results_index() -> None:
    """The results pages in docs/results/, newest first, where its index.md says ``<!-- results -->``."""
    index = DOCS / "results" / "index.md"
    lines = ["| date | results |", "| --- | --- |"]
    for page in sorted((DOCS / "results").glob("*.md"), reverse=True):
        if page == index:
            continue
        title = next((line[2:] for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("# ")),
                     page.stem)
        date = re.match(r"\d{4}-\d\d-\d\d", page.name)
        lines.append(f"| {date.group(0) if date else ''} | [{cell(title)}]({page.name}) |")
    with mkdocs_gen_files.open("results/index.md", "w") as out:
        out.write(index.read_text(encoding="utf-8").replace(RESULTS_MARK, "\n".join(lines)))


game_pages()
settings_page()
cli_page()
results_index()
