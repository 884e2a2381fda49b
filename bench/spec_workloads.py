"""The chat requests `bench_spec.py` sends: grounded copying, where drafts from the prompt
should pay, and open-ended text, where they mostly should not. Deterministic: stream i of
a burst always asks the same thing, so every server answers the same requests.

  quote    ~1,500 tokens of twelve templated paragraphs; "quote the paragraph about X"
  records  ~750 tokens of sixteen employee records, one `key: value` line each field,
           the same keys in every record; "copy the record of X"
  json     ~900 tokens of a JSON array of inventory objects with repeated keys and
           similar values; "output the object whose id is X, exactly"
  table    ~800 tokens of a Markdown table of shipments; "copy the rows for X"
  code     ~1,200 tokens of Python (this repository's schedule/batch.py); "rewrite it
           with one function renamed, whole file"
  story    "write a long story about X": open-ended, the control
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("quote", "records", "json", "table", "code", "story")
#: The workloads whose answer copies from the prompt.
GROUNDED = ("quote", "records", "json", "table", "code")

TOPICS = [
    "harbor", "orchard", "glassworks", "observatory", "mill", "library",
    "bridge", "market", "foundry", "vineyard", "archive", "lighthouse",
]  # fmt: skip
NAMES = ["plan_batch", "build_plan", "make_plan", "assemble", "fill_plan", "compose",
         "arrange", "lay_out"]  # fmt: skip
ANIMALS = ["dragon", "otter", "fox", "owl", "whale", "badger", "heron", "lynx"]
FIRST = ["Harlow", "Mirela", "Tobias", "Ines", "Corwin", "Alma", "Desmond", "Yara",
         "Piet", "Sunniva", "Rafael", "Odile", "Bram", "Keziah", "Lucan", "Thea"]  # fmt: skip
LAST = ["Finch", "Okafor", "Lindqvist", "Marchetti", "Hale", "Duarte", "Sato", "Brennan",
        "Voss", "Achterberg", "Quint", "Maelstrom", "Ivers", "Calloway", "Renner", "Pike"]  # fmt: skip
DEPARTMENTS = ["Logistics", "Finance", "Research", "Support", "Facilities", "Legal"]
CITIES = ["Rotterdam", "Porto", "Tallinn", "Lyon", "Graz", "Bergen", "Malmo", "Ghent"]
ITEMS = ["hex bolt", "wing nut", "flat washer", "hinge pin", "cable tie", "spring clip",
         "rivet", "wood screw", "anchor plug", "threaded rod", "lock nut", "eye bolt"]  # fmt: skip
WAREHOUSES = ["north", "south", "east", "west"]
CARRIERS = ["Nordfrakt", "BlueLine", "Castello", "Rhenus Light"]


def paragraph(i: int, topic: str) -> str:
    return (
        f"The {topic} of Varenholm was built in the year {1400 + 37 * i} by a guild of "
        f"{12 + i} families. Every spring the keepers of the {topic} counted the stores, "
        f"mended the roofs and wrote the numbers into a ledger bound in green leather. "
        f"Travellers said the {topic} smelled of cedar and rain, and that its bell rang "
        f"{3 + i % 4} times at noon. When the river flooded in {1500 + 11 * i}, the {topic} "
        f"sheltered {40 + 9 * i} people for {2 + i % 5} weeks, and the guild still tells "
        f"that story each autumn."
    )


def record(i: int) -> str:
    return "\n".join(
        [
            f"Employee ID: E-{4100 + 17 * i}",
            f"Name: {FIRST[i]} {LAST[i]}",
            f"Department: {DEPARTMENTS[i % len(DEPARTMENTS)]}",
            f"Office: {CITIES[i % len(CITIES)]}, floor {1 + i % 5}",
            f"Start date: {2011 + i % 12}-{1 + i % 12:02d}-{3 + (7 * i) % 25:02d}",
            f"Status: {'active' if i % 4 else 'on leave'}",
        ]
    )


def item(i: int) -> dict[str, object]:
    return {
        "id": 1040 + 3 * i,
        "sku": f"{'ABCDEFG'[i % 7]}X-{200 + 11 * i}-{'ABC'[i % 3]}",
        "name": ITEMS[i % len(ITEMS)],
        "warehouse": WAREHOUSES[i % len(WAREHOUSES)],
        "quantity": 25 + (37 * i) % 400,
        "unit_price": round(0.15 + 0.35 * (i % 9), 2),
        "tags": ["steel", "zinc-plated"] if i % 2 else ["stainless"],
    }


def table_row(i: int) -> str:
    return (
        f"| SH-{7700 + 13 * i} | {CITIES[i % len(CITIES)]} | {CITIES[(i + 3) % len(CITIES)]} "
        f"| {CARRIERS[i % len(CARRIERS)]} | {120 + (53 * i) % 900} kg "
        f"| 2026-{1 + i % 12:02d}-{2 + (5 * i) % 26:02d} | {'delivered' if i % 3 else 'in transit'} |"
    )


DOCUMENT = "\n\n".join(paragraph(i, t) for i, t in enumerate(TOPICS))
RECORDS = "\n\n".join(record(i) for i in range(16))
INVENTORY = json.dumps([item(i) for i in range(12)], indent=2)
TABLE = "\n".join(
    [
        "| Shipment | From | To | Carrier | Weight | Shipped | State |",
        "|---|---|---|---|---|---|---|",
        *(table_row(i) for i in range(20)),
    ]
)
CODE = (ROOT / "juggler" / "engine" / "schedule" / "batch.py").read_text()[:4800]


def messages(workload: str, i: int) -> list[dict[str, str]]:
    """Stream `i`'s chat for `workload` (see the module doc)."""
    if workload == "quote":
        topic = TOPICS[i % len(TOPICS)]
        ask = f"Quote, word for word, the paragraph about the {topic}."
        return [
            {"role": "system", "content": "Answer from the document. Quote exactly."},
            {"role": "user", "content": f"{DOCUMENT}\n\n{ask}"},
        ]
    if workload == "records":
        k = (5 + 3 * i) % 16
        ask = f"Copy the record of {FIRST[k]} {LAST[k]} exactly, every line of it."
        return [
            {"role": "system", "content": "You copy records from the directory exactly."},
            {"role": "user", "content": f"Staff directory:\n\n{RECORDS}\n\n{ask}"},
        ]
    if workload == "json":
        k = (4 + 5 * i) % 12
        ask = f"Output the JSON object whose id is {1040 + 3 * k}, exactly as it appears."
        return [{"role": "user", "content": f"Inventory:\n```json\n{INVENTORY}\n```\n\n{ask}"}]
    if workload == "table":
        city = CITIES[(2 + i) % len(CITIES)]
        ask = f"Copy every row of the table whose From column is {city}, with the header."
        return [{"role": "user", "content": f"Shipments:\n\n{TABLE}\n\n{ask}"}]
    if workload == "code":
        name = NAMES[i % len(NAMES)]
        ask = f"Rewrite this file with the function `schedule` renamed to `{name}`. Output the whole file."
        return [{"role": "user", "content": f"{ask}\n\n```python\n{CODE}\n```"}]
    if workload == "story":
        animal = ANIMALS[i % len(ANIMALS)]
        return [{"role": "user", "content": f"Write a long story about a {animal} and a river."}]
    raise ValueError(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
