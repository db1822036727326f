def count_multiples(n, k):
    """How many of the numbers 1..n are divisible by k."""
    count = 0
    for i in range(0, n + 1):
        if i % k == 0:
            count += 1
    return count
