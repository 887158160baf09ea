from llmhost.engine.text import IncrementalDetokenizer, StopMatcher


def test_stop_string_split_across_pieces_is_never_emitted() -> None:
    m = StopMatcher(["###"])
    out = m.feed("Hello #") + m.feed("#") + m.feed("# world")
    assert out == "Hello "
    assert m.matched == "###"


def test_partial_stop_prefix_is_released_when_it_does_not_complete() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("a ST") == "a "
    assert m.feed("ART") == "START"
    assert m.matched is None


def test_earliest_of_several_stops_wins() -> None:
    m = StopMatcher(["c", "abc"])
    assert m.feed("xxabcd") == "xx"
    assert m.matched == "abc"


def test_utf8_character_split_over_tokens() -> None:
    pieces = {1: "é".encode()[:1], 2: "é".encode()[1:], 3: b"!"}
    d = IncrementalDetokenizer(lambda t: pieces[t], [])
    assert d.add(1) == ""
    assert d.add(2) == "é"
    assert d.add(3) == "!"
    assert d.finish() == ""


def test_held_text_is_flushed_at_the_end() -> None:
    d = IncrementalDetokenizer(lambda t: b"a\n", ["\n\n"])
    assert d.add(0) == "a"
    assert d.finish() == "\n"
