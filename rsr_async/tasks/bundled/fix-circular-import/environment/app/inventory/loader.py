import csv

from .models import Item


def load(path: str) -> list[Item]:
    with open(path, newline="") as f:
        return [Item(r["sku"], r["name"], int(r["qty"]), int(r["price_cents"])) for r in csv.DictReader(f)]
