"""Ratings from logged judgments: the fit itself, the games read from real stores (debates of
scripted bots played through the runner), and `sparring ratings` / `sparring report`."""

from __future__ import annotations

import asyncio
import json
import math
import random

import pytest
from factories import episode_start
from typer.testing import CliRunner

from app.cli import app
from evaluation.ratings import ELO, RatedGame, fit_ratings, ladders, player_name, read_games
from graphs.episodes import play
from graphs.policies.policy import Policy
from graphs.registry import get_game, scripted_bot
from graphs.tasks.base import Task
from storage.engine import open_store
from storage.recorder import Recorder
from storage.records import EpisodeEnd, EpisodeStatus, JudgmentRecord

DEBATE = get_game("debate")
SUMS = [Task(id=f"sum-{a}", question=f"What is {a} + 7?", answer=str(a + 7), source="test") for a in range(1, 7)]
runner = CliRunner()


def games(first: str, second: str, wins: int, losses: int, ties: int = 0) -> list[RatedGame]:
    played = [(first, second, False)] * wins + [(second, first, False)] * losses + [(first, second, True)] * ties
    return [RatedGame(f"{first}-{second}-{i}", "debate", a, b, tie) for i, (a, b, tie) in enumerate(played)]


def debates(engine, a: str, b: str, tasks: list[Task] = SUMS, rounds: int = 2) -> None:
    """Debates of two scripted bots (A, B), logged into ``engine`` (judged by rules)."""
    policies = {"debater_a": Policy(scripted_bot(a)), "debater_b": Policy(scripted_bot(b))}
    with Recorder(engine) as recorder:
        asyncio.run(play(DEBATE, tasks, policies, recorder, concurrency=3, seed=0,
                         options=DEBATE.make_options({"rounds": rounds})))


# --- the fit -------------------------------------------------------------------------------


def test_player_names_an_adapter_version_by_its_name():
    assert player_name("bundled+debater_a@v12") == "debater_a@v12"
    assert player_name("/models/smol+critic@v3") == "critic@v3"
    assert player_name("scripted:stubborn") == "scripted:stubborn"
    assert player_name("bundled") == "bundled"


def test_many_games_fit_the_elo_difference_of_the_win_rate():
    fitted = fit_ratings(games("A", "B", wins=750, losses=250))
    difference = fitted["A"][0] - fitted["B"][0]
    assert difference == pytest.approx(400 * math.log10(3), abs=2)  # 3:1 odds; the virtual games barely matter
    assert (fitted["A"][0] + fitted["B"][0]) / 2 == pytest.approx(1500)


def test_ties_count_half_and_equal_records_rate_equal():
    fitted = fit_ratings(games("A", "B", wins=10, losses=10) + games("B", "C", wins=0, losses=0, ties=20))
    assert fitted["A"][0] == pytest.approx(fitted["B"][0], abs=1e-6)
    assert fitted["B"][0] == pytest.approx(fitted["C"][0], abs=1e-6)


def test_an_unbeaten_player_is_finite_and_its_interval_is_wide_when_it_played_little():
    few = fit_ratings(games("A", "B", wins=3, losses=0))
    many = fit_ratings(games("A", "B", wins=300, losses=100))
    rating, low, high = few["A"]
    assert math.isfinite(rating) and low < rating < high and rating > 1500
    assert high - low > 150  # three games say little
    assert many["A"][2] - many["A"][1] < (high - low) / 3


def test_the_interval_is_the_curvature_of_the_fit():
    """Two players: the rating difference d has variance 1/(n p (1-p)) in log-odds (plus the
    virtual games); each rating, half of it about the average, has a quarter of that variance."""
    fitted = fit_ratings(games("A", "B", wins=600, losses=400))
    d = (fitted["A"][0] - fitted["B"][0]) / ELO
    p = 1 / (1 + math.exp(-d))
    half_width = (fitted["A"][2] - fitted["A"][1]) / 2
    expected = 1.959963984540054 * ELO * math.sqrt(1 / (1000 * p * (1 - p)) / 4)
    assert half_width == pytest.approx(expected, rel=0.01)


def test_the_interval_covers_the_true_rating_about_95_times_in_100():
    """200 simulated ladders (12 players 60 points apart, 300 random pairings each, seeded):
    the share of intervals holding the true rating (relative to the players' mean)."""
    truth = {f"p{i}": 60.0 * i for i in range(12)}
    mean = sum(truth.values()) / len(truth)
    covered = checked = 0
    for trial in range(200):
        rng = random.Random(trial)
        played = []
        for k in range(300):
            a, b = rng.sample(sorted(truth), 2)
            a_wins = rng.random() < 1 / (1 + 10 ** ((truth[b] - truth[a]) / 400))
            played.append(RatedGame(f"e{k}", "debate", *((a, b) if a_wins else (b, a))))
        for player, (_, low, high) in fit_ratings(played).items():
            covered += low <= 1500 + truth[player] - mean <= high
            checked += 1
    assert 0.92 <= covered / checked <= 0.98


# --- games read from a store ---------------------------------------------------------------


def test_debates_of_scripted_bots_rate_the_stronger_higher(store):
    debates(store, "stubborn", "contrarian")  # stubborn is right; contrarian disputes it: stubborn wins
    debates(store, "stubborn", "agreeable")  # agreeable agrees: both right, a tie
    debates(store, "echo", "contrarian", rounds=1)  # echo says 7 (wrong); contrarian calculates: contrarian wins
    debates(store, "stubborn", "stubborn")  # a policy against itself: not rated
    played = read_games(store)
    assert len(played) == 3 * len(SUMS)
    [ladder] = ladders(store, reference="scripted:stubborn")
    by_player = {r.player: r for r in ladder.ratings}
    assert [r.player for r in ladder.ratings][-1] == "scripted:echo"
    assert by_player["scripted:stubborn"].rating > by_player["scripted:contrarian"].rating > by_player[
        "scripted:echo"].rating
    assert (by_player["scripted:stubborn"].wins, by_player["scripted:stubborn"].ties,
            by_player["scripted:stubborn"].losses) == (6, 6, 0)
    assert (by_player["scripted:contrarian"].wins, by_player["scripted:contrarian"].losses) == (6, 6)
    assert by_player["scripted:agreeable"].ties == 6 and by_player["scripted:agreeable"].games == 6
    contrarian = by_player["scripted:contrarian"].versus
    assert (contrarian.value, contrarian.n) == (0.0, 6) and contrarian.high > 0.3  # Wilson at 0 of 6
    assert by_player["scripted:agreeable"].versus.value == 0.5
    assert by_player["scripted:echo"].versus is None  # never met stubborn
    assert by_player["scripted:stubborn"].versus is None
    assert ladder.games == 18 and sum(r.rating for r in ladder.ratings) / 4 == pytest.approx(1500)


@pytest.mark.parametrize("rules", ["rules", "verifier"])  # verifier: the old name of rules, in older stores
def test_a_tie_leaves_out_a_rules_seat_of_a_game_no_longer_registered(store, rules: str):
    seats = {"debater_a": "scripted:stubborn", "debater_b": "scripted:agreeable", "checker": rules}
    with Recorder(store) as recorder:
        tied = episode_start(game="retired", seats=seats)
        recorder.episode_started(tied)
        recorder.judgment(JudgmentRecord(tied.id, "judge", rules, None, None, None, None, "both right"))
        recorder.episode_finished(EpisodeEnd(tied.id, EpisodeStatus.SUCCEEDED, None, 0, {}))
    assert [(g.first, g.second, g.tie) for g in read_games(store)] == [("scripted:stubborn", "scripted:agreeable",
                                                                         True)]


def test_a_score_is_not_a_tie_and_failed_episodes_do_not_count(store):
    debates(store, "stubborn", "contrarian", SUMS[:2])
    seats = {"debater_a": "scripted:stubborn", "debater_b": "scripted:agreeable", "judge": "rules"}
    with Recorder(store) as recorder:
        scored = episode_start(game="debate", seats=seats)
        recorder.episode_started(scored)
        recorder.judgment(JudgmentRecord(scored.id, "judge", "openai:judge", None, None, None, None, "fair",
                                         rubric="fairness", score=0.75, scored_seat="debater_a"))
        recorder.episode_finished(EpisodeEnd(scored.id, EpisodeStatus.SUCCEEDED, None, 0, {}))
        failed = episode_start(game="debate", seats=seats)
        recorder.episode_started(failed)
        recorder.judgment(JudgmentRecord(failed.id, "judge", "rules", "debater_b", "debater_a", None, None, "x"))
        recorder.episode_finished(EpisodeEnd(failed.id, EpisodeStatus.FAILED, None, 0, {}, error="boom"))
    assert [(g.first, g.second, g.tie) for g in read_games(store)] == [("scripted:stubborn", "scripted:contrarian",
                                                                         False)] * 2
    assert read_games(store, "math-reflection") == []


# --- the commands --------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    return url


def test_ratings_on_a_store_without_rated_games_says_how_to_make_some(db):
    result = runner.invoke(app, ["ratings"])
    assert result.exit_code == 1
    assert "no rated games" in result.output and "sparring play debate" in result.output


def test_ratings_prints_draws_and_checks_its_options(db, tmp_path):
    engine = open_store(db)
    debates(engine, "stubborn", "contrarian")
    debates(engine, "echo", "contrarian", rounds=1)
    table = runner.invoke(app, ["ratings", "--plot", str(tmp_path / "ladder.png")], env={"COLUMNS": "80"})
    assert table.exit_code == 0, table.output
    assert "debate: 12 rated games" in table.output and "6-0-0" in table.output
    assert "score against scripted:contrarian" in table.output  # the most-played by default
    assert all(len(line) <= 80 for line in table.output.splitlines())
    assert (tmp_path / "ladder.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = json.loads(runner.invoke(app, ["ratings", "--format", "json", "--reference", "scripted:echo"]).stdout)
    assert [r["player"] for r in rows] == ["scripted:stubborn", "scripted:contrarian", "scripted:echo"]
    assert rows[1]["versus"]["value"] == 1.0 and rows[1]["versus"]["n"] == 6 and rows[1]["reference"] == "scripted:echo"
    assert (tmp_path / "store-ratings.png").exists()  # the default place: beside the store
    unknown = runner.invoke(app, ["ratings", "--reference", "scripted:nobody"])
    assert unknown.exit_code == 2 and "played no rated game" in unknown.output and "scripted:echo" in unknown.output
    assert runner.invoke(app, ["ratings", "--game", "chess"]).exit_code == 2
    assert runner.invoke(app, ["ratings", "--game", "math-reflection"]).exit_code == 1


def test_report_shows_the_ladder_of_a_store_with_only_rated_games(db, tmp_path):
    debates(open_store(db), "stubborn", "contrarian")
    result = runner.invoke(app, ["report", "--out", str(tmp_path / "page")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "page" / "index.html").read_text()
    assert "<h2>Ratings</h2>" in page and 'src="ratings.png"' in page and "scripted:contrarian" in page
    assert (tmp_path / "page" / "ratings.png").read_bytes()[:4] == b"\x89PNG"
    assert "1 plot(s)" in " ".join(result.output.split())
