"""Tiny WikiQA and TrecQA files: their rows and writers."""
from __future__ import annotations


WIKIQA_ROWS = [
    ("how are glacier caves formed ?", "A glacier cave is a cave formed within the ice of a glacier .", 1),
    ("how are glacier caves formed ?", "Glacier caves are often called ice caves .", 0),
    ("how much is 1 tablespoon of water", "This tablespoon has a capacity of about 15 mL .", 0),
    ("how much is 1 tablespoon of water", "In the USA one tablespoon is approximately 15 mL .", 1),
    ("how much is 1 tablespoon of water", "In Australia one tablespoon is 20 mL .", 1),
    ("who wrote the odyssey", "The Odyssey is an ancient Greek epic poem .", 0),
    ("who is the author of hamlet", "Hamlet is a tragedy written by William Shakespeare .", 1),
]


TREC_ROWS = [
    ("What do practitioners of Wicca worship ?", 1, "An estimated <num> Americans practice Wicca , a form of nature worship ."),
    ("What do practitioners of Wicca worship ?", 0, 'The handbook, "a primer", describes Wicca .'),
    ("Who is the author of the book , `` The Iron Lady '' ?", 1, "Hugo Young wrote The Iron Lady , a biography ."),
    ("When was the Berlin Wall built ?", 0, "The wall fell in <num> ."),
    ("When was the Berlin Wall built ?", 1, "The Berlin Wall was built in <num> ."),
]


def write_wikiqa(folder, rows=WIKIQA_ROWS):
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        (folder / f"WikiQA-{split}.txt").write_text("".join(f"{q}\t{a}\t{y}\n" for q, a, y in rows), encoding="utf-8")
    return folder


def write_trecqa(folder, rows=TREC_ROWS):
    import csv

    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        with open(folder / f"{split}.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["qtext", "label", "atext"])
            writer.writerows([q, y, a] for q, y, a in rows)
    return folder
