"""The sentence frames of the arithmetic generator, each in one of three groups.

A frame is the wording of a problem: a sentence with slots for a family's numbers and for a
name (``{name}``, ``{friend}``), an item (``{item}``) and sometimes a number the question does
not need (``{x}``). Frames are split between three groups, fixed here and never shuffled:

* ``train``: the frames practice and training episodes are played on (and today's
  ``heldout`` split: other numbers in the same frames);
* ``dev``: frames for choices (defaults, recipes), never trained on, never reported as a result;
* ``unseen``: frames held out from training and from choices: the template-held-out split that
  says whether what was learned carries over to other wordings.

Every family with training frames has frames in ``dev`` and ``unseen`` too; ``compare`` and
``div-add`` have none in ``train`` (held out whole), so a gate sees a skill training never
touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Group = Literal["train", "dev", "unseen"]
GROUPS: tuple[Group, ...] = ("train", "dev", "unseen")


@dataclass(frozen=True)
class Frame:
    id: str
    """stable name of the wording, the task's ``template``"""
    family: str
    group: Group
    text: str


def _frames(family: str, group: Group, *rows: tuple[str, str]) -> list[Frame]:
    return [Frame(frame_id, family, group, text) for frame_id, text in rows]


FRAMES: tuple[Frame, ...] = tuple(
    # --- level 1 ---------------------------------------------------------------------------
    _frames("add", "train",
            ("buy-more", "{name} buys {a} {item} in the morning and {b} more in the afternoon. "
                         "How many {item} does {name} buy in all?"),
            ("bus-boards", "A bus has {a} passengers. At the next stop, {b} more people get on. "
                           "How many passengers are on the bus now?"),
            ("pages-read", "{name} reads {a} pages on Monday and {b} pages on Tuesday. "
                           "How many pages does {name} read in the two days?"),
            ("gift-more", "{name} has {a} {item}. {friend} gives {name} {b} more. How many {item} does {name} have now?"),
            ("car-park", "There are {a} red cars and {b} blue cars in a car park. How many cars are there altogether?"),
            ("weekend-walk", "{name} walked {a} km on Saturday and {b} km on Sunday. "
                             "What is the total distance {name} walked, in km?"),
            ("room-desks", "Room {x} of the school has {a} desks, and the caretaker brings in {b} more. "
                           "How many desks are in the room now?"),
            ("age-picks", "{name}, who is {x} years old, picks {a} apples in the morning and {b} apples in the "
                          "afternoon. How many apples does {name} pick in all?"))
    + _frames("add", "dev",
              ("shelf-books", "A shelf holds {a} cookbooks and {b} novels. How many books are on the shelf?"),
              ("two-games", "{name} scored {a} points in the first game and {b} points in the second game. "
                            "What was {name}'s total score?"),
              ("bus-market", "Bus number {x} has {a} passengers, and {b} more get on at the market. "
                             "How many passengers are on the bus now?"))
    + _frames("add", "unseen",
              ("pond-ducks", "In a pond there are {a} ducks. Then {b} more ducks land on the water. "
                             "How many ducks are in the pond now?"),
              ("two-weeks-found", "{name} is {x} years old and collects {item}. {name} found {a} {item} last week "
                                  "and {b} this week. How many {item} did {name} find over the two weeks?"))
    + _frames("sub", "train",
              ("give-away", "{name} has {a} {item} and gives {b} of them to {friend}. "
                            "How many {item} does {name} have left?"),
              ("train-stop", "A train leaves the station with {a} passengers. At the first stop, {b} passengers get "
                             "off and nobody gets on. How many passengers are still on the train?"),
              ("muffins-eaten", "{name} bakes {a} muffins and the family eats {b} of them. How many muffins are left?"),
              ("eggs-broken", "A box holds {a} eggs. {b} of them break. How many eggs are not broken?"),
              ("toy-spend", "{name} had ${a} and spent ${b} on a toy. How many dollars does {name} have now?"),
              ("birds-fly", "There were {a} birds on a fence. {b} birds flew away. "
                            "How many birds are still on the fence?"),
              ("bus-number-off", "Bus number {x} leaves with {a} passengers, and {b} of them get off at the first "
                                 "stop. How many passengers are left on the bus?"),
              ("age-loses", "{name}, who is {x} years old, has {a} {item} and loses {b} of them. "
                            "How many {item} does {name} have left?"))
    + _frames("sub", "dev",
              ("rope-cut", "A rope is {a} metres long. {name} cuts off {b} metres. "
                           "How long is the rest of the rope, in metres?"),
              ("album-need", "{name} needs {a} stickers to fill an album and already has {b}. "
                             "How many more stickers does {name} need?"),
              ("room-home-early", "A class in room {x} has {a} pupils, and {b} of them go home early. "
                                  "How many pupils are still in the class?"))
    + _frames("sub", "unseen",
              ("trip-cold", "A class of {a} children plans a trip, and {b} of them stay home with a cold. "
                            "How many children go on the trip?"),
              ("apps-deleted", "{name}'s phone is {x} months old and had {a} apps. {name} deleted {b} of them. "
                               "How many apps are left on the phone?"))
    + _frames("mul", "train",
              ("packs-of", "{name} buys {a} packs of {item} with {b} {item} in each pack. "
                           "How many {item} does {name} buy?"),
              ("garden-rows", "A garden has {a} rows of plants with {b} plants in each row. "
                              "How many plants are in the garden?"),
              ("pencil-boxes", "Each box holds {b} pencils. How many pencils are in {a} boxes?"),
              ("daily-laps", "{name} runs {b} laps every day for {a} days. How many laps does {name} run in all?"),
              ("ticket-price", "A ticket costs ${b}. How many dollars do {a} tickets cost?"),
              ("table-chairs", "There are {a} tables in a room and {b} chairs at each table. "
                               "How many chairs are there?"),
              ("room-rows", "Room {x} of the school has {a} rows with {b} desks in each row. "
                            "How many desks are in the room?"),
              ("age-bags", "{name}, who is {x} years old, buys {a} bags of {item} with {b} {item} in each bag. "
                           "How many {item} does {name} buy?"))
    + _frames("mul", "dev",
              ("shelves-hold", "A bookcase has {a} shelves, and each shelf holds {b} books. "
                               "How many books fit in the bookcase?"),
              ("weekly-save", "{name} saves ${b} every week. How many dollars does {name} save in {a} weeks?"),
              ("age-beans", "{name} is {x} years old and plants {a} rows of beans with {b} beans in each row. "
                            "How many beans does {name} plant?"))
    + _frames("mul", "unseen",
              ("bun-trays", "A baker puts {b} buns on each of {a} trays. How many buns are on the trays?"),
              ("pizza-slices", "{name}, who lives on floor {x}, orders {a} pizzas cut into {b} slices each. "
                               "How many slices are there?"))
    + _frames("div", "train",
              ("share-equally", "{name} shares {total} {item} equally among {k} friends. "
                                "How many {item} does each friend get?"),
              ("equal-teams", "{total} students are split into {k} equal teams. How many students are in each team?"),
              ("ribbon-pieces", "A ribbon {total} cm long is cut into {k} equal pieces. "
                                "How long is each piece, in cm?"),
              ("egg-boxes", "{name} packs {total} eggs into boxes of {k}. How many boxes does {name} fill?"),
              ("meal-split", "{k} friends pay ${total} together for a meal and split it evenly. "
                             "How many dollars does each friend pay?"),
              ("apple-baskets", "A farmer puts {total} apples into {k} baskets, the same number in each. "
                                "How many apples go in each basket?"),
              ("room-equal-rows", "Room {x} of the school has {total} desks set out in {k} equal rows. "
                                  "How many desks are in each row?"),
              ("age-shares", "{name}, who is {x} years old, shares {total} {item} equally among {k} cousins. "
                             "How many {item} does each cousin get?"))
    + _frames("div", "dev",
              ("drive-parts", "A drive of {total} km is split into {k} equal parts. How many km long is each part?"),
              ("book-days", "{name} reads a {total}-page book in {k} days, the same number of pages each day. "
                            "How many pages does {name} read each day?"),
              ("bus-stops-off", "Bus number {x} carries {total} passengers, and the same number get off at each of "
                                "its {k} stops. How many passengers get off at each stop?"))
    + _frames("div", "unseen",
              ("hall-rows", "There are {total} chairs in a hall, set out in {k} equal rows. "
                            "How many chairs are in each row?"),
              ("stamp-pages", "{name} is {x} years old and has {total} stamps to put on {k} pages, the same number "
                              "on each page. How many stamps go on each page?"))
    + _frames("compare", "dev",
              ("more-than", "{name} has {a} {item} and {friend} has {b} {item}. "
                            "How many more {item} does {name} have than {friend}?"),
              ("longer-ribbon", "A red ribbon is {a} cm long and a blue ribbon is {b} cm long. "
                                "How much longer is the red ribbon, in cm?"))
    + _frames("compare", "unseen",
              ("older-by", "{name} is {a} years old and {friend} is {b} years old. How many years older is {name}?"),
              ("taller-tree", "The oak tree is {a} metres tall and the pine is {b} metres tall. "
                              "By how many metres is the oak taller than the pine?"),
              ("heavier-dog", "A cat weighs {b} kg and a dog weighs {a} kg. How many kg heavier is the dog than the cat?"))
    # --- level 2 ---------------------------------------------------------------------------
    + _frames("add-sub", "train",
              ("buy-then-give", "{name} has {a} {item}. {name} buys {b} more, then gives {c} to {friend}. "
                                "How many {item} does {name} have now?"),
              ("library-lends", "A library has {a} books. It buys {b} new books and lends out {c}. "
                                "How many books are in the library now?"))
    + _frames("add-sub", "dev",
              ("marbles-won", "{name} has {a} marbles, wins {b} more in a game, then loses {c}. "
                              "How many marbles does {name} have?"))
    + _frames("add-sub", "unseen",
              ("tank-water", "A tank holds {a} litres of water. {b} litres are poured in and then {c} litres "
                             "are drained. How many litres are in the tank now?"))
    + _frames("mul-add", "train",
              ("packs-had", "{name} buys {a} packs of {item} with {b} {item} in each pack. {name} already had {c} "
                            "{item}. How many {item} does {name} have now?"),
              ("theatre-seats", "A theatre has {a} rows of {b} seats and {c} extra folding chairs. "
                                "How many seats are there in all?"))
    + _frames("mul-add", "dev",
              ("orange-bags", "{name} buys {a} bags of {b} oranges and picks {c} more from a tree. "
                              "How many oranges does {name} have?"))
    + _frames("mul-add", "unseen",
              ("sheep-pens", "A farmer has {a} pens with {b} sheep in each and {c} sheep in the field. "
                             "How many sheep does the farmer have?"))
    + _frames("mul-sub", "train",
              ("trays-sold", "A baker fills {a} trays with {b} rolls each and sells {c} rolls. "
                             "How many rolls are left?"),
              ("stickers-kept", "{name} buys {a} packs of {b} stickers and gives away {c}. "
                                "How many stickers does {name} keep?"))
    + _frames("mul-sub", "dev",
              ("crate-bottles", "A crate has {a} layers of {b} bottles. {c} bottles are broken. "
                                "How many bottles are not broken?"))
    + _frames("mul-sub", "unseen",
              ("hotel-rooms", "A hotel has {a} floors with {b} rooms on each floor. {c} rooms are booked. "
                              "How many rooms are free?"))
    + _frames("sub-sub", "train",
              ("trip-left", "{name} is driving {total} km to visit {friend}. {name} drives {a} km before lunch "
                            "and {b} km after lunch. How many km are left to drive?"),
              ("wallet", "{name} has ${total}. {name} spends ${a} on lunch and ${b} on a book. "
                         "How many dollars does {name} have left?"))
    + _frames("sub-sub", "dev",
              ("sweets-eaten", "A bag has {total} sweets. {name} eats {a} and {friend} eats {b}. "
                               "How many sweets are left?"))
    + _frames("sub-sub", "unseen",
              ("pages-left", "{name}'s book has {total} pages. {name} reads {a} pages on Monday and {b} pages on "
                             "Tuesday. How many pages are left to read?"))
    + _frames("div-add", "dev",
              ("share-had", "{name} shares {total} {item} equally among {k} friends, and one friend already had {c}. "
                            "How many {item} does that friend have now?"))
    + _frames("div-add", "unseen",
              ("group-joins", "{total} pupils are split into {k} equal groups. Then {c} more pupils join one group. "
                              "How many pupils are in that group now?"),
              ("rope-joined", "A {total} cm rope is cut into {k} equal pieces, and one piece is tied to a {c} cm "
                              "string. How long are the two together, in cm?"))
    # --- level 3 ---------------------------------------------------------------------------
    + _frames("two-products", "train",
              ("two-speeds", "A train travels at {p} km per hour for {a} hours, then at {q} km per hour for {b} "
                             "hours. How many kilometres does it travel in total?"))
    + _frames("two-products", "dev",
              ("shirts-hats", "{name} buys {a} shirts at ${p} each and {b} hats at ${q} each. "
                              "How many dollars does {name} spend?"))
    + _frames("two-products", "unseen",
              ("cinema-takings", "A cinema sells {a} adult tickets at ${p} each and {b} child tickets at ${q} each. "
                                 "How many dollars does it take in?"))
    + _frames("change", "train",
              ("notebook-change", "{name} buys {a} notebooks at ${p} each and {b} pens at ${q} each, and pays with "
                                  "a ${bill} bill. How many dollars of change does {name} get?"))
    + _frames("change", "dev",
              ("lunch-change", "{name} pays for {a} sandwiches at ${p} each and {b} juices at ${q} each with a "
                               "${bill} note. How much change, in dollars, does {name} get?"))
    + _frames("change", "unseen",
              ("fair-change", "At a fair {name} buys {a} rides at ${p} each and {b} snacks at ${q} each, paying "
                              "with ${bill}. How many dollars come back as change?"))
    + _frames("mul-sub-add", "train",
              ("assembly", "A school has {a} classes with {b} students in each class. On Friday, {c} students are "
                           "absent and {d} visitors join the assembly. How many people are at the assembly?"),
              ("savings", "{name} saves ${a} a week for {b} weeks, spends ${c} on a bike, and then gets ${d} as "
                          "a gift. How many dollars does {name} have now?"))
    + _frames("mul-sub-add", "dev",
              ("shop-pens", "A shop has {a} boxes of {b} pens. It sells {c} pens and then receives {d} more. "
                            "How many pens does the shop have now?"))
    + _frames("mul-sub-add", "unseen",
              ("daily-wage", "{name} earns ${b} a day for {a} days, spends ${c}, and then finds ${d}. "
                             "How many dollars does {name} have?"))
    # --- level 4 ---------------------------------------------------------------------------
    + _frames("share-rest", "train",
              ("share-boxes", "{name} buys {a} boxes of {item} with {b} {item} in each box. {name} keeps {kept} "
                              "and shares the rest equally among {k} friends. How many {item} does each friend get?"))
    + _frames("share-rest", "dev",
              ("cards-dealt", "A game has {a} decks of {b} cards. {kept} cards are set aside and the rest are "
                              "dealt equally to {k} players. How many cards does each player get?"))
    + _frames("share-rest", "unseen",
              ("seed-rows", "{name} has {a} packets of {b} seeds, keeps {kept} seeds for next year and sows the "
                            "rest in {k} equal rows. How many seeds go in each row?"))
    + _frames("round-trip", "train",
              ("fuel", "A car uses {rate} litres of fuel for every 100 km. How many litres does it need for a "
                       "round trip to a town {distance} km away?"))
    + _frames("round-trip", "dev",
              ("van-farm", "A van uses {rate} litres of fuel per 100 km. It drives to a farm {distance} km away and "
                           "back. How many litres does it use?"))
    + _frames("round-trip", "unseen",
              ("boat-island", "A boat burns {rate} litres of fuel every 100 km. How much fuel, in litres, does it "
                              "burn going to an island {distance} km away and coming back?"))
    + _frames("proportion", "train",
              ("recipe", "A recipe uses {whole} grams of flour to make {batch} cookies. "
                         "How many grams of flour are needed for {wanted} cookies?"))
    + _frames("proportion", "dev",
              ("paint-walls", "{whole} litres of paint cover {batch} walls. How many litres are needed for "
                              "{wanted} walls?"))
    + _frames("proportion", "unseen",
              ("printer-pages", "A printer uses {whole} sheets of paper for {batch} booklets. How many sheets "
                                "does it use for {wanted} booklets?"))
    + _frames("split-total", "train",
              ("split-bill", "{people} friends eat at a restaurant. The meal costs ${cost} and they leave a "
                             "${extra} tip. They split the total equally. How many dollars does each friend pay?"))
    + _frames("split-total", "dev",
              ("taxi-share", "{people} friends share a taxi. The fare is ${cost} and the toll is ${extra}. They "
                             "split the total evenly. How many dollars does each one pay?"))
    + _frames("split-total", "unseen",
              ("gift-share", "{people} cousins buy a gift for ${cost} and a card for ${extra}, sharing the cost "
                             "equally. How many dollars does each cousin pay?"))
    + _frames("half-product", "train",
              ("wages-rent", "{name} earns ${rate} per hour, works {hours} hours a day for {days} days, and then "
                             "spends half of the money on rent. How many dollars does {name} have left?"))
    + _frames("half-product", "dev",
              ("lemonade-half", "A stand sells lemonade at ${rate} a jug, {hours} jugs a day for {days} days, and "
                                "gives half of the money to charity. How many dollars does it keep?"))
    + _frames("half-product", "unseen",
              ("tiles-half", "A floor has {rate} rows of {hours} tiles in each of {days} rooms, and half of the "
                             "tiles are white. How many tiles are white?"))
)
