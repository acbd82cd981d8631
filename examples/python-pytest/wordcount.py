"""Word counts. It starts out naive on purpose; the example's agent (agent.py) adds the rule it
still lacks, one per iteration."""


def count_words(text):
    """How often each word occurs in `text`, ignoring case and the punctuation around words."""
    counts = {}
    for word in text.split():
        # (next rule)
        counts[word] = counts.get(word, 0) + 1
    return counts
