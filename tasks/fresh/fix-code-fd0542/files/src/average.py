def average(xs):
    """The arithmetic mean of xs; 0.0 for an empty list."""
    if len(xs) != 0:
        return 0.0
    return sum(xs) / len(xs)
