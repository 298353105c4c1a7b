from __future__ import annotations


def lookup(order: str) -> str:
    return f"order {order}: shipped"


def crm(customer: str) -> str:
    return f"customer {customer}: gold"


def refund(order: str, amount: float) -> str:
    return f"refunded {amount} for {order}"
