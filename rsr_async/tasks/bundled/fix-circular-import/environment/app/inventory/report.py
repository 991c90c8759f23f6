from .models import Item


def money(cents: int) -> str:
    return f"${cents // 100}.{cents % 100:02d}"


def report(items: list[Item]) -> str:
    lines = [item.describe() for item in sorted(items, key=lambda i: i.sku)]
    total = sum(item.value_cents for item in items)
    lines.append(f"TOTAL {money(total)}")
    return "\n".join(lines)
