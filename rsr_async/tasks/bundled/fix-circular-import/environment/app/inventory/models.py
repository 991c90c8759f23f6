from dataclasses import dataclass

from .report import money


@dataclass
class Item:
    sku: str
    name: str
    qty: int
    price_cents: int

    @property
    def value_cents(self) -> int:
        return self.qty * self.price_cents

    def describe(self) -> str:
        return f"{self.sku:<8} {self.name:<14} {self.qty:>4} x {money(self.price_cents)}"
