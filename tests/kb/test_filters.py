"""The filter grammar (kb/filters.py): every refusal names its field path and limit, the all/any/none
semantics with their case rules, `select` agreeing with `matches`, and `key()` ignoring case and spacing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kb.filters import MAX_FILTER_CONDITIONS, FaqFilter, FilterError, parse_filter
from kb.records import MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS, MAX_SOURCE_CHARS, MAX_TAG_CHARS

KEY_OK = {"key": "lang", "value": "en"}


def refusal(raw) -> tuple[str, str]:
    with pytest.raises(FilterError) as exc:
        parse_filter(raw)
    assert isinstance(exc.value, ValueError)
    assert str(exc.value) == f"{exc.value.field}: {exc.value.reason}"
    return exc.value.field, exc.value.reason


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("raw, field, words", [
    (None, "filter", "must be an object"),
    ([], "filter", "must be an object"),
    ("all", "filter", "must be an object"),
    ({"al": []}, "filter", "unknown key(s) 'al' (a filter has all, any and none)"),
    ({"all": [], "x" * 500: []}, "filter", "..."),
    ({"all": {"tag": "a"}}, "filter.all", "must be a list of conditions, got an object"),
    ({"any": "tag"}, "filter.any", "must be a list of conditions, got a string"),
    ({"none": None}, "filter.none", "must be a list of conditions, got null"),
    ({"all": ["tag"]}, "filter.all[0]", "a condition must be an object"),
    ({"all": [KEY_OK, KEY_OK, 3]}, "filter.all[2]", "a condition must be an object"),
    ({"any": [{}]}, "filter.any[0]", "exactly one of key, tag and source, got none of them"),
    ({"any": [{"tag": "a", "source": "b"}]}, "filter.any[0]", "exactly one of key, tag and source, got tag and source"),
    ({"any": [{"key": "a", "value": "b", "tag": "c"}]}, "filter.any[0]", "got key and tag"),
    ({"none": [{"key": "lang"}]}, "filter.none[0].value", "is required with key"),
    ({"none": [{"tag": "a", "value": "b"}]}, "filter.none[0].value", "goes only with key, not with tag"),
    ({"none": [{"value": "b"}]}, "filter.none[0].key", "is required with value"),
    ({"all": [{"tag": "a", "colour": "red"}]}, "filter.all[0]", "unknown key(s) 'colour'"),
    ({"all": [KEY_OK, {"key": 1, "value": "en"}]}, "filter.all[1].key", "must be a string, got a number"),
    ({"all": [{"key": "lang", "value": None}]}, "filter.all[0].value", "must be a string, got null"),
    ({"all": [{"tag": ["a"]}]}, "filter.all[0].tag", "must be a string, got a list"),
    ({"all": [{"source": True}]}, "filter.all[0].source", "must be a string, got a boolean"),
    ({"all": [{"key": " ", "value": "en"}]}, "filter.all[0].key", "must not be empty"),
    ({"all": [{"key": "lang", "value": ""}]}, "filter.all[0].value", "must not be empty"),
    ({"any": [{"tag": "\t"}]}, "filter.any[0].tag", "must not be empty"),
    ({"none": [{"source": ""}]}, "filter.none[0].source", "must not be empty"),
    ({"all": [{"key": "k" * (MAX_METADATA_KEY_CHARS + 1), "value": "v"}]}, "filter.all[0].key",
     f"must be at most {MAX_METADATA_KEY_CHARS} characters, got {MAX_METADATA_KEY_CHARS + 1}"),
    ({"all": [{"key": "k", "value": "v" * (MAX_METADATA_VALUE_CHARS + 1)}]}, "filter.all[0].value",
     f"must be at most {MAX_METADATA_VALUE_CHARS} characters"),
    ({"any": [{"tag": "t" * (MAX_TAG_CHARS + 1)}]}, "filter.any[0].tag", f"must be at most {MAX_TAG_CHARS} characters"),
    ({"none": [{"source": "s" * (MAX_SOURCE_CHARS + 1)}]}, "filter.none[0].source",
     f"must be at most {MAX_SOURCE_CHARS} characters"),
    ({"all": [{"tag": "a\x00b"}]}, "filter.all[0].tag", "must not contain NUL characters"),
    ({"all": [{"key": "lang", "value": "\ud800"}]}, "filter.all[0].value", "unpaired surrogate"),
    ({"all": [{"tag": "a"}] * 20, "any": [{"tag": "b"}] * 20, "none": [{"tag": "c"}] * 11}, "filter",
     f"at most {MAX_FILTER_CONDITIONS} conditions in all (all, any and none together), got 51"),
])
def test_every_refusal_names_its_field_path_and_limit(raw, field, words):
    got_field, reason = refusal(raw)
    assert got_field == field
    assert words in reason


def test_a_long_or_unprintable_unknown_key_is_quoted_short_or_not_at_all():
    _, reason = refusal({"all": [], "x" * 500: []})
    assert len(reason) < 200
    _, reason = refusal({"all": [{"tag": "a", "\ud800": 1}]})
    assert "unknown key(s) ?" in reason
    assert "\ud800" not in reason


def test_the_condition_count_is_checked_before_any_condition_is_read():
    # a list of junk that would fail at its first element is refused for its length
    field, reason = refusal({"none": ["junk"] * 10_000})
    assert field == "filter"
    assert reason.endswith("got 10000")


def test_the_limits_themselves_are_accepted():
    f = parse_filter({"all": [{"key": "k" * MAX_METADATA_KEY_CHARS, "value": "v" * MAX_METADATA_VALUE_CHARS}],
                      "any": [{"tag": " " + "t" * MAX_TAG_CHARS + " "}],  # the limit is on the trimmed text
                      "none": [{"source": "s" * MAX_SOURCE_CHARS}] * (MAX_FILTER_CONDITIONS - 2)})
    assert len(f.none_of) == 1  # repeats collapse
    assert f.matches({"k" * MAX_METADATA_KEY_CHARS: "V" * MAX_METADATA_VALUE_CHARS}, ["T" * MAX_TAG_CHARS], None)


def test_the_field_prefix_is_the_callers():
    with pytest.raises(FilterError) as exc:
        parse_filter({"any": [{"tag": 1}]}, field="body.filter")
    assert exc.value.field == "body.filter.any[0].tag"


# ---------------------------------------------------------------- semantics

ORDER = ({"Lang": "EN ", "team": "Shipping"}, ["Orders", " urgent "], "https://help.example.com/Orders")
REFUND = ({"lang": "de"}, ["billing"], None)
FAQS = {"order": ORDER, "refund": REFUND}

TAG_ORDERS, TAG_BILLING, TAG_NONE = {"tag": "orders"}, {"tag": "billing"}, {"tag": "nowhere"}


@pytest.mark.parametrize("raw, passing", [
    ({}, {"order", "refund"}),
    ({"all": [], "any": [], "none": []}, {"order", "refund"}),
    ({"all": [TAG_ORDERS]}, {"order"}),
    ({"all": [TAG_ORDERS, {"key": "lang", "value": "en"}]}, {"order"}),
    ({"all": [TAG_ORDERS, TAG_BILLING]}, set()),
    ({"any": [TAG_ORDERS, TAG_BILLING]}, {"order", "refund"}),
    ({"any": [TAG_NONE]}, set()),
    ({"any": [TAG_NONE, TAG_BILLING]}, {"refund"}),
    ({"none": [TAG_ORDERS]}, {"refund"}),
    ({"none": [TAG_NONE]}, {"order", "refund"}),
    ({"none": [TAG_ORDERS, TAG_BILLING]}, set()),
    ({"all": [{"key": "lang", "value": "en"}], "none": [{"tag": "urgent"}]}, set()),
    ({"any": [TAG_ORDERS, TAG_BILLING], "none": [{"key": "lang", "value": "de"}]}, {"order"}),
    ({"all": [TAG_ORDERS], "any": [TAG_NONE]}, set()),  # a given `any` must have one that holds
    ({"all": [{"key": "team", "value": "shipping"}], "any": [{"key": "lang", "value": "en"}, TAG_NONE],
      "none": [TAG_BILLING]}, {"order"}),
    # a key that is absent never holds: not in `all`, and it excludes nothing in `none`
    ({"all": [{"key": "team", "value": "billing"}]}, set()),
    ({"none": [{"key": "team", "value": "shipping"}]}, {"refund"}),
])
def test_all_any_none(raw, passing):
    assert parse_filter(raw).select(FAQS) == passing
    assert {i for i, fields in FAQS.items() if parse_filter(raw).matches(*fields)} == passing


@pytest.mark.parametrize("cond, holds", [
    ({"key": "LANG", "value": "en"}, True),          # keys case-insensitive (both sides)
    ({"key": "  lang ", "value": " En  "}, True),    # trimmed, values case-insensitive
    ({"key": "lang", "value": "e n"}, False),        # inner whitespace counts
    ({"key": "lang", "value": "eng"}, False),        # exact, not a prefix
    ({"key": "TEAM", "value": "SHIPPING"}, True),
    ({"key": "lang", "value": "shipping"}, False),   # the value of another key
    ({"tag": "ORDERS"}, True),                       # tags case-insensitive
    ({"tag": "Urgent "}, True),                      # the FAQ's tag " urgent " trimmed too
    ({"tag": "order"}, False),
    ({"source": "https://help.example.com/Orders"}, True),
    ({"source": "  https://help.example.com/Orders\n"}, True),  # trimmed
    ({"source": "https://help.example.com/orders"}, False),     # but case-sensitive
    ({"source": "https://help.example.com"}, False),
])
def test_case_and_whitespace_rules(cond, holds):
    assert parse_filter({"all": [cond]}).matches(*ORDER) is holds
    assert parse_filter({"none": [cond]}).matches(*ORDER) is not holds


def test_a_source_condition_never_holds_for_an_faq_without_source():
    assert not parse_filter({"all": [{"source": "x"}]}).matches(*REFUND)
    assert parse_filter({"none": [{"source": "x"}]}).matches(*REFUND)


def test_the_empty_filter_passes_everything_even_an_faq_without_fields():
    f = parse_filter({})
    assert f.is_empty and f == FaqFilter()
    assert f.matches({}, [], None)
    assert f.select({"a": ({}, [], None), **FAQS}) == frozenset({"a", "order", "refund"})
    assert not parse_filter({"none": [TAG_NONE]}).is_empty


# ---------------------------------------------------------------- select and key

WORDS = st.sampled_from(["en", "EN", "de", " de ", "a", "B", "b", "x y"])
CONDITION = st.one_of(
    st.builds(lambda k, v: {"key": k, "value": v}, st.sampled_from(["lang", "Lang", "team"]), WORDS),
    st.builds(lambda t: {"tag": t}, WORDS),
    st.builds(lambda s: {"source": s}, st.sampled_from(["s1", "S1", "s2"])),
)
FILTER = st.fixed_dictionaries({}, optional={p: st.lists(CONDITION, max_size=4) for p in ("all", "any", "none")})
FAQ = st.tuples(st.dictionaries(st.sampled_from(["lang", "team", "other"]), WORDS, max_size=3),
                st.lists(WORDS, max_size=3), st.one_of(st.none(), st.sampled_from(["s1", "S1", "s2", " s2"])))


@settings(max_examples=200, deadline=None)
@given(raw=FILTER, faqs=st.dictionaries(st.text("abcdef", min_size=1, max_size=3), FAQ, max_size=8))
def test_select_is_matches_one_by_one(raw, faqs):
    f = parse_filter(raw)
    assert f.select(faqs) == frozenset(i for i, (m, t, s) in faqs.items() if f.matches(m, t, s))


def respell(cond: dict, flip: bool) -> dict:
    """The same condition with keys, values and tags in another case and padded; sources only padded."""
    def case(text: str) -> str:
        return f"  {text.upper() if flip else text.title()}\t"
    if "key" in cond:
        return {"key": case(cond["key"]), "value": case(cond["value"])}
    if "tag" in cond:
        return {"tag": case(cond["tag"])}
    return {"source": f" {cond['source']} "}


@settings(max_examples=200, deadline=None)
@given(raw=FILTER, flip=st.booleans(), data=st.data())
def test_key_ignores_case_spacing_order_and_repeats(raw, flip, data):
    other = {part: [respell(c, flip) for c in data.draw(st.permutations(conds))] + conds[:1]
             for part, conds in raw.items()}
    a, b = parse_filter(raw), parse_filter(other)
    assert a.key() == b.key() and a == b
    assert hash(a.key()) == hash(b.key())
    assert {a.key(): 1}[b.key()] == 1


def test_key_tells_apart_what_matches_differently():
    keys = {parse_filter(raw).key() for raw in [
        {}, {"all": [TAG_ORDERS]}, {"any": [TAG_ORDERS]}, {"none": [TAG_ORDERS]},
        {"all": [{"source": "S1"}]}, {"all": [{"source": "s1"}]},  # sources are case-sensitive
        {"all": [{"key": "tag", "value": "orders"}]},
    ]}
    assert len(keys) == 7
