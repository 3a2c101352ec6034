"""Generator of the reference model's training corpus.

Everything the reference model knows comes from this module: a small templated grammar that
writes English-like prose about a dozen invented topics, numbered lists, code-ish lines,
arithmetic statements, short factual answers about invented places, and brief reasoning notes.
No text is copied from anywhere; the output is a pure function of the seed.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

__all__ = ["TOPICS", "Document", "Topic", "generate_corpus"]


@dataclass(frozen=True)
class Topic:
    """A prose topic: its lexicon and the prompt keywords that select it."""

    name: str
    keywords: tuple[str, ...]
    nouns: tuple[tuple[str, str], ...]  # (singular, plural)
    adjectives: tuple[str, ...]
    verbs: tuple[tuple[str, str], ...]  # (third person singular, plural)
    places: tuple[str, ...]
    roles: tuple[str, ...]
    adverbs: tuple[str, ...] = (
        "slowly",
        "quietly",
        "steadily",
        "carefully",
        "often",
        "rarely",
        "gently",
        "quickly",
    )


def _n(*words: str) -> tuple[tuple[str, str], ...]:
    out = []
    for w in words:
        if "/" in w:
            s, p = w.split("/")
        elif w.endswith(("s", "sh", "ch", "x")):
            s, p = w, w + "es"
        elif w.endswith("y") and w[-2] not in "aeiou":
            s, p = w, w[:-1] + "ies"
        else:
            s, p = w, w + "s"
        out.append((s, p))
    return tuple(out)


def _v(*words: str) -> tuple[tuple[str, str], ...]:
    out = []
    for w in words:
        if w.endswith(("s", "sh", "ch", "x", "o")):
            out.append((w + "es", w))
        elif w.endswith("y") and w[-2] not in "aeiou":
            out.append((w[:-1] + "ies", w))
        else:
            out.append((w + "s", w))
    return tuple(out)


TOPICS: tuple[Topic, ...] = (
    Topic(
        "rivers",
        ("river", "rivers", "water", "stream", "flood", "delta", "valley"),
        _n("river", "stream", "bank", "delta", "current", "bridge", "flood", "channel", "valley"),
        ("wide", "shallow", "muddy", "clear", "winding", "cold", "ancient", "restless"),
        _v("carry", "shape", "feed", "flood", "cross", "drain", "cut", "join"),
        ("valley", "lowland", "delta", "plain", "canyon"),
        ("fisher", "boatman", "miller", "surveyor", "farmer"),
    ),
    Topic(
        "gardens",
        ("garden", "gardens", "plant", "plants", "soil", "flower", "flowers", "grow", "seed"),
        _n("garden", "seed", "root", "flower", "hedge", "bed", "leaf/leaves", "soil", "path"),
        ("green", "fertile", "dry", "tidy", "wild", "small", "sunny", "shaded"),
        _v("grow", "need", "shade", "feed", "cover", "hold", "bloom", "spread"),
        ("courtyard", "orchard", "greenhouse", "meadow", "allotment"),
        ("gardener", "botanist", "grower", "neighbour", "visitor"),
    ),
    Topic(
        "computers",
        (
            "computer",
            "computers",
            "software",
            "network",
            "server",
            "program",
            "data",
            "memory",
            "cache",
        ),
        _n("server", "network", "cache", "request", "program", "disk", "packet", "thread"),
        ("fast", "reliable", "busy", "idle", "remote", "shared", "simple", "modern"),
        _v("store", "send", "handle", "process", "load", "check", "schedule", "return"),
        ("data centre", "laboratory", "office", "cluster", "cloud"),
        ("engineer", "operator", "developer", "tester", "student"),
    ),
    Topic(
        "cooking",
        ("cook", "cooking", "recipe", "bread", "food", "kitchen", "soup", "bake", "meal"),
        _n("recipe", "oven", "loaf/loaves", "soup", "pan", "spice", "onion", "sauce", "dough"),
        ("warm", "fresh", "salty", "golden", "thick", "simple", "rich", "crisp"),
        _v("need", "bake", "simmer", "season", "rest", "brown", "soften", "improve"),
        ("kitchen", "bakery", "market", "farmhouse", "canteen"),
        ("cook", "baker", "chef", "student", "host"),
    ),
    Topic(
        "music",
        ("music", "song", "songs", "melody", "piano", "orchestra", "rhythm", "sing", "guitar"),
        _n("melody", "rhythm", "chord", "song", "drum", "violin", "choir", "note", "piano"),
        ("soft", "loud", "bright", "gentle", "steady", "complex", "lively", "slow"),
        _v("carry", "follow", "repeat", "lift", "shape", "echo", "support", "open"),
        ("concert hall", "studio", "church", "festival", "classroom"),
        ("composer", "singer", "drummer", "listener", "teacher"),
    ),
    Topic(
        "railways",
        ("train", "trains", "railway", "railways", "station", "track", "locomotive", "travel"),
        _n("train", "track", "station", "signal", "carriage", "platform", "tunnel", "timetable"),
        ("long", "punctual", "crowded", "narrow", "steep", "electric", "old", "busy"),
        _v("connect", "carry", "reach", "cross", "serve", "wait", "climb", "link"),
        ("junction", "city", "mountain pass", "harbour", "suburb"),
        ("driver", "guard", "passenger", "engineer", "planner"),
    ),
    Topic(
        "weather",
        ("weather", "rain", "storm", "wind", "cloud", "clouds", "climate", "snow", "forecast"),
        _n("cloud", "storm", "wind", "front", "shower", "season", "forecast", "breeze", "frost"),
        ("humid", "cold", "calm", "stormy", "mild", "grey", "sudden", "dry"),
        _v("bring", "move", "cool", "warm", "change", "cover", "pass", "gather"),
        ("coast", "hill country", "plain", "island", "town"),
        ("forecaster", "sailor", "farmer", "pilot", "walker"),
    ),
    Topic(
        "bees",
        ("bee", "bees", "hive", "honey", "insect", "insects", "pollen", "swarm"),
        _n("bee", "hive", "queen", "comb", "flower", "worker", "swarm", "nectar", "colony"),
        ("busy", "golden", "sweet", "crowded", "healthy", "small", "warm", "careful"),
        _v("collect", "guard", "build", "visit", "feed", "warm", "protect", "share"),
        ("meadow", "orchard", "hillside", "garden", "field"),
        ("beekeeper", "farmer", "scientist", "child", "visitor"),
    ),
    Topic(
        "astronomy",
        ("star", "stars", "planet", "planets", "moon", "space", "telescope", "sky", "galaxy"),
        _n("star", "planet", "moon", "orbit", "comet", "telescope", "galaxy", "cloud", "light"),
        ("distant", "bright", "faint", "massive", "cold", "young", "silent", "red"),
        _v("circle", "reflect", "pull", "shine", "cross", "warm", "turn", "hide"),
        ("night sky", "observatory", "desert", "mountain top", "southern sky"),
        ("astronomer", "observer", "student", "navigator", "scientist"),
    ),
    Topic(
        "libraries",
        ("library", "libraries", "book", "books", "reading", "novel", "librarian", "author"),
        _n("book", "shelf/shelves", "page", "story", "reader", "index", "chapter", "archive"),
        ("quiet", "old", "thick", "rare", "useful", "patient", "curious", "careful"),
        _v("hold", "guide", "keep", "open", "explain", "record", "teach", "reward"),
        ("reading room", "town library", "school", "archive", "study"),
        ("librarian", "reader", "author", "student", "clerk"),
    ),
    Topic(
        "oceans",
        ("ocean", "oceans", "sea", "seas", "wave", "waves", "tide", "ship", "coral", "whale"),
        _n("wave", "tide", "reef", "ship", "current", "whale", "harbour", "shore", "coral"),
        ("deep", "salty", "calm", "rough", "blue", "vast", "warm", "dark"),
        _v("carry", "reach", "shape", "hide", "feed", "move", "break", "return"),
        ("open sea", "coast", "bay", "harbour", "island"),
        ("sailor", "diver", "captain", "fisher", "researcher"),
    ),
    Topic(
        "mountains",
        ("mountain", "mountains", "hill", "hills", "peak", "climb", "rock", "glacier", "hiking"),
        _n("peak", "ridge", "glacier", "rock", "slope", "summit", "trail", "cliff", "pass/passes"),
        ("high", "steep", "rocky", "icy", "remote", "quiet", "broad", "windy"),
        _v("rise", "hold", "block", "shelter", "guard", "face", "shape", "overlook"),
        ("range", "highland", "valley", "border", "north"),
        ("climber", "guide", "shepherd", "hiker", "geologist"),
    ),
)

_CONNECT = (
    "In many cases,",
    "For this reason,",
    "At the same time,",
    "Over the years,",
    "In practice,",
    "As a result,",
    "On most days,",
    "Even so,",
)

_LONG_OPEN = (
    "{P_n} are among the most {adj} things in the {place}.",
    "Anyone who studies {p_n} soon learns that every {n} has a story.",
    "The {adj} {n} is a good place to begin.",
    "There is much to say about {p_n}, and each {role} sees them differently.",
)


@dataclass
class Document:
    """One training document: the topic table it feeds and its text (without chat markup)."""

    table: str
    text: str
    kind: str = "prose"
    meta: dict[str, str] = field(default_factory=dict)


def _plural(word: str) -> str:
    if word.endswith("man"):
        return word[:-3] + "men"
    if word == "child":
        return "children"
    return word + "s"


_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeiou])")


def _articles(text: str) -> str:
    return _A_BEFORE_VOWEL.sub(lambda m: m.group(1) + "n ", text)


class _Writer:
    def __init__(self, rng: random.Random, topic: Topic) -> None:
        self.r = rng
        self.t = topic

    def pick(self, seq: tuple[str, ...]) -> str:
        return self.r.choice(seq)

    def slots(self) -> dict[str, str]:
        t, r = self.t, self.r
        n1, n2 = r.sample(t.nouns, 2)
        v1, v2 = r.sample(t.verbs, 2)
        a1, a2 = r.sample(t.adjectives, 2)
        return {
            "n": n1[0],
            "p_n": n1[1],
            "P_n": n1[1].capitalize(),
            "N": n1[0].capitalize(),
            "n2": n2[0],
            "p_n2": n2[1],
            "v": v1[0],
            "pv": v1[1],
            "v2": v2[0],
            "pv2": v2[1],
            "adj": a1,
            "adj2": a2,
            "place": self.pick(t.places),
            "role": self.pick(t.roles),
            "roles": _plural(self.pick(t.roles)),
            "adv": self.pick(t.adverbs),
            "conn": self.pick(_CONNECT),
        }

    def sentence(self) -> str:
        tmpl = self.r.choice(
            (
                "The {adj} {n} {v} the {n2} near the {place}.",
                "In the {place}, {p_n} {pv} {adv} when the {n2} is {adj}.",
                "A good {role} knows that the {n} {v} {adv}.",
                "This is why the {n} matters to every {role}.",
                "Over time, the {n} {v} the {n2} and becomes more {adj}.",
                "Most {roles} agree that {p_n} are {adj} and {adj2}.",
                "When the {n} {v} the {n2}, the {place} changes {adv}.",
                "{conn} {p_n} {pv} the {p_n2} of the {place}.",
                "{conn} the {role} watches the {n} and the {n2} together.",
                "Each {n} {v} a {adj} {n2}, and the {role} takes note.",
                "{P_n} {pv} {adv}, so the {role} must plan ahead.",
                "It is worth noting that {p_n} {pv} the {n2} in the {place}.",
                "The {role} said that a {adj} {n} {v} the {n2} every season.",
                "Without the {n2}, the {n} would not be so {adj}.",
                "{N} and {n2} work together in the {place}.",
                "Some {p_n} are {adj}, while others are {adj2}.",
            )
        )
        s = _articles(tmpl.format(**self.slots()))
        return s[0].upper() + s[1:]

    def paragraph(self, lo: int, hi: int) -> str:
        return " ".join(self.sentence() for _ in range(self.r.randint(lo, hi)))

    def essay(self) -> str:
        first = self.r.choice(_LONG_OPEN).format(**self.slots())
        paras = [first + " " + self.paragraph(3, 5)]
        for _ in range(self.r.randint(1, 3)):
            paras.append(self.paragraph(3, 6))
        return "\n\n".join(paras)

    def short_answer(self) -> str:
        return self.paragraph(1, 3)

    def numbered_list(self) -> str:
        n = self.r.randint(3, 9)
        return "\n".join(f"{i}. {self.sentence()}" for i in range(1, n + 1))

    def reasoning(self) -> str:
        s = self.slots()
        lines = self.r.sample(
            (
                "The user is asking about {p_n}.",
                "I should explain how the {n} {v} the {n2}.",
                "A short and clear answer will work best here.",
                "Let me think about what matters most for a {role}.",
                "I will mention the {place} and one example.",
                "The key point is that {p_n} are {adj}.",
            ),
            self.r.randint(2, 3),
        )
        return " ".join(x.format(**s) for x in lines)


_SYL = ("ka", "lo", "ri", "ven", "mar", "to", "sel", "dun", "ara", "bel", "os", "tir", "an", "qu")


def _name(r: random.Random) -> str:
    return "".join(r.choice(_SYL) for _ in range(r.randint(2, 3))).capitalize()


_NUMWORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]


def _arithmetic(r: random.Random) -> str:
    out = []
    for _ in range(r.randint(2, 5)):
        a, b = r.randint(1, 10), r.randint(1, 10)
        kind = r.randint(0, 4)
        if kind == 0:
            out.append(
                f"{_NUMWORDS[a].capitalize()} plus {_NUMWORDS[b]} equals {_NUMWORDS[a + b]}."
            )
        elif kind == 1:
            out.append(f"{a} + {b} = {a + b}, so the sum of {a} and {b} is {a + b}.")
        elif kind == 2:
            hi, lo = max(a, b), min(a, b)
            out.append(f"If you take {lo} away from {hi}, you are left with {hi - lo}.")
        elif kind == 3:
            out.append(f"{a} times {b} is {a * b}, because {a} groups of {b} make {a * b}.")
        else:
            out.append(f"To check the answer, add {a} and {b} again and compare the totals.")
    return " ".join(out)


_IDS = ("total", "items", "count", "value", "result", "record", "name", "size", "buffer", "row")
_FNS = ("compute", "load", "parse", "update", "count", "format", "merge", "check", "build")


def _code(r: random.Random) -> str:
    fn = f"{r.choice(_FNS)}_{r.choice(_IDS)}"
    arg, acc = r.sample(_IDS, 2)
    lines = [
        f"def {fn}({arg}):",
        f'    """Return the {acc} for the given {arg}."""',
        f"    {acc} = 0",
        f"    for item in {arg}:",
    ]
    body = r.choice(
        (
            [f"        {acc} += item.{r.choice(_IDS)}"],
            ["        if item is None:", "            continue", f"        {acc} += 1"],
            [f"        {acc} = max({acc}, len(item))"],
        )
    )
    lines += body
    lines.append(f"    return {acc}")
    intro = r.choice(
        (
            f"Here is a small function that computes the {acc}.",
            f"The following code walks over the {arg} and returns the {acc}.",
            "This version keeps the loop simple and easy to test.",
        )
    )
    outro = r.choice(
        (
            f"The function returns the {acc} once the loop ends.",
            f"Each item in {arg} is visited exactly once.",
            "You can call it with any list of records.",
        )
    )
    return intro + "\n\n" + "\n".join(lines) + "\n\n" + outro


def _facts(r: random.Random, world: list[tuple[str, str, str]]) -> str:
    country, city, river = r.choice(world)
    options = (
        f"The capital of {country} is {city}.",
        f"{city} is the largest city in {country}.",
        f"The {river} river runs through {city}, the capital of {country}.",
        f"{country} is known for the {river} river and its old harbour.",
        f"Most people in {country} live near the {river} river.",
        f"{city} was founded on the banks of the {river} river.",
    )
    return " ".join(r.sample(options, r.randint(1, 3)))


def generate_corpus(seed: int = 2024, docs_per_topic: int = 260) -> list[Document]:
    """Return the full training corpus as a deterministic list of documents."""
    r = random.Random(seed)
    docs: list[Document] = []
    for topic in TOPICS:
        w = _Writer(r, topic)
        for i in range(docs_per_topic):
            kind = i % 4
            if kind == 0:
                docs.append(Document(topic.name, w.essay(), "essay"))
            elif kind == 1:
                docs.append(Document(topic.name, w.short_answer(), "short"))
            elif kind == 2:
                docs.append(Document(f"{topic.name}:list", w.numbered_list(), "list"))
            else:
                docs.append(Document(topic.name, w.paragraph(2, 5), "prose"))
            if i % 2 == 0:
                docs.append(Document(f"{topic.name}:reasoning", w.reasoning(), "reasoning"))
    world = [(_name(r), _name(r), _name(r)) for _ in range(40)]
    for _ in range(docs_per_topic * 2):
        docs.append(Document("code", _code(r), "code"))
        docs.append(Document("arithmetic", _arithmetic(r), "arithmetic"))
        docs.append(Document("facts", _facts(r, world), "facts"))
    for _ in range(docs_per_topic // 2):
        for table, notes in _PLAIN_REASONING.items():
            picked = r.sample(notes, r.randint(2, 3))
            docs.append(Document(f"{table}:reasoning", " ".join(picked), "reasoning"))
    return docs


_PLAIN_REASONING: dict[str, tuple[str, ...]] = {
    "code": (
        "The user wants a small function.",
        "I should keep the loop simple and return the result.",
        "A short docstring will help the reader.",
        "Let me think about which names to use.",
        "The function should visit each item once.",
    ),
    "arithmetic": (
        "The user is asking for a sum.",
        "I should add the numbers and check the total.",
        "Let me count carefully before I answer.",
        "A short answer with the result will work best.",
        "I will show the numbers and the result.",
    ),
    "facts": (
        "The user is asking about a place.",
        "I should name the capital and the river.",
        "A short and direct answer will work best here.",
        "Let me recall what is known about the country.",
        "One or two facts will be enough.",
    ),
}
