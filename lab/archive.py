"""Move results files out of ``bench/results/`` into the run history, ``lab/runs.jsonl``.

``bench/results/`` keeps the latest result per (benchmark, device) and the files that
code or docs cite; a run that is superseded or cited nowhere leaves it through this
script, which appends one JSON object per file to ``lab/runs.jsonl``::

    {"benchmark": "rmsnorm_short", "device": "NVIDIA H100 80GB HBM3",
     "date": "2026-11-24", "committed": "2026-11-24",
     "file": "bench/results/rmsnorm_short_h100.json", "run": {...the file's JSON...}}

``benchmark`` is the file name without its device suffix (``_h100``, ``_h200_3``);
``device`` is the run's own ``device`` field, else the suffix; ``date`` is the run's own
date, if it recorded one; ``committed`` is the day git first saw the file. A Markdown
result is kept as a string in ``run``.

    python lab/archive.py bench/results/rmsnorm_short_h100.json [...]   # append, git rm
    python lab/archive.py --keep FILE...                                # append only
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(ROOT, "lab", "runs.jsonl")
_SUFFIX = re.compile(r"_(h\d00|a100|b200)(?:_(\d+))?$")


def record(path: str) -> dict:
    """The runs.jsonl object for one results file."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    stem, ext = os.path.splitext(os.path.basename(path))
    with open(path, encoding="utf-8") as f:
        run = json.load(f) if ext == ".json" else f.read()
    m = _SUFFIX.search(stem)
    meta = run if isinstance(run, dict) else {}
    date = next((meta[k] for k in ("date", "when", "timestamp") if meta.get(k)), None)
    first = subprocess.run(["git", "log", "--diff-filter=A", "--format=%cs", "--", rel],
                           cwd=ROOT, capture_output=True, text=True).stdout.split()
    return {"benchmark": stem[:m.start()] if m else stem,
            "device": meta.get("device") or (m.group(1) if m else None),
            "date": date, "committed": first[-1] if first else None,
            "file": rel, "run": run}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="results files under bench/results/")
    ap.add_argument("--keep", action="store_true", help="append only; leave the files")
    a = ap.parse_args(argv)
    lines = [json.dumps(record(p), ensure_ascii=False, separators=(",", ":"))
             for p in a.files]
    with open(RUNS, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    if not a.keep:
        rels = [os.path.relpath(os.path.abspath(p), ROOT) for p in a.files]
        subprocess.run(["git", "rm", "-q", "--", *rels], cwd=ROOT, check=True)
    print(f"{len(lines)} run(s) appended to {os.path.relpath(RUNS, ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
