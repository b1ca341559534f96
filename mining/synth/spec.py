"""What the synthetic corpus shows and how it lies: its labels, its noise, and the miner's
rules its expected pools assume.

Labels: `OBJECT_ATTRIBUTES` and `HUMAN_ATTRIBUTES` (each super-attribute a channel of the
drawing), the 52 categories of `OBJECTS` (one glyph each) and counts 1–10. An attribute goes
only on a category that can show it (`CAN_SHOW`), never with one sharing its channel
(`CONFLICTS`). Noise comes in proportions a miner must survive (`P`), noted in
`synth_truth.json` with the ids it touched (`NOISE_EFFECTS`: what the miner should make of
each); the expected pools follow the miner's `RULES`.
"""

from __future__ import annotations

from vprom.mining.synth.glyphs import GLYPHS
from vprom.mining.synth.paint import MATERIALS

from vprom.domain import COUNTS, MIN_SIDE
from vprom.errors import VpromError

# the labels the corpus renders (all must be in the miner's vocabulary)
OBJECT_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "color": ("red", "green", "blue", "yellow", "orange", "purple", "pink", "white", "black",
              "brown", "gray"),
    "material": tuple(MATERIALS),
    "scene": ("sunny", "cloudy", "snowy", "rainy", "foggy"),
    "plant condition": ("leafy", "bare", "dry", "blooming", "dead"),
    "action": ("parked", "flying", "hanging", "floating"),
    "shape": ("round", "square", "rectangular", "triangular", "curved"),
    "texture": ("striped", "spotted", "checkered", "plaid", "smooth", "furry"),
}
HUMAN_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "age": ("young", "old"),
    "hair style": ("bald", "curly", "blond"),
    "clothing style": ("casual", "formal", "sleeveless"),
    "gender": ("male", "female"),
    "action": ("standing", "sitting", "walking", "running"),
    "clothing color": ("red", "blue", "green", "white", "black", "yellow", "pink", "orange",
                       "gray", "brown"),
}
OBJECTS: tuple[str, ...] = tuple(GLYPHS)
EXCLUDED_OBJECTS = ("sky", "road", "water", "ground", "wall", "grass")
SEMANTIC_ATTRIBUTES = ("open", "empty")
CONTAINERS = ("box", "cup", "bag", "bottle", "book", "bowl", "umbrella", "vase")
#: Which categories can show an attribute (absent: any category).
CAN_SHOW = {
    **{p: ("tree", "flower") for p in OBJECT_ATTRIBUTES["plant condition"]},
    "parked": ("car", "truck", "bicycle"), "flying": ("bird", "kite", "airplane"),
    "hanging": ("lamp", "sign", "clock", "bag", "hat", "flag"),
    "floating": ("ball", "bottle", "box", "book", "boat", "surfboard"),
}
#: Super-attributes drawn on the same channel cannot be combined on one object.
CONFLICTS = {
    "material": {"color", "texture", "plant condition"},
    "plant condition": {"color", "material", "texture", "action"},
    "color": {"material", "plant condition"},
    "texture": {"material", "plant condition"},
    "action": {"plant condition"},
}
COUNT_COLORS = ("red", "green", "blue", "yellow", "orange", "purple", "pink", "brown", "black")
NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
ALL_OBJECT_ATTRIBUTES = tuple((s, a) for s, attrs in OBJECT_ATTRIBUTES.items() for a in attrs)

#: Variants a miner must map back (checked against the vocabulary at start).
NAME_VARIANTS = {"dog": ("puppy",), "car": ("automobile", "sedan"), "tree": ("palm tree",),
                 "bird": ("pigeon",), "cat": ("kitten",), "flower": ("rose",)}
ATTRIBUTE_VARIANTS = {"gray": ("grey",), "wooden": ("wood",), "spotted": ("polka dot",),
                      "bare": ("leafless",), "round": ("circular",), "hanging": ("hung",),
                      "cloudy": ("overcast",), "furry": ("fuzzy",), "metal": ("metallic",),
                      "foggy": ("misty",), "old": ("elderly",), "blond": ("blonde",),
                      "sitting": ("seated",)}

#: Human attributes of every person (of distinct super-attributes; its gender also shows in
#: its name unless it is called "person").
HUMAN_LABELS = 3
#: Of them, drawn from the image's generator (the rest from the person's own, in `plan`).
BASE_LABELS = 2

#: Entity kinds (weights) and noise probabilities, applied where the noise can occur (a name
#: variant where a category has one, outside-image boxes in edge cells, ...).
KIND_WEIGHTS = {"attribute_object": 0.5, "person": 0.25, "count": 0.17, "plain_object": 0.08}
P = {
    "second_attribute": 0.35, "name_variant": 0.16, "plural_name": 0.06, "case_space": 0.08,
    "attribute_variant": 0.24, "attribute_case_space": 0.04, "impure": 0.04, "semantic": 0.25,
    "small": 0.05, "outside": 0.1, "merged": 0.04, "non_count_phrase": 0.5, "count_glyph_objects": 0.4,
    "sky": 0.5, "ground": 0.5, "excluded_attributes": 0.4, "null_attributes": 0.5,
    "person_name": 0.25,
}

NOISE_EFFECTS = {
    "name_variant": "kept: synonym/subtype mapped to its category",
    "plural_name": "kept: plural mapped to its singular",
    "case_space": "kept: upper case and stray spaces normalised",
    "attribute_variant": "kept: attribute spelling/synonym mapped to its canonical label",
    "no_attributes_key": "kept in the object pool; no attribute crop",
    "null_attributes": "kept in the object pool; no attribute crop",
    "outside_image": f"kept: box clipped to the image (still >= {MIN_SIDE} px)",
    "small_object": f"dropped from every pool (a side under {MIN_SIDE} px)",
    "small_region": f"dropped: count region with a side under {MIN_SIDE} px",
    "impure_color": "dropped from the color pool (two colours); kept in the object pool",
    "semantic_attribute": "attribute ignored (excluded); the object's other crops kept",
    "merged_duplicate": "folded into the survivor (its merged_object_ids): no crop of its own",
    "excluded_object": "dropped from every pool (background object)",
    "non_count_number": "no count crop: the number is not a count",
    "no_synset": "kept: synsets are not read (an empty list, as VG has for unmapped names)",
    "two_names": "kept: both names map to the one category (no impurity, same labels)",
}


#: The miner's rules the expected pools assume (written into synth_truth.json).
RULES = [
    "boxes are clipped to the image; a box with a side under min_side px feeds no pool",
    "an object whose name is excluded (sky, road, water, ground, wall, grass) feeds no pool",
    "an object whose canonical name is a category gives one crop to the object pool",
    ("person words (man, woman, boy, girl, person) take the human attribute table, other "
    "objects the object attribute table"),
    ("a super-attribute gives a crop only when the object has exactly one attribute of it "
    "(two colours: impure, no colour crop)"),
    "excluded (semantic) attributes such as open and empty are ignored",
    ("an attributes.json record whose id is in a survivor's merged_object_ids folds into the "
    "survivor (same labels here), giving no crop of its own"),
    (f"a region gives a count crop when its phrase states a count {COUNTS[0]}-{COUNTS[-1]} of "
    "an object; numbers in times, ages and labels are not counts"),
]


def plural(noun: str) -> str:
    """The plural an annotator writes ("boxes", "dogs"); the vocabulary must map it back."""
    return noun + ("es" if noun.endswith(("x", "s", "ch", "sh")) else "s")


def check_vocabulary() -> None:
    """Refuse to write a corpus whose labels the miner's vocabulary would not recover."""
    from vprom.mining.vocab import load_vocabulary

    v = load_vocabulary()
    problems = []
    for table, labels in ((v.object_attributes, OBJECT_ATTRIBUTES), (v.human_attributes, HUMAN_ATTRIBUTES)):
        for sup, attrs in labels.items():
            problems += [f"attribute {a!r} ({sup})" for a in attrs if table.get(a) != sup]
    problems += [f"object {o!r}" for o in OBJECTS if o not in v.objects]
    problems += [f"person word {p!r}" for p in ("man", "woman", "boy", "girl", "person")
                 if p not in v.person_words]
    problems += [f"excluded object {o!r}" for o in EXCLUDED_OBJECTS if o not in v.excluded_objects]
    problems += [f"semantic attribute {a!r}" for a in SEMANTIC_ATTRIBUTES if a not in v.excluded_attributes]
    for canon, variants in (*NAME_VARIANTS.items(), *ATTRIBUTE_VARIANTS.items(),
                            *((o, (plural(o),)) for o in OBJECTS)):
        problems += [f"variant {x!r} -> {canon!r}" for x in variants if v.canonical(x) != canon]
    if problems:
        raise VpromError("mining/data vocabulary lacks labels the synthetic corpus renders: "
                         + "; ".join(problems) + " — restore those entries in mining/data/*.json")
