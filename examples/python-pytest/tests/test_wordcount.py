from wordcount import count_words


def test_counts_each_word():
    assert count_words("a b a") == {"a": 2, "b": 1}


def test_an_empty_text_has_no_words():
    assert count_words("") == {}


def test_keeps_an_apostrophe_inside_a_word():
    assert count_words("don't") == {"don't": 1}


def test_ignores_case():
    assert count_words("Tree tree") == {"tree": 2}


def test_ignores_punctuation_around_words():
    assert count_words("(tree) tree.") == {"tree": 2}


def test_ignores_case_and_punctuation_together():
    assert count_words("Hi, hi!") == {"hi": 2}


def test_a_dash_alone_is_no_word():
    assert count_words("tree - tree") == {"tree": 2}
