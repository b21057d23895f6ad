#!/usr/bin/env python3
"""make_ner_task.py: a small named-entity recognition corpus in CoNLL format (one word and its IOB2 tag a
line, blank lines between sentences), for the token classification head's end-to-end test on the CPU.

Sentences are drawn from 24 templates ("{PER} joined {ORG} in {LOC} last year .") filled with person,
organisation and location names of one to three words. The validation sentences use names that never
occur in training (a disjoint half of each name list), so a model only scores by reading the context
and the shape of names, not by remembering them. The corpus, its vocabulary (the lowercased words outside
entities, and single characters and "##" characters, of which every name is made) and a manifest with
the counts are written to OUT_DIR:

    python3 tests/tools/make_ner_task.py OUT_DIR

Deterministic (random.Random(2026)); the standard library only.
"""
import json
import os
import random
import sys

FIRST = ["Anna", "Boris", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiroshi", "Ines", "Jonas", "Keiko",
         "Lars", "Maria", "Nikolai", "Olga", "Pablo", "Quentin", "Rosa", "Stefan", "Tomas", "Ursula", "Viktor",
         "Wanda", "Xavier", "Yara", "Zoltan", "Amira", "Bruno", "Carla", "Diego", "Emil", "Fatima", "Gustav",
         "Hanna", "Igor", "Julia"]
LAST = ["Novak", "Schmidt", "Rossi", "Ivanova", "Garcia", "Tanaka", "Larsen", "Dubois", "Kowalski", "Silva",
        "Jansen", "Horvat", "Nielsen", "Petrov", "Moreau", "Costa", "Weber", "Popescu", "Andersson", "Fischer",
        "Marino", "Kovacs", "Lindqvist", "Brennan", "Okafor", "Haddad", "Sato", "Mendes", "Vogel", "Keller"]
ORG_HEAD = ["Nordic", "Atlas", "Orion", "Vertex", "Helios", "Granite", "Summit", "Cobalt", "Lumen", "Meridian",
            "Pioneer", "Quantum", "Harbor", "Crescent", "Falcon", "Juniper", "Aurora", "Beacon", "Cedar", "Delta"]
ORG_TAIL = ["Systems", "Bank", "Motors", "Labs", "Energy", "Airlines", "Foods", "Media", "Insurance", "Robotics",
            "Pharma", "Logistics"]
CITIES = ["Lisbon", "Oslo", "Krakow", "Nairobi", "Osaka", "Quito", "Tallinn", "Porto", "Lyon", "Graz", "Leeds",
          "Bergen", "Seville", "Turin", "Gdansk", "Utrecht", "Malmo", "Brno", "Split", "Cork", "Basel", "Ghent",
          "Aarhus", "Bilbao", "Varna", "Tartu", "Kaunas", "Debrecen", "Zadar", "Tampere"]
REGIONS = ["New", "North", "South", "Upper", "Lower"]

TEMPLATES = [
    "{PER} joined {ORG} in {LOC} last year .",
    "{PER} moved from {LOC} to {LOC} in the spring .",
    "The board of {ORG} met in {LOC} on Monday .",
    "{ORG} opened a new office in {LOC} .",
    "According to {PER} , {ORG} will hire more engineers .",
    "{PER} and {PER} founded {ORG} together .",
    "Shares of {ORG} rose after {PER} spoke in {LOC} .",
    "{PER} was born in {LOC} and studied there .",
    "A spokesman for {ORG} declined to comment .",
    "{PER} will lead the team at {ORG} from next month .",
    "Heavy rain closed several roads near {LOC} .",
    "{ORG} bought a small firm based in {LOC} .",
    "{PER} said the talks in {LOC} went well .",
    "The mayor of {LOC} thanked {PER} for the donation .",
    "{PER} left {ORG} after ten years .",
    "Flights between {LOC} and {LOC} were cancelled .",
    "{ORG} and {ORG} agreed to merge .",
    "Police in {LOC} are looking for witnesses .",
    "{PER} , who works for {ORG} , won the award .",
    "The festival in {LOC} drew thousands of visitors .",
    "{PER} met {PER} at a conference in {LOC} .",
    "{ORG} reported higher profits this quarter .",
    "Fans waited for hours to see {PER} in {LOC} .",
    "It was a quiet week for {ORG} .",
]


def person(rng, names):
    first, last = names
    if rng.random() < 0.25:
        return [rng.choice(first)]
    if rng.random() < 0.15:
        return [rng.choice(first), rng.choice(first), rng.choice(last)]
    return [rng.choice(first), rng.choice(last)]


def organisation(rng, names):
    head, tail = names
    if rng.random() < 0.2:
        return [rng.choice(head)]
    return [rng.choice(head), rng.choice(tail)]


def location(rng, names):
    if rng.random() < 0.15:
        return [rng.choice(REGIONS), rng.choice(names)]
    return [rng.choice(names)]


def sentence(rng, pools):
    words, tags = [], []
    for piece in rng.choice(TEMPLATES).split():
        kind = {"{PER}": "PER", "{ORG}": "ORG", "{LOC}": "LOC"}.get(piece)
        if kind is None:
            words.append(piece)
            tags.append("O")
            continue
        entity = {"PER": person, "ORG": organisation, "LOC": location}[kind](rng, pools[kind])
        words += entity
        tags += ["B-" + kind] + ["I-" + kind] * (len(entity) - 1)
    return words, tags


def halves(rng, names):
    names = list(names)
    rng.shuffle(names)
    return names[: len(names) // 2], names[len(names) // 2:]


def write_conll(path, sentences):
    with open(path, "w") as f:
        for words, tags in sentences:
            for w, t in zip(words, tags):
                f.write(f"{w} {t}\n")
            f.write("\n")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(2026)
    split = {key: halves(rng, names) for key, names in
             [("first", FIRST), ("last", LAST), ("head", ORG_HEAD), ("tail", ORG_TAIL), ("city", CITIES)]}
    pools = [{"PER": (split["first"][i], split["last"][i]), "ORG": (split["head"][i], split["tail"][i]),
              "LOC": split["city"][i]} for i in (0, 1)]
    train = [sentence(rng, pools[0]) for _ in range(600)]
    validation = [sentence(rng, pools[1]) for _ in range(150)]
    write_conll(os.path.join(out, "train.conll"), train)
    write_conll(os.path.join(out, "validation.conll"), validation)
    # The vocabulary: the special tokens, the words outside entities lowercased, and single characters (as
    # word starts and "##" continuations): every name, seen in training or not, becomes pieces of characters,
    # so that names of the validation set look like the training set's.
    words = sorted({w.lower() for s, tags in train for w, t in zip(s, tags) if t == "O"})
    chars = sorted({c for s, _ in train + validation for w in s for c in w.lower()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    vocab += [c for c in chars if c not in vocab] + ["##" + c for c in chars]
    with open(os.path.join(out, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    entities = lambda data: sum(t.startswith("B-") for _, tags in data for t in tags)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"made_by": "tests/tools/make_ner_task.py", "train_sentences": len(train),
                   "validation_sentences": len(validation), "train_entities": entities(train),
                   "validation_entities": entities(validation), "vocabulary": len(vocab)}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
