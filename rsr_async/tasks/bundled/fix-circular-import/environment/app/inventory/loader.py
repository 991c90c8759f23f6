import csv

from .models import Item


def load(path):
    with open(path, newline="") as f:
        return [Item(r["sku"], r["name"], int(r["qty"]), int(r["price_cents"])) for r in csv.DictReader(f)]
