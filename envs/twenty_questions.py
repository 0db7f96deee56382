"""Twenty Questions (ArCHer App. A, LMRL-Gym) with a knowledge-base oracle.

157 household objects in 17 categories; the agent asks yes/no questions and the oracle answers
exactly "Yes.", "No." or "Invalid Question.". The oracle here is a hand-written knowledge base
(``KB``) plus a small regex question parser, so the game runs without any model;
``llm_prompt``/``llm_postprocess`` let an LLM oracle (e.g. the LMRL-Gym flan-t5 oracles) be plugged
in instead (see ``envs/__init__.py``).

How a question is answered (``answer``), in this order:
1. it names the target or one of its variants as whole words -> "Yes." (the episode is won);
2. it names any other object (name or variant, whole words) -> "No." (a guess of another object).
   Any mention counts, wherever it appears: "Does it grow on trees?" is a guess of "tree";
3. it is a yes/no question about attributes/categories the parser understands -> "Yes."/"No."
   from the knowledge base; several attributes in one question are joined with AND ("Is it a big
   animal?"), or with OR when the question contains "or" ("Is it a fruit or a vegetable?");
4. anything else (not a yes/no question, empty, gibberish, an attribute the KB does not model such
   as colour) -> "Invalid Question.".

Conventions a user should know:
- fruits, vegetables and plants (and parts of plants: leaf, acorn, pinecone) are living things, as
  in the reference oracle's dialogues; "Is it a plant?" is Yes for fruits and vegetables ("a plant
  or part of a plant"); a mushroom is living and edible but not a plant.
- fruit/vegetable are culinary (a tomato is a vegetable); "berry" is culinary (strawberry,
  blueberry).
- "heavy" means you cannot lift it with one hand; "electronic" and "needs power" mean it runs on
  electricity (mains or battery) -- cars run on fuel, so vehicles are not electronic.
- "used in the kitchen" is Yes for kitchen tools and for food (fruits, vegetables);
  "Is it a kitchen tool/utensil?" asks for the Kitchen Tools category only.
- "Is it a tool?" is Yes for tools, garden tools, kitchen tools (not the toaster) and scissors.
- negation: only the explicit word "not" negates ("Is it not alive?" is answered as the opposite of
  "Is it alive?"); "Isn't it alive?" / "Doesn't it fly?" are answered like the positive question, as
  a person would; "alive or not" is not a negation. A question that names the target wins even when
  negated ("Is it not a dog?" for target dog is "Yes." and ends the episode), like the reference.
- words are matched whole: "not" and "know" never read as "no"; "Do you know if it is alive?" /
  "Can you tell me whether it is alive?" are answered like the inner question.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from .core import QuestionGame, normalize

YES, NO, INVALID = "Yes.", "No.", "Invalid Question."

CATEGORY_COUNTS = {
    "Sports": 10,
    "Animals": 10,
    "Fruits": 10,
    "Vehicles": 10,
    "Clothes": 11,
    "Electronics": 10,
    "Musical Instruments": 10,
    "Furniture": 10,
    "Office Supplies": 14,
    "Vegetables": 10,
    "Art": 7,
    "Kitchen Tools": 10,
    "Nature": 11,
    "Toys": 4,
    "Jewelry": 9,
    "Garden Supplies": 5,
    "Tools": 6,
}

# Every object has every one of these boolean attributes.
ATTRIBUTES = (
    "living",
    "animal",
    "mammal",
    "bird",
    "fish",
    "reptile",
    "pet",
    "has_legs",
    "can_move",
    "plant",
    "grows_underground",
    "edible",
    "fruit",
    "vegetable",
    "citrus",
    "berry",
    "sweet",
    "natural",
    "man_made",
    "electronic",
    "needs_power",
    "has_screen",
    "has_wheels",
    "has_engine",
    "vehicle",
    "rideable",
    "sit_on",
    "can_fly",
    "wearable",
    "worn_on_head",
    "clothing",
    "jewelry",
    "furniture",
    "musical_instrument",
    "string_instrument",
    "wind_instrument",
    "percussion_instrument",
    "used_for_sports",
    "ball",
    "toy",
    "tool",
    "made_of_metal",
    "made_of_wood",
    "made_of_fabric",
    "made_of_plastic",
    "made_of_glass",
    "made_of_paper",
    "bigger_than_person",
    "fits_in_pocket",
    "heavy",
    "used_in_kitchen",
    "used_for_cooking",
    "used_in_office",
    "used_in_garden",
    "used_outdoors",
    "found_in_home",
    "sharp",
    "used_for_writing",
    "used_for_art",
    "round",
    "soft",
    "holds_liquid",
)

# The catalogue: "[Category] default attributes" starts a category; each object line is
# "name | variant; variant | attributes", where an attribute "x" sets x True and "-x" sets it False
# (overriding the category default). Attributes not listed are False, then the derived ones below
# are filled in by ``_derive``.
_CATALOG = """
[Sports] used_for_sports found_in_home
football | soccer ball | ball round used_outdoors
basketball | | ball round used_outdoors
volleyball | | ball round used_outdoors
baseball bat | bat | made_of_wood used_outdoors
tennis racket | tennis racquet; racket; racquet | used_outdoors
golf club | | made_of_metal used_outdoors
hockey stick | | made_of_wood used_outdoors
skateboard | skate board | has_wheels made_of_wood used_outdoors rideable
frisbee | flying disc | made_of_plastic round used_outdoors can_fly
dumbbell | dumbell; dumb bell | made_of_metal

[Animals] has_legs
dog | puppy; doggy | mammal pet soft found_in_home heavy
cat | kitten; kitty | mammal pet soft found_in_home
horse | pony | mammal heavy bigger_than_person used_outdoors rideable sit_on
rabbit | bunny | mammal pet soft found_in_home
parrot | | bird pet can_fly found_in_home
goldfish | gold fish | fish pet found_in_home -has_legs
hamster | | mammal pet soft found_in_home fits_in_pocket
elephant | | mammal heavy bigger_than_person used_outdoors rideable
giraffe | | mammal heavy bigger_than_person used_outdoors
turtle | tortoise | reptile pet found_in_home

[Fruits] plant sweet found_in_home
banana | |
apple | | round
orange | | round citrus
strawberry | | berry soft fits_in_pocket
grape | | round fits_in_pocket
lemon | | citrus fits_in_pocket -sweet
watermelon | water melon | round heavy
pineapple | |
blueberry | blue berry | berry round fits_in_pocket
peach | | round soft

[Vehicles] has_wheels has_engine made_of_metal bigger_than_person heavy used_outdoors rideable \
sit_on
truck | lorry; pickup truck |
car | automobile |
bicycle | bike | -has_engine -bigger_than_person -heavy
motorcycle | motorbike |
bus | |
airplane | aeroplane; plane; airliner; jet | can_fly
boat | ship | -has_wheels
train | locomotive |
helicopter | | can_fly -has_wheels
scooter | kick scooter | -has_engine -bigger_than_person -heavy -sit_on

[Clothes] made_of_fabric soft found_in_home
pants | trousers; slacks | has_legs
shirt | t-shirt; tee shirt; tshirt |
dress | gown |
jacket | coat | used_outdoors
hat | cap | used_outdoors worn_on_head
socks | sock | fits_in_pocket
shoes | shoe; sneaker | -made_of_fabric -soft used_outdoors
scarf | | used_outdoors
gloves | glove; mitten | fits_in_pocket used_outdoors
sweater | jumper; pullover |
skirt | |

[Electronics] electronic made_of_plastic found_in_home
computer | pc; laptop; personal computer; desktop computer | has_screen used_in_office
television | tv; telly; television set | has_screen made_of_glass
cell phone | phone; cellphone; mobile phone; smartphone; smart phone | has_screen made_of_glass \
fits_in_pocket
camera | digital camera | has_screen
headphones | headphone; earphone; earbud; headset | wearable worn_on_head
radio | |
tablet | ipad | has_screen made_of_glass
game console | video game console; gaming console; games console; console |
remote control | remote; remote controller | fits_in_pocket
printer | | used_in_office

[Musical Instruments]
piano | grand piano; upright piano | made_of_wood heavy bigger_than_person has_legs found_in_home
guitar | acoustic guitar; electric guitar | string_instrument made_of_wood found_in_home
violin | fiddle | string_instrument made_of_wood found_in_home
drum | drum kit; drum set | percussion_instrument round
flute | | wind_instrument made_of_metal found_in_home
trumpet | | wind_instrument made_of_metal
saxophone | sax | wind_instrument made_of_metal
harp | | string_instrument made_of_wood heavy
cello | violoncello | string_instrument made_of_wood
harmonica | mouth organ | wind_instrument made_of_metal fits_in_pocket found_in_home

[Furniture] made_of_wood has_legs heavy found_in_home
chair | | -heavy sit_on
table | |
bed | | soft made_of_fabric bigger_than_person sit_on
sofa | couch; settee | soft made_of_fabric bigger_than_person sit_on
desk | | used_in_office
bookshelf | bookcase; book shelf | -has_legs bigger_than_person
wardrobe | armoire | -has_legs bigger_than_person
stool | | -heavy sit_on
bench | | sit_on used_outdoors
cabinet | filing cabinet | -has_legs

[Office Supplies] used_in_office found_in_home fits_in_pocket
pen | ballpoint pen; ballpoint | used_for_writing made_of_plastic
pencil | | used_for_writing made_of_wood
scissors | pair of scissors | sharp made_of_metal tool -fits_in_pocket
stapler | | made_of_metal -fits_in_pocket
paper clip | paperclip | made_of_metal
notebook | notepad; note book | made_of_paper -fits_in_pocket
eraser | |
ruler | | made_of_plastic -fits_in_pocket
envelope | | made_of_paper
calculator | | electronic made_of_plastic has_screen
highlighter | marker | used_for_writing made_of_plastic
folder | file folder | made_of_paper -fits_in_pocket
sticky note | post-it note | made_of_paper
rubber band | elastic band |

[Vegetables] plant found_in_home
carrot | | grows_underground
broccoli | brocolli |
potato | | grows_underground
tomato | | round
lettuce | |
onion | | round grows_underground
cucumber | |
corn | maize; sweet corn; corn on the cob |
spinach | |
bell pepper | pepper; capsicum; sweet pepper |

[Art] used_for_art found_in_home
paintbrush | paint brush; brush | made_of_wood
easel | | made_of_wood has_legs
canvas | | made_of_fabric
crayon | | used_for_writing fits_in_pocket
sculpture | statue |
palette | paint palette | made_of_wood
sketchbook | sketch book; sketchpad; sketch pad | made_of_paper

[Kitchen Tools] tool made_of_metal found_in_home
spoon | teaspoon; tablespoon |
fork | |
knife | kitchen knife | sharp used_for_cooking
frying pan | skillet; frypan; fry pan | used_for_cooking
saucepan | sauce pan; pot; cooking pot | used_for_cooking holds_liquid
spatula | | used_for_cooking
whisk | | used_for_cooking
cutting board | chopping board | used_for_cooking -made_of_metal made_of_wood
rolling pin | | used_for_cooking -made_of_metal made_of_wood
toaster | | -tool electronic used_for_cooking

[Nature] used_outdoors
tree | | plant made_of_wood bigger_than_person heavy
flower | | plant fits_in_pocket
rock | |
leaf | | plant fits_in_pocket
mountain | | bigger_than_person heavy
river | | bigger_than_person heavy
cloud | | bigger_than_person
pinecone | pine cone | plant fits_in_pocket
seashell | sea shell | fits_in_pocket
acorn | | plant fits_in_pocket
mushroom | | living edible fits_in_pocket

[Toys] found_in_home
teddy bear | teddy; teddybear; stuffed bear | soft made_of_fabric has_legs
doll | | made_of_plastic has_legs
kite | | can_fly used_outdoors made_of_fabric
yo-yo | yoyo | round fits_in_pocket made_of_plastic

[Jewelry] made_of_metal fits_in_pocket found_in_home
ring | | round
necklace | |
bracelet | | round
earrings | earring |
wristwatch | watch; wrist watch |
brooch | broach |
anklet | |
tiara | diadem | worn_on_head
cufflinks | cufflink; cuff links; cuff link |

[Garden Supplies] tool used_outdoors
shovel | spade | made_of_metal
rake | | made_of_metal
watering can | | holds_liquid made_of_plastic
wheelbarrow | wheel barrow | has_wheels made_of_metal
lawn mower | lawnmower; mower | has_wheels has_engine heavy made_of_metal sharp

[Tools] tool made_of_metal found_in_home
hammer | |
screwdriver | screw driver |
wrench | spanner |
pliers | pair of pliers |
drill | power drill; electric drill | electronic
tape measure | measuring tape | fits_in_pocket
"""

_NATURAL_CATEGORIES = {"Animals", "Fruits", "Vegetables", "Nature"}
# category -> the attribute that is True exactly for its members
_CATEGORY_ATTR = {
    "Animals": "animal",
    "Fruits": "fruit",
    "Vegetables": "vegetable",
    "Vehicles": "vehicle",
    "Clothes": "clothing",
    "Furniture": "furniture",
    "Musical Instruments": "musical_instrument",
    "Toys": "toy",
    "Jewelry": "jewelry",
    "Sports": "used_for_sports",
    "Art": "used_for_art",
    "Garden Supplies": "used_in_garden",
}


def _derive(category: str, a: dict) -> dict:
    """Fill in the attributes that follow from the category and the others (keeps _CATALOG
    short)."""
    if category in _CATEGORY_ATTR:
        a[_CATEGORY_ATTR[category]] = True
    a["natural"] = category in _NATURAL_CATEGORIES
    a["man_made"] = not a["natural"]
    a["living"] = (
        a["living"] or a["animal"] or a["plant"]
    )  # plants, fruits and vegetables are living
    a["edible"] = a["edible"] or a["fruit"] or a["vegetable"]
    a["wearable"] = a["wearable"] or a["clothing"] or a["jewelry"]
    a["needs_power"] = a["electronic"]  # runs on electricity (mains or battery)
    a["can_move"] = a["animal"] or (a["vehicle"] and a["has_engine"])  # moves on its own
    a["used_in_kitchen"] = category == "Kitchen Tools" or a["fruit"] or a["vegetable"]
    a["used_in_office"] = a["used_in_office"] or category == "Office Supplies"
    return a


def _parse_catalog(text: str):
    targets, kb = [], {}
    category, defaults = None, set()
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("["):
            category, rest = line[1:].split("]", 1)
            defaults = set(rest.split())
            continue
        name, variants, attrs = (part.strip() for part in line.split("|"))
        values = {k: False for k in ATTRIBUTES}
        for k in defaults:
            values[k] = True
        for tok in attrs.split():
            key, val = (tok[1:], False) if tok.startswith("-") else (tok, True)
            if key not in values:
                raise ValueError(f"unknown attribute {key!r} for {name!r}")
            values[key] = val
        targets.append(name)
        kb[name] = {
            "category": category,
            "variants": [v.strip() for v in variants.split(";") if v.strip()],
            "attrs": _derive(category, values),
        }
    return targets, kb


TARGETS, KB = _parse_catalog(_CATALOG)
TARGETS: list[str]
KB: dict[str, dict]
SUBSET: list[str] = [
    "football",
    "dog",
    "banana",
    "truck",
    "pants",
    "computer",
    "piano",
    "chair",
    "pen",
    "scissors",
]


def names_of(target: str) -> list[str]:
    """The target's name followed by its variants (every phrase that counts as guessing it)."""
    return [target] + list(KB[target]["variants"])


# --------------------------------------------------------------------------------------------------
# Whole-word object mentions, fast (same semantics as envs.core.mentions: the phrase's words in a
# row, the last word optionally followed by "s"/"es").
_PHRASES: dict[str, list[tuple[tuple[str, ...], str]]] = {}
for _obj in TARGETS:
    for _name in names_of(_obj):
        _words = tuple(normalize(_name).split())
        _PHRASES.setdefault(_words[0], []).append((_words, _obj))
        if len(_words) == 1:  # the plural is on the first (only) word
            for _suffix in ("s", "es"):
                _PHRASES.setdefault(_words[0] + _suffix, []).append((_words, _obj))


def _mentioned_objects(question: str) -> set[str]:
    words = normalize(question).split()
    found = set()
    for i, w in enumerate(words):
        for phrase, obj in _PHRASES.get(w, ()):
            n = len(phrase)
            if n == 1:
                found.add(obj)
            elif (
                tuple(words[i + 1 : i + n - 1]) == phrase[1:-1]
                and i + n <= len(words)
                and words[i + n - 1] in (phrase[-1], phrase[-1] + "s", phrase[-1] + "es")
            ):
                found.add(obj)
    return found


def _check_target(target: str) -> None:
    if target not in KB:
        raise ValueError(f"unknown twenty-questions target {target!r}; valid targets: {TARGETS}")


def is_correct_guess(target: str, question: str) -> bool:
    """True iff ``question`` names ``target`` or one of its variants as whole words (multi-word
    names included: "Is the object a tennis racket?" wins "tennis racket") and names no other
    object: "Is it a dog or a cat?" is answered "No." (a policy that lists objects would otherwise
    win without asking anything)."""
    _check_target(target)
    return _mentioned_objects(question) == {target}  # naming several objects at once never wins


# --------------------------------------------------------------------------------------------------
# The question parser: ordered (regex over normalize(question), key, negated). Patterns are tried in
# order and each match is consumed, so specific phrasings ("kitchen tool", "living creature",
# "string instrument") win over general ones ("tool", "living", "instrument"). A key is an
# attribute, "cat:<Category>", or a constant: "_physical" (always Yes, a weak
# match), "_person"/"_abstract" (always No).
_ART = r"(?:a |an |the |your |my |average |typical |grown )*"
_WHO = r"(?:person|human being|human|man|woman|adult|people|me|you|grown up)"
_CAT_WORDS = {
    "Musical Instruments": r"(?:musical )?instruments?",
    "Garden Supplies": r"garden(?:ing)? (?:suppl(?:y|ies)|tools?)",
    "Office Supplies": r"office suppl(?:y|ies)",
    "Kitchen Tools": r"kitchen (?:tools?|utensils?)",
    "Electronics": r"electronics?",
    "Vegetables": r"vegetables?",
    "Furniture": r"furniture",
    "Vehicles": r"vehicles?",
    "Animals": r"animals?",
    "Clothes": r"cloth(?:es|ing)",
    "Jewelry": r"jewel(?:le)?ry",
    "Fruits": r"fruits?",
    "Sports": r"sports?|sporting goods|sports equipment",
    "Nature": r"nature|natural things",
    "Tools": r"tools?",
    "Toys": r"toys?",
    "Art": r"art supplies|arts?",
}
_RULES: list[tuple[str, str, bool]] = [
    (
        rf"\b(?:{w}) (?:category|group|class|section)\b"
        rf"|\bcategor(?:y|ies) (?:of |is |called |named )?(?:the )?(?:{w})\b",
        f"cat:{cat}",
        False,
    )
    for cat, w in _CAT_WORDS.items()
] + [
    # compound categories
    (
        r"\boffice (?:suppl(?:y|ies)|stationery|items?|products?|equipment)\b|\bstationery\b",
        "cat:Office Supplies",
        False,
    ),
    (
        r"\bkitchen (?:tools?|utensils?|gadgets?|implements?|equipment|ware|items?|supplies"
        r"|supply)\b|\butensils?\b|\bkitchenware\b|\bcookware\b",
        "cat:Kitchen Tools",
        False,
    ),
    (
        r"\bgarden(?:ing)? (?:tools?|supplies|supply|equipment|implements?|items?|gear)\b",
        "cat:Garden Supplies",
        False,
    ),
    (
        r"\bart (?:supplies|supply|materials?|tools?|equipment|items?)\b|\bartist s? supplies\b"
        r"|\barts and crafts\b",
        "cat:Art",
        False,
    ),
    (
        r"\bsports? (?:equipment|gear|items?|goods|objects?|tools?)\b"
        r"|\bsporting (?:goods|equipment)\b|\bused (?:for|in|to play|when playing|while playing"
        r"|to do) (?:a |any )?sports?\b|\bsports?\b|\bathletic\b|\bexercis(?:e|es|ing)\b",
        "used_for_sports",
        False,
    ),
    # living / natural / man-made
    (
        r"\bliving (?:creatures?|beings?)\b|\banimals?\b|\bcreatures?\b|\bbeasts?\b|\bfauna\b"
        r"|\bwild ?life\b",
        "animal",
        False,
    ),
    (r"\bliving room\b|\bbedrooms?\b|\bbathrooms?\b", "found_in_home", False),
    (r"\bnon ?living\b|\binanimate\b|\bdead\b|\blifeless\b", "living", True),
    (
        r"\b(?:hu)?man ?made\b|\bmade by (?:hu)?man(?:s|kind)?\b"
        r"|\bmade by (?:people|a person|a human|someone)\b|\bhuman (?:created|built|crafted)\b"
        r"|\bartificial(?:ly)?\b|\bmanufactured\b|\bsynthetic\b|\bmade in (?:a )?factor(?:y|ies)\b"
        r"|\bfactory made\b|\bartifacts?\b|\bartefacts?\b"
        r"|\b(?:created|built|invented) by (?:people|humans|man)\b",
        "man_made",
        False,
    ),
    (
        r"\bnatural(?:ly occurring)?\b|\b(?:found|occurs?|exists?|comes?|from|part of"
        r"|made by) (?:in |from )?(?:the )?nature\b|\bnature\b|\bin the wild\b|\bwilderness\b"
        r"|\bin the woods\b|\bforests?\b|\bjungle\b",
        "natural",
        False,
    ),
    # music
    (r"\bstring(?:ed|s)? instruments?\b|\bstring family\b", "string_instrument", False),
    (
        r"\bwind instruments?\b|\bbrass instruments?\b|\bwoodwind(?: instruments?)?\b"
        r"|\bblow (?:into|in|through) it\b|\bblown\b",
        "wind_instrument",
        False,
    ),
    (r"\bpercussion(?: instruments?)?\b", "percussion_instrument", False),
    (
        r"\bmusical(?: instruments?)?\b|\binstruments?\b"
        r"|\b(?:make|makes|making|play|plays|playing|produce|produces|create) music\b|\bmusic\b",
        "musical_instrument",
        False,
    ),
    # food
    (r"\bcitrus(?: fruits?)?\b", "citrus", False),
    (r"\bberr(?:y|ies)\b", "berry", False),
    (r"\bfruits?\b|\bfruity\b", "fruit", False),
    (r"\bvegetables?\b|\bveggies?\b|\bveg\b", "vegetable", False),
    (
        r"\b(?:used|use it|use|using it) (?:for|to|in|when|while) (?:cook|cooking|bake|baking|fry"
        r"|frying|prepare food|preparing food|make food|making food|prepare meals"
        r"|preparing meals)\b|\bcook(?:ing)? (?:tools?|utensils?|equipment|ware)\b|\bcook with\b"
        r"|\bcook(?:ing)? food\b|\bfood preparation\b|\bprepar(?:e|ing) food\b",
        "used_for_cooking",
        False,
    ),
    (
        r"\bedible\b|\beatable\b|\beaten\b|\b(?:eat|eats|consume|consumes) (?:it|them|this)\b"
        r"|\bto eat\b|\bsomething (?:you|i|we|people|humans|one) (?:can |could |would |usually "
        r"|normally )?(?:eat|consume)\b|\bcan (?:you|i|we|people|humans|one) (?:eat|consume)\b"
        r"|\bfoods?\b|\bsnacks?\b|\bmeals?\b|\bingredients?\b|\bnutritious\b|\btasty\b"
        r"|\bdelicious\b|\bconsumable\b",
        "edible",
        False,
    ),
    (r"\bsweet\b|\bsugary\b|\bdessert\b", "sweet", False),
    # places of use
    (r"\bkitchens?\b", "used_in_kitchen", False),
    (
        r"\boffices?\b|\bwork ?places?\b|\bat work\b|\bschools?\b|\bclassrooms?\b",
        "used_in_office",
        False,
    ),
    (
        r"\bgarden(?:s|ing|er|ers)?\b|\byard(?: ?work)?\b|\bbackyard\b|\blawns?\b",
        "used_in_garden",
        False,
    ),
    (r"\boutdoors?\b|\boutside\b|\bopen air\b", "used_outdoors", False),
    (
        r"\bhouse ?holds?\b|\bhouses?\b|\bhomes?\b|\bindoors?\b|\binside\b|\bapartments?\b",
        "found_in_home",
        False,
    ),
    # vehicles and movement
    (
        r"\bvehicles?\b|\b(?:means|modes?|form|forms) of (?:transport|transportation|travel)\b"
        r"|\btransport(?:ation|s)?\b|\bused (?:for|to) (?:travel|travelling|traveling|get around"
        r"|getting around|commute|commuting)\b|\bdrive\b|\bdriven\b|\bdrives\b"
        r"|\bcarry (?:people|passengers)\b|\bpassengers?\b",
        "vehicle",
        False,
    ),
    (r"\bride\b|\brides\b|\bridden\b|\briding\b|\brideable\b", "rideable", False),
    (
        r"\bsit (?:on|in|down on)\b|\bsat on\b|\bsitting (?:on|in)\b|\bseating\b|\bseats?\b",
        "sit_on",
        False,
    ),
    (r"\bwheels?\b|\bwheeled\b", "has_wheels", False),
    (
        r"\bengines?\b|\bmotors?\b|\bmotori[sz]ed\b|\bfuel\b|\bgasoline\b|\bpetrol\b",
        "has_engine",
        False,
    ),
    (r"\bfl(?:y|ies|ying|ew)\b|\bflight\b|\bairborne\b|\bin the (?:air|sky)\b", "can_fly", False),
    # wearing
    (r"\bjewel(?:le)?ry\b|\bjewels?\b", "jewelry", False),
    (r"\bcloth(?:es|ing)\b|\bgarments?\b|\bapparel\b|\boutfits?\b", "clothing", False),
    (
        r"\b(?:worn|wear|wears|wearing|wear it|go|goes|put it) on (?:your|the|a|one s"
        r"|a person s) head\b|\bheadwear\b|\bon (?:your|the) head\b",
        "worn_on_head",
        False,
    ),
    (
        r"\bwear(?:able|s|ing)?\b|\bworn\b|\bon (?:your|the|the human|a person s) body\b",
        "wearable",
        False,
    ),
    # materials
    (
        r"\bfabrics?\b|\bcloth\b|\btextiles?\b|\bcotton\b|\bwool(?:en|len)?\b",
        "made_of_fabric",
        False,
    ),
    (
        r"\bmetal(?:s|lic)?\b|\bsteel\b|\biron\b|\balumin(?:i)?um\b|\bgold\b|\bsilver\b|\bbrass\b",
        "made_of_metal",
        False,
    ),
    (r"\bwood(?:en)?\b|\btimber\b", "made_of_wood", False),
    (r"\bplastics?\b", "made_of_plastic", False),
    (r"\bglass\b", "made_of_glass", False),
    (r"\bpaper\b|\bcardboard\b", "made_of_paper", False),
    # size and weight
    (rf"\b(?:bigger|larger|taller|longer) than {_ART}{_WHO}\b", "bigger_than_person", False),
    (rf"\b(?:smaller|shorter|tinier) than {_ART}{_WHO}\b", "bigger_than_person", True),
    (r"\b(?:big|large|huge|enormous|giant|massive|gigantic)\b", "bigger_than_person", False),
    (
        r"\bpockets?\b|\bfits? in(?:to)? (?:your|a|my|the|one s|one) (?:hand|palm)\b"
        r"|\b(?:small|tiny|little|miniature)\b",
        "fits_in_pocket",
        False,
    ),
    (r"\bheav(?:y|ier|iest)\b|\bweighs? a lot\b", "heavy", False),
    (
        r"\blight ?weight\b|\b(?:lift|carry|hold|pick up) (?:it )?(?:with|in) (?:one|a single|your"
        r"|a|my) hands?\b|\b(?:hold|lift|carry) it\b|\bpick it up\b|\bhand ?held\b|\bportable\b"
        r"|\bit (?:is )?light\b",
        "heavy",
        True,
    ),
    # electricity
    (
        r"\belectronics?\b|\belectronic devices?\b|\bgadgets?\b|\bappliances?\b|\bdigital\b",
        "electronic",
        False,
    ),
    (
        r"\belectric(?:al|ity|ally)?\b|\bbatter(?:y|ies)\b|\bplug(?:ged|s)?(?: in)?\b"
        r"|\b(?:need|needs|require|requires|use|uses) power\b|\bpower(?:ed)?\b"
        r"|\bcharg(?:e|ed|ing|er)\b|\b(?:turn|switch)(?:ed)? (?:it )?on\b|\boutlets?\b"
        r"|\bsockets?\b",
        "needs_power",
        False,
    ),
    (r"\bscreens?\b|\bdisplays?\b|\bmonitors?\b", "has_screen", False),
    # uses
    (r"\bwrit(?:e|es|ing|ten)\b|\bdraw(?:s|ing)?\b", "used_for_writing", False),
    (
        r"\bart\b|\barts\b|\bartistic\b|\bartwork\b|\bartists?\b|\bpaint(?:s|ing|er)?\b"
        r"|\bcrafts?\b",
        "used_for_art",
        False,
    ),
    (
        r"\bround(?:ed)?\b|\bspher(?:e|ical)\b|\bcircular\b|\bcircle\b|\bball shaped\b",
        "round",
        False,
    ),
    (r"\bballs?\b", "ball", False),
    (r"\btoys?\b|\bplaythings?\b|\b(?:children|kids) play with\b", "toy", False),
    (r"\btools?\b|\bimplements?\b", "tool", False),
    (r"\bfurniture\b|\bfurnishings?\b", "furniture", False),
    # animals and plants
    (r"\bmammals?\b", "mammal", False),
    (r"\bbirds?\b|\bfeathers?\b|\bfeathered\b|\bbeak\b", "bird", False),
    (
        r"\bhold(?:s)? (?:liquids?|water)\b|\b(?:liquids?|water) in it\b|\bpour\b"
        r"|\bcontain(?:s)? (?:liquids?|water)\b",
        "holds_liquid",
        False,
    ),
    (r"\bfish\b|\bfishes\b|\baquatic\b|\blives? in (?:the )?water\b|\bgills\b", "fish", False),
    (r"\breptiles?\b|\bcold blooded\b", "reptile", False),
    (r"\bpets?\b|\bdomestic(?:ated)?\b", "pet", False),
    (r"\blegs?\b", "has_legs", False),
    (
        r"\bmoves? (?:on its own|by itself|itself|around)\b|\bself propelled\b|\bmoves?\b"
        r"|\bmoving\b",
        "can_move",
        False,
    ),
    (
        r"\bunderground\b|\bunder (?:the )?(?:ground|soil)\b|\broot vegetables?\b"
        r"|\bgrows? in the dirt\b",
        "grows_underground",
        False,
    ),
    (
        r"\bplants?\b|\bvegetation\b|\bflora\b|\bgrows? (?:in|from) (?:the )?(?:ground|soil"
        r"|seeds?)\b",
        "plant",
        False,
    ),
    (
        r"\bliving(?: things?| organisms?| beings?)?\b|\balive\b|\banimate\b|\borganisms?\b"
        r"|\bbiological\b|\bgrows?\b|\bbreathes?\b|\blife ?forms?\b|\bha(?:ve|s) life\b",
        "living",
        False,
    ),
    # texture and shape
    (
        r"\bsharp\b|\bblades?\b|\bbladed\b|\bpointy\b|\bcan (?:it|you) cut\b"
        r"|\b(?:for|to) cut(?:ting)?\b|\bcuts?\b",
        "sharp",
        False,
    ),
    (r"\bsoft\b|\bfluffy\b|\bsquishy\b|\bcuddly\b|\bfurry\b", "soft", False),
    (r"\bhard\b|\brigid\b", "soft", True),
    # constants
    (
        r"\b(?:a|an) (?:person|human being|human|man|woman|celebrity|character|people)\b"
        r"|\bsomeone\b|\bsomebody\b",
        "_person",
        False,
    ),
    (
        r"\babstract\b|\bideas?\b|\bconcepts?\b|\bemotions?\b|\bfeelings?\b|\bimaginary\b"
        r"|\bfictional\b",
        "_abstract",
        False,
    ),
    (
        r"\bphysical\b|\btangible\b|\bobjects?\b|\bthings?\b|\bitems?\b|\bexists?\b|\breal\b"
        r"|\bmaterial\b|\btouch(?:ed)?\b|\bvisible\b|\bsee it\b",
        "_physical",
        False,
    ),
]
_COMPILED = [(re.compile(rx), key, neg) for rx, key, neg in _RULES]
_WEAK = {"_physical"}

_AUX = {
    "is",
    "are",
    "am",
    "was",
    "were",
    "does",
    "do",
    "did",
    "can",
    "could",
    "would",
    "will",
    "has",
    "have",
    "had",
    "should",
    "shall",
    "may",
    "might",
    "must",
    "isn",
    "aren",
    "wasn",
    "doesn",
    "don",
    "didn",
    "cannot",
    "cant",
    "couldn",
    "wouldn",
    "won",
    "hasn",
    "haven",
    "shouldn",
    "isnt",
    "doesnt",
    "dont",
}
_WH = {"what", "where", "when", "why", "who", "whom", "whose", "which", "how"}
_FILLER = re.compile(
    r"^ (?:(?:ok|okay|so|well|alright|hmm+|um+|uh+|then|and|next|now|great|thanks|thank you|good"
    r"|right|sure|cool|hi|hello|first|also|finally|question|q|\d+|my (?:next |first |last )?"
    r"question is|let me ask|i want to ask|i d like to ask) )+"
)
_WRAPPER = re.compile(
    r"^ (?:please )?(?:(?:do|can|could|would|will) you (?:please )?(?:know|tell me|say|confirm)"
    r"|tell me|i (?:want|would like|d like) to know|i wonder|i m wondering|i am wondering"
    r"|let me know) (?:if|whether) "
)
_SUBJECT = re.compile(
    r"\b(?:the|this|that|your|my|our) (?:hidden |secret |mystery |mysterious |target )?"
    r"(?:object|thing|item|word|answer)\b"
)
_STOP = set(
    """a an the it its this that these those of in on at for to with by from into as and or not t s
you i we they one people someone me my your our is are am was were be been being do does did can
could would will has have had should shall may might must isn aren wasn doesn don didn cannot cant
couldn wouldn won hasn haven shouldn isnt doesnt dont kind type sort form piece some any something
anything really actually very usually typically generally mostly commonly often always primarily
mainly considered made used use using please just maybe perhaps also there like""".split()
)


@lru_cache(maxsize=8192)
def _parse(question: str):
    """(list of (key, negated), or_mode, inverted) for a question, or None when it is not a yes/no
    question about something the knowledge base models. Independent of the target (cached)."""
    text = normalize(question)
    if not text.strip():
        return None
    text = _FILLER.sub(" ", text)
    wrapped = _WRAPPER.match(text)
    if wrapped:
        text = " " + text[wrapped.end() :]
    words = text.split()
    if not words or words[0] in _WH:
        return None
    if not (wrapped or words[0] in _AUX or (question.rstrip().endswith("?") and _AUX & set(words))):
        return None
    text = re.sub(r"\b(?:whether )?or not\b", " ", text)  # "alive or not" is not a negation
    inverted = len(re.findall(r"\bnot\b", text)) % 2 == 1  # only the explicit word "not" negates
    or_mode = re.search(r"\bor\b", text) is not None
    text = _SUBJECT.sub(" it ", text)
    found = []
    for rx, key, neg in _COMPILED:
        if rx.search(text):
            found.append((key, neg))
            text = rx.sub(" _ ", text)
    if not found:
        return None
    if all(key in _WEAK for key, _ in found):  # "Is it a blue thing?": only the constant understood
        if any(w not in _STOP and w != "_" for w in text.split()):
            return None
    return tuple(found), or_mode, inverted


def _value(target: str, key: str) -> bool:
    if key.startswith("cat:"):
        return KB[target]["category"] == key[4:]
    if key == "_physical":
        return True
    if key in ("_person", "_abstract"):
        return False
    return KB[target]["attrs"][key]


def answer(target: str, question: str) -> str:
    """The knowledge-base oracle: exactly "Yes.", "No." or "Invalid Question." (rules in the module
    doc)."""
    _check_target(target)
    if is_correct_guess(target, question):
        return YES
    if _mentioned_objects(question) - {target}:
        return NO
    parsed = _parse(question)
    if parsed is None:
        return INVALID
    found, or_mode, inverted = parsed
    values = [_value(target, key) != neg for key, neg in found]
    result = any(values) if or_mode else all(values)
    return YES if result != inverted else NO


# --------------------------------------------------------------------------------------------------
# Question banks used by the scripted questioners (envs/scripted.py) and the tokenizer corpus.
USEFUL_QUESTIONS: list[str] = [
    "Is it a living thing?",
    "Is it alive?",
    "Is the object man-made?",
    "Is it a man-made object?",
    "Is it found in nature?",
    "Is it an animal?",
    "Is it a mammal?",
    "Is it a bird?",
    "Is it a pet?",
    "Is it a plant?",
    "Does it grow underground?",
    "Can you eat it?",
    "Is it edible?",
    "Is it a fruit?",
    "Is it a kind of fruit?",
    "Is it a vegetable?",
    "Is it a citrus fruit?",
    "Is it a vehicle?",
    "Does it have wheels?",
    "Does it have an engine?",
    "Can it fly?",
    "Is it something you wear?",
    "Do you wear it on your head?",
    "Is it a piece of clothing?",
    "Is it jewelry?",
    "Is it electronic?",
    "Does it need electricity?",
    "Does it have a screen?",
    "Is it a musical instrument?",
    "Is it a stringed instrument?",
    "Is it a wind instrument?",
    "Is it furniture?",
    "Is it a piece of furniture?",
    "Can you sit on it?",
    "Is it used for sports?",
    "Is it a ball?",
    "Is it a toy?",
    "Is it a tool?",
    "Is it made of metal?",
    "Is it made of wood?",
    "Is it made of fabric?",
    "Is it made of plastic?",
    "Is it made of paper?",
    "Is it bigger than a person?",
    "Can it fit in your pocket?",
    "Is it heavy?",
    "Is it used in the kitchen?",
    "Is it used for cooking?",
    "Is it an office supply?",
    "Is it used in an office?",
    "Is it used in the garden?",
    "Is it used outdoors?",
    "Is it found in a house?",
    "Is it sharp?",
    "Is it used for writing?",
    "Is it used for art?",
    "Is it round?",
    "Is it soft?",
    "Does it have legs?",
    "Can it move on its own?",
]

# One question per category (all in USEFUL_QUESTIONS): the scripted questioner asks these first, in
# a random order, until one is answered "Yes." (a category-first player, like the papers'
# sub-optimal data).
CATEGORY_QUESTIONS: list[str] = [
    "Is it an animal?",
    "Is it a fruit?",
    "Is it a vegetable?",
    "Is it a vehicle?",
    "Is it a piece of clothing?",
    "Is it electronic?",
    "Is it a musical instrument?",
    "Is it a piece of furniture?",
    "Is it an office supply?",
    "Is it used for sports?",
    "Is it used for art?",
    "Is it used in the kitchen?",
    "Is it found in nature?",
    "Is it a toy?",
    "Is it jewelry?",
    "Is it used in the garden?",
    "Is it a tool?",
]

USELESS_QUESTIONS: list[str] = [
    "What color is it?",
    "Where do you find it?",
    "How big is it?",
    "What is it used for?",
    "Who uses it?",
    "Why do people like it?",
    "Tell me the answer.",
    "Can you give me a hint?",
    "Is it a physical object?",
    "Is it a real thing?",
    "Does it exist?",
    "Is it an idea?",
    "Is it an abstract concept?",
    "Is it a person?",
]


_PAIRS = {
    "pants",
    "scissors",
    "socks",
    "shoes",
    "gloves",
    "headphones",
    "earrings",
    "cufflinks",
    "pliers",
}
_MASS = {"broccoli", "lettuce", "spinach", "corn"}


def guess_question(target: str, rng: random.Random) -> str:
    """A natural question that guesses ``target`` (and so wins when it is the secret)."""
    _check_target(target)
    if target in _PAIRS:
        templates = [
            "Is it {n}?",
            "Is it a pair of {n}?",
            "Is the object a pair of {n}?",
            "Are they {n}?",
        ]
    elif target in _MASS:
        templates = ["Is it {n}?", "Is the object {n}?", "Is the hidden object {n}?"]
    else:
        art = "an" if target[0] in "aeiou" else "a"
        templates = [
            f"Is it {art} {{n}}?",
            f"Is the object {art} {{n}}?",
            f"Is the hidden object {art} {{n}}?",
            f"My guess: is it {art} {{n}}?",
        ]
    return rng.choice(templates).format(n=target)


# --------------------------------------------------------------------------------------------------
# Optional LLM oracle (the ArCHer / LMRL-Gym flan-t5 oracle prompt, so those oracles plug in).
def llm_prompt(target: str, question: str) -> str:
    return (
        "You are playing a game called twenty questions with me. The rule of twenty question is "
        "that you are given a hidden word, and I am guessing what the word is within twenty "
        "questions. For every question, if it is an invalid question, you should answer "
        '"Invalid Question.". For any valid question, you should answer either "Yes." or "No.". '
        f'Now the hidden word given to you is "{target}", and the question for the current round '
        f'is "{question}". Your response is:'
    )


def llm_postprocess(target: str, question: str, raw: str) -> str:
    """Map a model's raw reply to exactly one legal answer: a correct guess is "Yes." whatever the
    model said; otherwise the first whole word "yes" or "no" decides ("not"/"know" are not "no");
    anything else is "Invalid Question."."""
    if is_correct_guess(target, question):
        return YES
    m = re.search(r"\b(yes|no)\b", normalize(raw))
    if m is None:
        return INVALID
    return YES if m.group(1) == "yes" else NO


def make(targets=None, max_turns: int = 20, oracle: str = "kb") -> QuestionGame:
    """The Twenty Questions env (name "twenty_questions") over ``targets`` (default: all 157)."""
    targets = list(TARGETS if targets is None else targets)
    bad = [t for t in targets if t not in KB]
    if bad:
        raise ValueError(f"unknown twenty-questions target(s) {bad}; valid targets: {TARGETS}")
    if oracle != "kb":
        if isinstance(oracle, str) and oracle.startswith("hf:") and len(oracle) > 3:
            raise NotImplementedError(
                "the LLM oracle is built by envs.make(name, oracle='hf:...') in envs/__init__.py"
            )
        raise ValueError(f"oracle must be 'kb' or 'hf:<model id or path>', got {oracle!r}")
    return QuestionGame("twenty_questions", targets, answer, is_correct_guess, max_turns=max_turns)
