"""Hidden checks: the total is asked of the live server, in the client's network."""

import json
import urllib.request
from pathlib import Path
from typing import Any


def get(path: str) -> Any:
    with urllib.request.urlopen(f"http://server:8000{path}", timeout=10) as response:
        return json.load(response)


def test_total_quantity_matches_the_server() -> None:
    expected = sum(get(f"/items/{item}")["qty"] for item in get("/items"))
    out = Path("/app/total_qty.txt")
    assert out.is_file(), "/app/total_qty.txt is missing"
    assert out.read_text().strip() == str(expected)
