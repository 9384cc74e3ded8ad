"""The shipped encyclopedia: a made-up country, Veyland, generated from one seed.

Every name, date and quantity is invented, so the bundled model cannot know an answer and
must search. The world is consistent by construction: each fact is stated in exactly one
document (the entity's own), other documents only name the entities they point at, and the
dates agree (people are born in towns founded before them, found towns, write works and
climb mountains while alive). Questions ask for one fact (one gold document) or chain two
(a document names an entity whose own document holds the answer); every answer is a number.

``python -m graphs.retrieval.world`` rewrites ``data/corpus.jsonl`` and ``data/questions.jsonl``;
tests check that the shipped files are exactly what this module makes.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from graphs.retrieval.corpus import SHIPPED_CORPUS
from graphs.retrieval.tasks import SHIPPED_QUESTIONS

SEED = 12

SINGLE_HOP, TWO_HOP = 90, 60
HELDOUT_EVERY = 3
"""every third question (of each kind) is held out: 100 train, 50 heldout"""

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "t", "th", "v", "w",
           "z", "ost", "ald", "ev", "or", "ul", "is")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "v", "rk", "nd")
_TOWN_ENDS = ("ora", "ick", "holm", "wick", "ford", "stad", "mere", "by", "enna", "ault")
_GIVEN_ENDS = ("a", "o", "in", "el", "is", "ric", "wen", "ya", "on")
_FAMILY_ENDS = ("sk", "ley", "ven", "hart", "mont", "dor", "ling", "ard", "ell")
_OCCUPATIONS = ("cartographer", "glassmaker", "astronomer", "engineer", "poet", "composer", "botanist", "physician",
                "clockmaker", "historian", "shipwright", "painter")
_ADJECTIVES = ("Amber", "Silver", "Lantern", "Heron", "Salt", "Copper", "Thistle", "Winter", "Harvest", "Quiet",
               "Iron", "Glass", "Ashen", "Reed", "Hollow", "Scarlet", "Juniper", "Ember", "Tidal", "Northern",
               "Sable", "Willow", "Granite", "Lesser", "Wandering")
_NOUNS = ("Ledger", "Almanac", "Compass", "Chronicle", "Garden", "Loom", "Orchard", "Bell", "Herbal", "Gazetteer",
          "Primer", "Psalter", "Register", "Songbook", "Treatise")
_CRAFTS = ("weavers", "tanners", "glassblowers", "bellfounders", "salt merchants", "rope makers", "printers",
           "lantern makers", "dyers", "coopers", "masons", "millers")
_FESTIVAL_THEMES = ("Lantern", "Heron", "Salt", "Harvest", "Ember", "Thistle", "Juniper", "Bell", "Kite", "Reed",
                    "Copper", "Apple", "River", "Moth", "Winter", "Willow")
_WATERS = ("the Grey Sea", "the Sound of Maren", "Lake Orm", "the Bay of Tessel")
_DIRECTIONS = ("north", "south", "east", "west", "north-east", "south-west")


@dataclass
class Doc:
    key: str
    title: str
    sentences: list[str] = field(default_factory=list)
    id: str = ""

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True)
class Fact:
    doc: Doc
    sentence: str


@dataclass(frozen=True)
class Question:
    text: str
    answer: int
    facts: tuple[Fact, ...]
    kind: str


@dataclass
class _Person:
    name: str
    occupation: str
    born: int
    died: int
    birthplace: _Town | None = None


@dataclass
class _Town:
    name: str
    founded: int
    founder: _Person | None
    population: int
    elevation: int
    region: str = ""
    river: _River | None = None


@dataclass
class _River:
    name: str
    length: int
    source: _Mountain
    mouth: str


@dataclass
class _Mountain:
    name: str
    height: int
    region: str
    climber: _Person
    climbed: int


class _Names:
    """Invented words, each made once (so a name never names two things)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, ends: tuple[str, ...]) -> str:
        while True:
            word = (self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                    + self.rng.choice(ends)).capitalize()
            if len(word) >= 4 and word not in self.used:
                self.used.add(word)
                return word


def _money(value: int) -> str:
    return f"{value:,}"


def generate(seed: int = SEED) -> tuple[list[Doc], list[Question]]:
    """The world's documents (ids assigned, in id order) and every question it can ask."""
    rng = random.Random(seed)
    names = _Names(rng)
    docs: list[Doc] = []
    questions: list[Question] = []

    def doc(key: str, title: str) -> Doc:
        made = Doc(key, title)
        docs.append(made)
        return made

    def state(target: Doc, sentence: str) -> Fact:
        target.sentences.append(sentence)
        return Fact(target, sentence)

    regions = [names.word(("ia", "mark", "land", "ar")) for _ in range(6)]
    old_towns = [_Town(names.word(_TOWN_ENDS), rng.randint(1120, 1420), None,
                       rng.randint(800, 60000), rng.randint(4, 900)) for _ in range(20)]
    people: list[_Person] = []
    for _ in range(90):
        born = rng.randint(1450, 1830)
        people.append(_Person(f"{names.word(_GIVEN_ENDS)} {names.word(_FAMILY_ENDS)}",
                              rng.choice(_OCCUPATIONS), born, born + rng.randint(38, 91)))
    people.sort(key=lambda p: p.born)
    founders = rng.sample(people, 40)
    new_towns = [_Town(names.word(_TOWN_ENDS), f.born + rng.randint(24, min(60, f.died - f.born - 1)),
                       f, rng.randint(400, 40000), rng.randint(4, 900)) for f in founders]
    towns = old_towns + new_towns
    for person in people:
        person.birthplace = rng.choice([t for t in towns if t.founded < person.born])
    climbers = rng.sample([p for p in people if p not in founders], 14)
    mountains = [_Mountain("Mount " + names.word(("var", "horn", "dun", "ek", "mor")),
                           rng.randint(900, 4600), rng.choice(regions), c, c.born + rng.randint(18, 36))
                 for c in climbers]
    rivers = [_River(names.word(("a", "e", "wyn", "ent", "ay")), rng.randint(40, 620), m,
                     rng.choice(_WATERS)) for m in mountains]
    for town in towns:
        town.region, town.river = rng.choice(regions), rng.choice(rivers)

    town_docs: dict[str, Doc] = {}
    person_docs: dict[str, Doc] = {}
    river_docs: dict[str, Doc] = {}
    mountain_docs: dict[str, Doc] = {}
    facts: dict[tuple[str, str], Fact] = {}
    """(entity name, attribute) -> the one sentence that states it"""

    for town in towns:
        d = town_docs[town.name] = doc("town", town.name)
        facts[town.name, "river"] = state(d, f"{town.name} is a town in {town.region}, on the {town.river.name} "
                                             "river.")
        if town.founder is None:
            facts[town.name, "founded"] = state(d, f"{town.name} was founded in {town.founded}.")
        else:
            facts[town.name, "founded"] = state(d, f"It was founded in {town.founded} by {town.founder.name}.")
        facts[town.name, "population"] = state(d, f"At the last census {town.name} had {_money(town.population)} "
                                                  "inhabitants.")
        facts[town.name, "elevation"] = state(d, f"{town.name} lies {town.elevation} metres above sea level.")
    for person in people:
        d = person_docs[person.name] = doc("person", person.name)
        facts[person.name, "born"] = state(d, f"{person.name} was a {person.occupation} born in "
                                              f"{person.birthplace.name} in {person.born}.")
        facts[person.name, "died"] = state(d, f"{person.name.split()[0]} died in {person.died}.")
    for mountain in mountains:
        d = mountain_docs[mountain.name] = doc("mountain", mountain.name)
        facts[mountain.name, "height"] = state(d, f"{mountain.name} is a mountain in {mountain.region}, "
                                                  f"{_money(mountain.height)} metres high.")
        facts[mountain.name, "climbed"] = state(d, f"It was first climbed in {mountain.climbed} by "
                                                   f"{mountain.climber.name}.")
    for river in rivers:
        d = river_docs[river.name] = doc("river", f"{river.name} (river)")
        facts[river.name, "length"] = state(d, f"The {river.name} is a river of Veyland, {river.length} kilometres "
                                               "long.")
        facts[river.name, "source"] = state(d, f"It rises on {river.source.name} and flows into {river.mouth}.")
    for region in regions:
        d = doc("region", region)
        capital = rng.choice([t for t in towns if t.region == region] or towns)
        area = rng.randint(1200, 38000)
        state(d, f"{region} is a region in the {rng.choice(_DIRECTIONS)} of Veyland.")
        facts[region, "area"] = state(d, f"It covers {_money(area)} square kilometres, and its capital is "
                                          f"{capital.name}.")
        questions.append(Question(f"How many square kilometres does the region of {region} cover?", area,
                                  (facts[region, "area"],), "region-area"))

    def ask(kind: str, text: str, answer: int, *chain: Fact) -> None:
        questions.append(Question(text, answer, chain, kind))

    for town in towns:
        ask("town-founded", f"In which year was {town.name} founded?", town.founded, facts[town.name, "founded"])
        ask("town-population", f"How many inhabitants did {town.name} have at the last census?", town.population,
            facts[town.name, "population"])
        ask("town-elevation", f"How many metres above sea level does {town.name} lie?", town.elevation,
            facts[town.name, "elevation"])
        ask("river-of-town", f"How long, in kilometres, is the river that {town.name} stands on?", town.river.length,
            facts[town.name, "river"], facts[town.river.name, "length"])
        if town.founder is not None:
            ask("founder-born", f"In which year was the founder of {town.name} born?", town.founder.born,
                facts[town.name, "founded"], facts[town.founder.name, "born"])
    for person in people:
        ask("person-born", f"In which year was {person.name} born?", person.born, facts[person.name, "born"])
        ask("person-died", f"In which year did {person.name} die?", person.died, facts[person.name, "died"])
        ask("birthplace-population", f"How many inhabitants did the town where {person.name} was born have at the "
            "last census?", person.birthplace.population, facts[person.name, "born"],
            facts[person.birthplace.name, "population"])
        ask("birthplace-founded", f"In which year was the town where {person.name} was born founded?",
            person.birthplace.founded, facts[person.name, "born"], facts[person.birthplace.name, "founded"])
    for mountain in mountains:
        ask("mountain-height", f"How many metres high is {mountain.name}?", mountain.height,
            facts[mountain.name, "height"])
        ask("mountain-climbed", f"In which year was {mountain.name} first climbed?", mountain.climbed,
            facts[mountain.name, "climbed"])
        ask("climber-died", f"In which year did the first person to climb {mountain.name} die?", mountain.climber.died,
            facts[mountain.name, "climbed"], facts[mountain.climber.name, "died"])
    for river in rivers:
        ask("river-length", f"How long, in kilometres, is the {river.name} river?", river.length,
            facts[river.name, "length"])
        ask("source-height", f"How many metres high is the mountain on which the {river.name} river rises?",
            river.source.height, facts[river.name, "source"], facts[river.source.name, "height"])

    _works(rng, names, people, doc, state, ask, facts)
    _institutions(rng, towns, doc, state, ask, facts)
    _assign_ids(rng, docs)
    return sorted(docs, key=lambda d: d.id), questions


def _works(rng, names, people, doc, state, ask, facts) -> None:
    """Books, atlases and bridges: each made by one person while alive, with a quantity."""
    titles: set[str] = set()
    kinds = (("book", "pages", "It runs to {n} pages.", (90, 1400), "How many pages does {t} run to?"),
             ("atlas", "sheets", "It is printed on {n} sheets.", (12, 240), "On how many sheets is {t} printed?"),
             ("bridge", "metres", "It spans {n} metres.", (30, 900), "How many metres does {t} span?"))
    for index in range(50):
        kind, _, template, (low, high), question = kinds[index % 3]
        maker = rng.choice(people)
        while True:
            if kind == "bridge":
                title = f"the {names.word(('ant', 'ow', 'el', 'ir'))} Bridge"
            else:
                title = f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS) if kind == 'book' else 'Atlas'}"
            if title not in titles:
                titles.add(title)
                break
        made = maker.born + rng.randint(20, maker.died - maker.born - 1)
        amount = rng.randint(low, high)
        name = title[0].upper() + title[1:]
        d = doc(kind, name)
        verb = "built to the design of" if kind == "bridge" else "made by"
        what = {"book": "a book", "atlas": "an atlas", "bridge": "a bridge"}[kind]
        origin = state(d, f"{name} is {what} {verb} the {maker.occupation} {maker.name}, completed in {made}.")
        size = state(d, template.format(n=_money(amount)))
        ask(f"{kind}-completed", f"In which year was {title} completed?", made, origin)
        ask(f"{kind}-size", question.format(t=title), amount, size)
        ask(f"{kind}-maker-born", f"In which year was the maker of {title} born?", maker.born, origin,
            facts[maker.name, "born"])


def _institutions(rng, towns, doc, state, ask, facts) -> None:
    """Guilds and festivals: each in one town, begun after the town was founded."""
    guilds = rng.sample([(town, craft) for town in towns for craft in _CRAFTS], 24)
    for town, craft in guilds:
        year, members = rng.randint(town.founded + 5, max(town.founded + 5, 1900)), rng.randint(15, 900)
        name = f"the Guild of {craft.capitalize()} of {town.name}"
        d = doc("guild", name[0].upper() + name[1:])
        founded = state(d, f"{name[0].upper() + name[1:]} was founded in {year}.")
        size = state(d, f"It had {members} members when its last charter was signed.")
        ask("guild-founded", f"In which year was {name} founded?", year, founded)
        ask("guild-members", f"How many members did {name} have when its last charter was signed?", members, size)
    themes = rng.sample(list(_FESTIVAL_THEMES), len(_FESTIVAL_THEMES))
    for theme, town in zip(themes, rng.sample(towns, len(themes)), strict=True):
        year, visitors = rng.randint(town.founded + 10, max(town.founded + 10, 1900)), rng.randint(300, 90000)
        name = f"the {theme} Festival"
        d = doc("festival", name[0].upper() + name[1:])
        where = state(d, f"{name[0].upper() + name[1:]} is held every year in {town.name}; it was first held in "
                         f"{year}.")
        crowd = state(d, f"It draws about {_money(visitors)} visitors.")
        ask("festival-first", f"In which year was {name} first held?", year, where)
        ask("festival-visitors", f"About how many visitors does {name} draw?", visitors, crowd)
        ask("festival-town-population", f"How many inhabitants did the town that holds {name} have at the last "
            "census?", town.population, where, facts[town.name, "population"])


def _assign_ids(rng: random.Random, docs: list[Doc]) -> None:
    """Ids d001..dNNN in a shuffled order, so an id says nothing about what a document is."""
    numbers = list(range(1, len(docs) + 1))
    rng.shuffle(numbers)
    for number, d in zip(numbers, docs, strict=True):
        d.id = f"d{number:03d}"


def pick_questions(questions: list[Question], seed: int = SEED) -> list[Question]:
    """SINGLE_HOP one-fact and TWO_HOP two-fact questions, spread over the kinds."""
    rng = random.Random(seed)
    chosen: list[Question] = []
    for hops, wanted in ((1, SINGLE_HOP), (2, TWO_HOP)):
        pool = [q for q in questions if len(q.facts) == hops]
        by_kind: dict[str, list[Question]] = {}
        for question in pool:
            by_kind.setdefault(question.kind, []).append(question)
        for group in by_kind.values():
            rng.shuffle(group)
        kinds = sorted(by_kind)
        picked: list[Question] = []
        while len(picked) < wanted:
            for kind in kinds:
                if by_kind[kind] and len(picked) < wanted:
                    picked.append(by_kind[kind].pop())
        chosen += picked
    return chosen


def rows(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """The corpus rows and question rows the shipped files hold."""
    docs, questions = generate(seed)
    corpus = [{"id": d.id, "title": d.title, "text": d.text} for d in docs]
    counts = {1: 0, 2: 0}
    question_rows = []
    for number, question in enumerate(pick_questions(questions, seed), start=1):
        hops = len(question.facts)
        counts[hops] += 1
        question_rows.append({
            "id": f"q{number:03d}",
            "question": question.text,
            "answer": str(question.answer),
            "gold_docs": list(dict.fromkeys(f.doc.id for f in question.facts)),
            "facts": [{"doc": f.doc.id, "text": f.sentence} for f in question.facts],
            "hops": hops,
            "kind": question.kind,
            "split": "heldout" if counts[hops] % HELDOUT_EVERY == 0 else "train",
        })
    return corpus, question_rows


def write(seed: int = SEED) -> None:
    corpus, questions = rows(seed)
    SHIPPED_CORPUS.parent.mkdir(exist_ok=True)
    for path, items in ((SHIPPED_CORPUS, corpus), (SHIPPED_QUESTIONS, questions)):
        path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")


if __name__ == "__main__":
    write()
