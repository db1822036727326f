def sum_of_squares(n):
    """1*1 + 2*2 + ... + n*n."""
    total = 0
    for i in range(1, n + 1):
        total += i + i
    return total
