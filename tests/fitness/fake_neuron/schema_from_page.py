"""Write the fake profiler's table layout from Neuron Explorer's schema page (tests).

    git -C AWS_NEURON_SDK show HEAD:tools/neuron-explorer/profile-schema-reference.rst \
        | python tests/fitness/fake_neuron/schema_from_page.py > tests/fitness/fake_neuron/explorer_schema.json

The page ("Profile Parquet Schema Reference", generated from the schema `neuron-explorer
--show-profile-schema` prints) lists every table with its fields' name, type, unit and whether
it is required. The JSON keeps exactly that, per table, in the page's order, with the schema
version the page states; the fake `neuron-explorer` writes its Parquet tables from it, so that
no table or field name of the fake is made up (tests/fitness/test_explorer_parquet.py checks
the reader's names against it too).
"""

from __future__ import annotations

import json
import re
import sys

SECTION = re.compile(r"\n\.\. _profile-schema-[a-z0-9]+:\n\n(\w+)\n~+\n")
FIELD = re.compile(r"   \* - ``([A-Za-z0-9_]+)``\n     - ([^\n]*)\n     - ([^\n]*)\n     - (Yes|No)\n")
VERSION = re.compile(r"reflects schema version ``([0-9.]+)`` released in version \*\*([0-9.]+)\*\*")
TYPE_REF = re.compile(r"\s*\(:ref:`(\w+) <[^>]*>`\)")   # "string (:ref:`DmaQueueType <...>`)"
BARE_REF = re.compile(r":ref:`(\w+) <[^>]*>`")            # "array of :ref:`MemoryBandwidthPoint <...>`"


def parse(page: str) -> dict:
    """{"schema_version", "neuron_version", "tables": {table: [[field, type, unit, required], ...]}}."""
    version = VERSION.search(page)
    if version is None:
        raise SystemExit("the page states no schema version")
    tables: dict[str, list[list]] = {}
    heads = list(SECTION.finditer(page))
    for head, nxt in zip(heads, heads[1:] + [None]):
        body = page[head.end(): nxt.start() if nxt else len(page)]
        fields = [[name, BARE_REF.sub(r"\1", TYPE_REF.sub(r" enum \1", kind)).strip(), unit.strip(), required == "Yes"]
                  for name, kind, unit, required in FIELD.findall(body)]
        if fields:   # enums have no field table
            tables[head.group(1)] = fields
    return {"schema_version": version.group(1), "neuron_version": version.group(2), "tables": tables}


if __name__ == "__main__":
    schema = parse(sys.stdin.read())
    out = [f'{{"schema_version": {json.dumps(schema["schema_version"])}, '
           f'"neuron_version": {json.dumps(schema["neuron_version"])}, "tables": {{']
    tables = list(schema["tables"].items())
    for i, (table, fields) in enumerate(tables):   # one field a line: reviewable diffs
        rows = ",\n".join(f"  {json.dumps(f)}" for f in fields)
        out.append(f" {json.dumps(table)}: [\n{rows}\n ]{',' if i + 1 < len(tables) else ''}")
    out.append("}}")
    sys.stdout.write("\n".join(out) + "\n")
