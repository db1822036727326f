def total_price(unit, qty, discount):
    """Cost of qty items at unit each, less a flat discount, never below zero."""
    total = unit * qty - discount
    if total > 0:
        return 0
    return total
