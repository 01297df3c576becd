"""inspect_data: a file's schema, a column's distinct values and the near matches of a value among them.

The work happens inside the sandbox (a generated snippet reads the sandbox's own files), so the agent sees
exactly what its code would see and isolation holds. The snippet prints one marked JSON line; `render`
turns it into the observation text.

The snippet runs where the agent's code ran before it (a stateful namespace, files the agent wrote in the
working directory), so its output is read as untrusted: the marker is drawn afresh per run, and a line that
is cut, not JSON or not the snippet's shape becomes an "output could not be read" error, never an exception.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from components.sandbox.result import ExecResult

MAX_RESULT_CHARS = 4 * 1024 * 1024  # a longer marked line is not parsed (the real one is far smaller)
UNREADABLE = "the inspection's output could not be read"


def new_marker() -> str:
    """A marker for one inspection, unpredictable from earlier outputs."""
    return f"__medgym_inspect_{secrets.token_hex(8)}__ "

# Runs in the sandbox: standard library plus pandas (for CSV). Everything lives inside one function that is
# deleted afterwards, so a stateful sandbox's namespace is left as the agent made it.
_SNIPPET = r"""
def _medgym_inspect(path, column, value, max_values, max_rows, marker, row_counts):
    import difflib, json, os, sqlite3

    def near(value, candidates):
        if value is None:
            return None
        v = str(value).casefold().strip()
        texts = [str(c) for c in candidates if c is not None]
        folded = {}
        for t in texts:
            folded.setdefault(t.casefold().strip(), t)
        exact = [folded[v]] if v in folded else []
        # substring matches catch 'aspirin' -> 'aspirin ec 325 mg', which difflib's ratio alone scores too low
        contains = [t for f, t in folded.items() if f != v and (v in f or (len(f) >= 3 and f in v))]
        contains.sort(key=lambda t: (len(t), t))
        fuzzy = difflib.get_close_matches(v, list(folded), n=max_values, cutoff=0.6)
        out = []
        for t in exact + contains + [folded[f] for f in fuzzy]:
            if t not in out:
                out.append(t)
        return out[:max_values]

    def files_here():
        found = []
        for root, dirs, names in os.walk("."):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for n in sorted(names):
                found.append(os.path.relpath(os.path.join(root, n), "."))
                if len(found) >= 200:
                    return found
        return found

    def kind_of(path):
        with open(path, "rb") as fh:
            head = fh.read(512)
        if head.startswith(b"SQLite format 3\x00"):
            return "sqlite"
        ext = os.path.splitext(path)[1].lower()
        if head.lstrip().startswith(b">") or ext in (".fa", ".fasta", ".fna", ".faa"):
            return "fasta"
        if ext in (".csv", ".tsv", ".txt.gz", ".csv.gz", ".tsv.gz"):
            return "csv"
        return "text"

    def sqlite_info(path):
        con = sqlite3.connect("file:" + path + "?mode=ro", uri=True)
        try:
            q = "SELECT name FROM sqlite_master WHERE type IN ('table','view') ORDER BY name"
            tables = [r[0] for r in con.execute(q)]
            out = {"kind": "sqlite", "tables": []}
            for t in tables:
                info = con.execute('PRAGMA table_info("%s")' % t.replace('"', '""'))
                cols = [{"name": r[1], "type": r[2] or ""} for r in info]
                n = None
                if row_counts:
                    n = con.execute('SELECT COUNT(*) FROM "%s"' % t.replace('"', '""')).fetchone()[0]
                out["tables"].append({"name": t, "columns": cols, "rows": n})
            if column is not None:
                if "." in column:
                    tname, cname = column.split(".", 1)
                    targets = [(t["name"], c["name"]) for t in out["tables"] if t["name"].casefold() == tname.casefold()
                               for c in t["columns"] if c["name"].casefold() == cname.casefold()]
                else:
                    targets = [(t["name"], c["name"]) for t in out["tables"] for c in t["columns"]
                               if c["name"].casefold() == column.casefold()]
                out["column_values"] = []
                for t, c in targets:
                    q = 'SELECT DISTINCT "%s" FROM "%s" LIMIT 200000' % (c.replace('"', '""'), t.replace('"', '""'))
                    distinct = [r[0] for r in con.execute(q)]
                    out["column_values"].append({"table": t, "column": c, "n_distinct": len(distinct),
                                           "values": [str(x) for x in sorted(distinct, key=str)[:max_values]],
                                           "near": near(value, distinct)})
                if not targets:
                    out["column_error"] = "no column %r in any table" % column
            return out
        finally:
            con.close()

    def csv_info(path):
        import pandas as pd
        sep = "\t" if path.lower().endswith((".tsv", ".tsv.gz")) else ","
        df = pd.read_csv(path, sep=sep, low_memory=False)
        out = {"kind": "csv", "rows": int(len(df)),
               "columns": [{"name": str(c), "type": str(t)} for c, t in df.dtypes.items()],
               "head": df.head(max_rows).to_string(max_colwidth=40)}
        if column is not None:
            match = [c for c in df.columns if str(c) == column]
            match = match or [c for c in df.columns if str(c).casefold() == column.casefold()]
            if not match:
                out["column_error"] = "no column %r; columns are %s" % (column, [str(c) for c in df.columns])
            else:
                s = df[match[0]].dropna()
                distinct = list(s.unique())
                counts = s.value_counts()
                out["column_values"] = [{"table": None, "column": str(match[0]), "n_distinct": len(distinct),
                                   "values": ["%s (%d)" % (k, v) for k, v in counts.head(max_values).items()],
                                   "near": near(value, distinct)}]
        return out

    def fasta_info(path):
        records, name, length = [], None, 0
        with open(path) as fh:
            for line in fh:
                line = line.strip()
                if line.startswith(">"):
                    if name is not None:
                        records.append((name, length))
                    name, length = line[1:].split()[0] if line[1:].split() else "", 0
                elif line:
                    length += len(line)
        if name is not None:
            records.append((name, length))
        out = {"kind": "fasta", "n_records": len(records), "total_length": sum(n for _, n in records),
               "records": [{"id": r, "length": n} for r, n in records[:max_values]]}
        if value is not None:
            out["near"] = near(value, [r for r, _ in records])
        return out

    def text_info(path):
        with open(path, errors="replace") as fh:
            lines = [next(fh, None) for _ in range(max_rows)]
        return {"kind": "text", "bytes": os.path.getsize(path), "head": "".join(l for l in lines if l is not None)}

    try:
        if not os.path.isfile(path):
            result = {"error": "no such file: %r" % path, "files": files_here()}
        else:
            readers = {"sqlite": sqlite_info, "csv": csv_info, "fasta": fasta_info, "text": text_info}
            result = readers[kind_of(path)](path)
            result["path"] = path
    except Exception as exc:
        result = {"error": "%s: %s" % (type(exc).__name__, exc), "path": path}
    print(marker + json.dumps(result, default=str))
"""


def build_snippet(
    path: str,
    column: str | None = None,
    value: str | None = None,
    max_values: int = 50,
    max_rows: int = 5,
    row_counts: bool = True,
    *,
    marker: str,
) -> str:
    """Python source that inspects `path` inside the sandbox and prints one marked JSON line.

    `row_counts=False` skips COUNT(*) per table, which on a large database costs seconds the schema alone does not.
    `marker` (from new_marker(), the same one given to parse_result) starts the result line.
    """
    args = ", ".join(repr(a) for a in (path, column, value, max_values, max_rows, marker, row_counts))
    return f"{_SNIPPET}\ntry:\n    _medgym_inspect({args})\nfinally:\n    globals().pop('_medgym_inspect', None)\n"


def parse_result(result: ExecResult, marker: str) -> dict[str, Any]:
    """The snippet's JSON; a failed, silent or unreadable run becomes {"error": ...} naming what happened."""
    marked = [line for line in result.stdout.splitlines() if line.startswith(marker)]
    if len(marked) > 1:  # the snippet prints once: more lines with this run's marker were not all its own
        return {"error": UNREADABLE}
    if marked:
        return _load(marked[0][len(marker) :])
    tail = (result.stderr.strip().splitlines() or [""])[-1]
    return {"error": f"inspection did not finish ({result.status}): {tail[:300]}"}


def _load(payload: str) -> dict[str, Any]:
    if len(payload) > MAX_RESULT_CHARS:
        return {"error": UNREADABLE}
    try:
        info = json.loads(payload)
    except (ValueError, RecursionError):  # cut at the output cap, or not JSON
        return {"error": UNREADABLE}
    if not isinstance(info, dict) or not (isinstance(info.get("error"), str) or isinstance(info.get("kind"), str)):
        return {"error": UNREADABLE}
    return info


def render(info: dict[str, Any]) -> str:
    """Observation text for one inspection result; one whose fields are not the snippet's shape says so."""
    try:
        return _render(info)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        # only a forged or damaged result lacks the fields the snippet always writes
        return f"inspect_data failed: {UNREADABLE}"


def _render(info: dict[str, Any]) -> str:
    if "error" in info:
        text = f"inspect_data failed: {info['error']}"
        if info.get("files"):
            text += "\nFiles available: " + ", ".join(info["files"])
        return text
    path, kind = info.get("path", "?"), info["kind"]
    lines: list[str] = []
    if kind == "sqlite":
        lines.append(f"{path}: SQLite database, {len(info['tables'])} table(s)")
        for t in info["tables"]:
            cols = ", ".join(f"{c['name']} {c['type']}".strip() for c in t["columns"])
            rows = f" ({t['rows']} rows)" if t.get("rows") is not None else ""
            lines.append(f"  {t['name']}{rows}: {cols}")
    elif kind == "csv":
        lines.append(f"{path}: CSV, {info['rows']} rows, {len(info['columns'])} columns")
        lines.append("  columns: " + ", ".join(f"{c['name']} ({c['type']})" for c in info["columns"]))
        lines.append("  first rows:")
        lines.extend("    " + row for row in info["head"].splitlines())
    elif kind == "fasta":
        lines.append(f"{path}: FASTA, {info['n_records']} record(s), total length {info['total_length']}")
        lines.extend(f"  {r['id']}: length {r['length']}" for r in info["records"])
        if info["n_records"] > len(info["records"]):
            lines.append(f"  ... {info['n_records'] - len(info['records'])} more")
        if "near" in info:
            lines.append("  closest record ids: " + (", ".join(info["near"]) or "none"))
    else:
        lines.append(f"{path}: {info['bytes']} bytes; first lines:")
        lines.extend("    " + row for row in info["head"].splitlines())
    if info.get("column_error"):
        lines.append(f"  column: {info['column_error']}")
    for col in info.get("column_values", []):
        where = f"{col['table']}.{col['column']}" if col.get("table") else col["column"]
        shown = len(col["values"])
        more = f" (first {shown} shown)" if col["n_distinct"] > shown else ""
        lines.append(f"  {where}: {col['n_distinct']} distinct value(s){more}: " + "; ".join(col["values"]))
        if col.get("near") is not None:
            near = col["near"]
            lines.append(
                "  values closest to the one asked for: " + ("; ".join(repr(v) for v in near) if near else "none")
            )
    return "\n".join(lines)
