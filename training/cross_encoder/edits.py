"""Rule-based minimal edits (ours, not in the paper) for the cross-encoder's phase A: a training sentence
with one word or phrase changed by the stress suite's perturbation types (negation, increase/decrease,
comparative, also with its two sides swapped, quantifier, modal, direction, number, role swap of two noun
phrases) is a negative; a meaning-preserving rewrite (contractions, synonyms, the converse comparative,
"A and B" -> "B and A", punctuation) a positive. No stress-suite pair is used."""
from __future__ import annotations

import random
import re
from typing import Sequence

from training.cross_encoder.data import LabelledPair

# word flips by the stress suite's perturbation types; `perturb` picks a type first, then a rule, so
# that a sentence offering many antonyms does not drown the rarer types
_INC_DEC = [
    ("increase", "decrease"), ("increased", "decreased"), ("raise", "lower"), ("add", "remove"),
    ("added", "removed"), ("enable", "disable"), ("activate", "deactivate"), ("lock", "unlock"),
    ("open", "close"), ("start", "stop"), ("buy", "sell"), ("deposit", "withdraw"), ("accept", "decline"),
    ("extend", "shorten"), ("upgrade", "downgrade"), ("join", "leave"), ("allowed", "forbidden"),
    ("possible", "impossible"), ("legal", "illegal"), ("win", "lose"), ("true", "false"), ("old", "new"),
    ("cheap", "expensive"), ("private", "public"), ("early", "late"), ("first", "last"), ("before", "after"),
    ("maximum", "minimum"), ("include", "exclude"), ("included", "excluded"), ("approve", "reject"),
    ("approved", "rejected"), ("charge", "refund"), ("charged", "refunded"), ("connect", "disconnect"),
    ("subscribe", "unsubscribe"), ("hide", "show"), ("pause", "resume"), ("block", "unblock"),
]
_COMPARATIVE = [
    ("more", "less"), ("higher", "lower"), ("better", "worse"), ("faster", "slower"), ("bigger", "smaller"),
    ("larger", "smaller"), ("cheaper", "pricier"), ("longer", "shorter"), ("greater", "smaller"),
    ("earlier", "later"), ("easier", "harder"), ("safer", "riskier"), ("newer", "older"), ("best", "worst"),
    ("highest", "lowest"), ("cheapest", "most expensive"), ("fastest", "slowest"), ("more", "fewer"),
]
_QUANTIFIER = [
    ("all", "some"), ("all", "none of"), ("every", "no"), ("every", "some"), ("always", "never"),
    ("always", "sometimes"), ("any", "no"), ("most", "few"), ("both", "neither of"), ("everyone", "no one"),
    ("everything", "nothing"), ("each", "no"), ("many", "few"),
]
_MODAL = [
    ("must", "might"), ("must", "can"), ("have to", "can"), ("need to", "can"),
    ("required", "optional"), ("required", "allowed"), ("mandatory", "optional"),
    ("should", "could"), ("will", "might"), ("can", "must"), ("may", "must"), ("allowed to", "required to"),
]
_DIRECTION = [
    ("north", "south"), ("east", "west"), ("up", "down"), ("left", "right"), ("incoming", "outgoing"),
    ("import", "export"), ("upload", "download"), ("send", "receive"), ("sent", "received"),
    ("above", "below"), ("inbound", "outbound"), ("arrivals", "departures"), ("into", "out of"),
    ("log in", "log out"), ("sign in", "sign out"), ("turn on", "turn off"), ("check in", "check out"),
    ("switch on", "switch off"), ("opt in", "opt out"), ("top up", "cash out"), ("upstairs", "downstairs"),
]
# prepositions alone are too noisy to flip ("friends in real life"): only the phrases above
_FLIPS = {"inc_dec": _INC_DEC, "comparative": _COMPARATIVE, "quantifier": _QUANTIFIER, "modal": _MODAL,
          "direction": _DIRECTION}
_COMPARATIVE_OF = {a: b for a, b in _COMPARATIVE} | {b: a for a, b in _COMPARATIVE} | {"more expensive": "cheaper"}
_DETERMINERS = r"(?:my|the|a|an|your|our|their|his|her)"
_AUX = {"is", "are", "was", "were", "can", "could", "should", "will", "would", "do", "does", "did", "has", "have", "must"}
_NT = {"can": "can't", "will": "won't", "do": "don't", "does": "doesn't", "did": "didn't", "is": "isn't",
       "are": "aren't", "was": "wasn't", "were": "weren't", "could": "couldn't", "should": "shouldn't",
       "would": "wouldn't", "has": "hasn't", "have": "haven't", "must": "mustn't"}
_UN_NT = {v: k for k, v in _NT.items()} | {"cannot": "can", "dont": "do", "cant": "can"}
_PRONOUNS = {"i", "you", "we", "they", "he", "she", "it"}
_WH = {"what", "which", "who", "whom", "whose", "where", "when", "why", "how"}
_NEGATABLE_VERBS = {"want", "need", "have", "like", "know", "see", "understand", "remember", "recognize",
                    "recognise", "agree", "accept", "own", "use", "care", "mind", "think", "get", "receive"}
_NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
_SAME_MEANING = [
    (r"\bdo not\b", "don't"), (r"\bdon't\b", "do not"), (r"\bcannot\b", "can't"), (r"\bcan't\b", "cannot"),
    (r"\bwhat is\b", "what's"), (r"\bwhat's\b", "what is"), (r"\bi am\b", "i'm"), (r"\bi'm\b", "i am"),
    (r"^how do i\b", "how can i"), (r"^how can i\b", "how do i"), (r"^can you\b", "could you"),
    (r"^could you\b", "can you"), (r"\bi want to\b", "i would like to"), (r"\bi would like to\b", "i want to"),
    (r"\bis it possible to\b", "can i"), (r"\bhelp me\b", "help me please"),
    (r"\bdo i have to\b", "do i need to"), (r"\bdo i need to\b", "do i have to"), (r"\bmust i\b", "do i have to"),
    (r"\bis it required\b", "is it mandatory"), (r"\bquickly\b", "fast"), (r"\bpurchase\b", "buy"),
    (r"\bfunds\b", "money"), (r"\bmoney\b", "funds"), (r"\bphone\b", "mobile"), (r"\bcancel\b", "call off"),
    (r"\bget\b", "receive"), (r"\breceive\b", "get"), (r"\bfix\b", "repair"), (r"\bstart\b", "begin"),
]


def _words(text: str) -> list[str]:
    return text.split()


def _match_case(src: str, new: str) -> str:
    return new.capitalize() if src[:1].isupper() else new


def perturb(text: str, rng: random.Random) -> tuple[str, str] | None:
    """One meaning-changing edit of `text`: (kind, new text), or None when no rule applies."""
    words = _words(text)
    low = [re.sub(r"[^\w']", "", w.lower()) for w in words]
    options: list[tuple[str, str]] = []
    # negation: remove an existing one; else "i need" -> "i don't need", "do i need" -> "do i not need",
    # "my card is blocked" -> "my card is not blocked" (never right after a wh-word: "what is not the ...")
    for i, w in enumerate(low):
        if w in _UN_NT:
            new = words[:i] + [_match_case(words[i], _UN_NT[w])] + words[i + 1:]
            options.append(("negation", " ".join(new)))
            break
        if w == "not" or (w == "no" and i > 0):
            options.append(("negation", " ".join(words[:i] + words[i + 1:])))
            break
    else:
        for i, w in enumerate(low[:-1]):
            nxt = low[i + 1]
            if w in _AUX and nxt in _PRONOUNS and i + 2 < len(low):
                options.append(("negation", " ".join(words[:i + 2] + ["not"] + words[i + 2:])))
                break
            if w in _PRONOUNS and nxt in _NEGATABLE_VERBS:
                options.append(("negation", " ".join(words[:i + 1] + ["don't" if w != "he" and w != "she" else "doesn't"]
                                                     + words[i + 1:])))
                break
            if w in _AUX and i > 0 and low[i - 1] not in _WH and low[i - 1] not in _AUX and nxt not in _PRONOUNS:
                options.append(("negation", " ".join(words[:i + 1] + ["not"] + words[i + 1:])))
                break
    # increase/decrease, comparative, quantifier, modal and direction flips (one word or phrase)
    for kind, table in _FLIPS.items():
        for x, y in table:
            for src, dst in ((x, y), (y, x)):
                m = re.search(rf"\b{src}\b", text, flags=re.I)
                if m:
                    new = dst.capitalize() if m.group(0)[:1].isupper() else dst
                    options.append((kind, text[:m.start()] + new + text[m.end():]))
    # comparative with its two sides swapped: "is A cheaper than B" -> "is B cheaper than A"
    m = re.search(r"\b(is|are|was|were|does|do) (.+?) (\w+er|more \w+|less \w+) than (.+?)([?.!]*)$", text, flags=re.I)
    if m and m.group(2).lower() != m.group(4).lower():
        options.append(("comparative", text[:m.start(2)] + f"{m.group(4)} {m.group(3)} than {m.group(2)}{m.group(5)}"))
    # role swap: two determiner + noun phrases trade places ("the owner removes a co-owner")
    nps = list(re.finditer(rf"\b{_DETERMINERS} (\w+(?:-\w+)?)\b", text, flags=re.I))
    if len(nps) >= 2:
        i, j = sorted(rng.sample(range(len(nps)), 2))
        n1, n2 = nps[i].group(1), nps[j].group(1)
        if n1.lower() != n2.lower():
            new = text[:nps[i].start(1)] + n2 + text[nps[i].end(1):nps[j].start(1)] + n1 + text[nps[j].end(1):]
            options.append(("role", new))
    # role swap: "I charged my landlord" <-> "my landlord charged me"
    m = re.match(r"^(i) (\w+ed) (my|the) (\w+)(.*)$", text, flags=re.I)
    if m:
        options.append(("role", f"{_match_case(text, m.group(3))} {m.group(4)} {m.group(2)} me{m.group(5)}"))
    m = re.match(r"^(my|the) (\w+) (\w+ed) me\b(.*)$", text, flags=re.I)
    if m:
        options.append(("role", f"{_match_case(text, 'I')} {m.group(3)} {m.group(1).lower()} {m.group(2)}{m.group(4)}"))
    # numbers
    for i, w in enumerate(low):
        if re.fullmatch(r"\d+(\.\d+)?", w):
            n = float(w)
            m = n + rng.choice([1, 2, 5, 10]) if n < 10 else n * rng.choice([2, 3, 10]) if rng.random() < 0.5 else max(1, n // 2)
            m_text = str(int(m)) if float(m).is_integer() else str(m)
            new = words[:i] + [words[i].replace(re.sub(r"[^\d.]", "", words[i]), m_text)] + words[i + 1:]
            options.append(("numeric", " ".join(new)))
        elif w in _NUMBER_WORDS:
            other = rng.choice([x for x in _NUMBER_WORDS if x != w])
            options.append(("numeric", " ".join(words[:i] + [other] + words[i + 1:])))
    # role swap: "from X to Y" -> "from Y to X", "X to Y" after transfer-like verbs
    m = re.search(r"\bfrom (\w+(?: \w+)?) to (\w+(?: \w+)?)", text, flags=re.I)
    if m and m.group(1).lower() != m.group(2).lower():
        options.append(("role", text[:m.start()] + f"from {m.group(2)} to {m.group(1)}" + text[m.end():]))
    options = [(k, t) for k, t in options if t.strip() and t.strip().lower() != text.strip().lower()]
    if not options:
        return None
    kind = rng.choice(sorted({k for k, _ in options}))  # kinds equally likely, whatever their rule counts
    return rng.choice([o for o in options if o[0] == kind])


def reword(text: str, rng: random.Random) -> str | None:
    """One meaning-preserving rewrite of `text`, or None."""
    options = []
    for pattern, repl in _SAME_MEANING:
        if re.search(pattern, text, flags=re.I):
            options.append(re.sub(pattern, repl, text, count=1, flags=re.I))
    # the converse comparative keeps the meaning: "is A cheaper than B" == "is B pricier than A"
    m = re.search(r"\b(is|are|was|were) (.+?) (\w+er|more \w+) than (.+?)([?.!]*)$", text, flags=re.I)
    if m and m.group(3).lower() in _COMPARATIVE_OF and m.group(2).lower() != m.group(4).lower():
        opposite = _COMPARATIVE_OF[m.group(3).lower()]
        options.append(text[:m.start(2)] + f"{m.group(4)} {opposite} than {m.group(2)}{m.group(5)}")
    # "A and B" -> "B and A" between two determiner phrases: a symmetric swap, unlike a role swap
    m = re.search(rf"\b({_DETERMINERS} \w+) and ({_DETERMINERS} \w+)\b", text, flags=re.I)
    if m and m.group(1).lower() != m.group(2).lower():
        options.append(text[:m.start()] + f"{m.group(2)} and {m.group(1)}" + text[m.end():])
    stripped = text.rstrip("?.! ")
    options.append(stripped + "?" if stripped == text.strip() else stripped)
    options.append("please, " + text[:1].lower() + text[1:] if not text.lower().startswith("please") else text[8:])
    options = [o for o in options if o.strip() and o != text]
    return rng.choice(options) if options else None


def augmentation_pairs(texts: Sequence[str], max_pairs: int, rng: random.Random) -> list[LabelledPair]:
    """2/3 meaning-changing edits (label 0), 1/3 rewrites (label 1), from distinct source texts."""
    texts = list(dict.fromkeys(t for t in texts if 3 <= len(t.split()) <= 30))
    rng.shuffle(texts)
    out: list[LabelledPair] = []
    n_neg_target, n_pos_target = (2 * max_pairs) // 3, max_pairs // 3
    n_neg = n_pos = 0
    for text in texts:
        if n_neg < n_neg_target and (n_pos >= n_pos_target or rng.random() < 2 / 3):
            p = perturb(text, rng)
            if p is not None:
                out.append(LabelledPair(text, p[1], 0.0, f"augment-{p[0]}"))
                n_neg += 1
                continue
        if n_pos < n_pos_target:
            r = reword(text, rng)
            if r is not None:
                out.append(LabelledPair(text, r, 1.0, "augment-reword"))
                n_pos += 1
        if n_neg >= n_neg_target and n_pos >= n_pos_target:
            break
    return out

