"""Where a benchmark's JSON goes: ``--json PATH`` when given, else ``$OUT/<name>.json``
when ``$OUT`` is set (the device machine's folder that comes back), else nowhere."""
from __future__ import annotations

import json
import os


def save_result(result: dict, path: str | None, name: str) -> str | None:
    """Write ``result`` (indented JSON) and return the path written, or None."""
    path = path or (os.path.join(os.environ["OUT"], f"{name}.json")
                    if os.environ.get("OUT") else None)
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    return path
