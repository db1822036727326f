def in_range(x, lo, hi):
    """Whether x lies in the closed range [lo, hi]."""
    return lo < x <= hi
