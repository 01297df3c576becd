"""Seed a TREQS world with what each question's SQL compares against, read with sqlglot.

Each question gets admissions whose demographic row satisfies the question's demographic filters and which carry a
diagnosis / procedure / prescription / lab row satisfying the filters on those tables. Only the first branch of an OR
is honoured (enough for the reference SQL to find something).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import sqlglot
import sqlglot.errors
from sqlglot import exp

from components.ehr import vocab
from components.ehr.treqs_world import TreqsWorld

Cond = tuple[str, str, str, str]  # table, column, op, literal
MAX_COPIES = 12  # admissions seeded per question that names no patient
_OPS = {exp.EQ: "=", exp.GT: ">", exp.LT: "<", exp.GTE: ">=", exp.LTE: "<=", exp.Like: "like"}
NUMERIC = {
    "age",
    "days_stay",
    "dob_year",
    "dod_year",
    "admityear",
    "expire_flag",
    "subject_id",
    "hadm_id",
    "itemid",
    "icustay_id",
}
DIAG_BY = {
    "short_title": {s: (s, lt, c) for s, lt, c in vocab.DIAGNOSES},
    "icd9_code": {c: (s, lt, c) for s, lt, c in vocab.DIAGNOSES},
    "long_title": {lt: (s, lt, c) for s, lt, c in vocab.DIAGNOSES},
}
PROC_BY = {
    "short_title": {s: (s, lt, c) for s, lt, c in vocab.PROCEDURES},
    "icd9_code": {c: (s, lt, c) for s, lt, c in vocab.PROCEDURES},
    "long_title": {lt: (s, lt, c) for s, lt, c in vocab.PROCEDURES},
}


def _col_name(node: exp.Expression) -> str:
    inner = node.this
    return inner.this if isinstance(inner, (exp.Literal, exp.Identifier)) else node.name


def read_conditions(query: str) -> list[Cond]:
    """Comparisons of a column with a literal, skipping all but the first branch of each OR."""
    try:
        tree = sqlglot.parse_one(query, read="sqlite")
    except sqlglot.errors.SqlglotError:
        return _regex_conditions(query)  # e.g. an unescaped quote in a literal: the release SQL is itself broken
    out: list[Cond] = []
    for node in tree.find_all(*_OPS):
        if any(isinstance(anc, exp.Or) and node not in list(anc.left.walk()) for anc in _ancestors(node)):
            continue
        col, lit = node.this, node.expression
        if isinstance(col, exp.Column) and isinstance(lit, exp.Literal) and col.table:
            out.append((col.table, _col_name(col), _OPS[type(node)], lit.this))
    return out


def _regex_conditions(query: str) -> list[Cond]:
    return [(t, c, op, lit) for t, c, op, lit in re.findall(r"\b(\w+)\.'(\w+)' (=|>=|<=|>|<|like) '([^']*)'", query)]


def _ancestors(node: exp.Expression):
    p = node.parent
    while p is not None:
        yield p
        p = p.parent


def _satisfy(op: str, lit: str, numeric: bool, rng) -> object:
    if not numeric:
        return lit.replace("%", "") if op == "like" else lit
    x = float(lit)
    if op == "<":
        x = x - 1 - rng.randint(0, 3) if x > 6 else x - 1
    elif op == ">":
        x = x + 1 + rng.randint(0, 3)
    return x if not float(x).is_integer() else int(x)


def copy_counts(rng: random.Random) -> Iterator[int]:
    """How many admissions to seed for each question in turn: 1 to MAX_COPIES, each once per shuffled round.

    A fixed count made it the answer to most count questions (3 was right on 11 of 15 in the sample); drawing
    without replacement keeps even a few questions' counts apart, where independent draws repeat by chance.
    """
    while True:
        deck = list(range(1, MAX_COPIES + 1))
        rng.shuffle(deck)
        yield from deck


def seed_question(world: TreqsWorld, query: str, copies: int) -> None:
    """Seed admissions matching `query`: one where it names a patient, else `copies` (see `copy_counts`)."""
    rng = world.rng
    by_table: dict[str, dict[str, object]] = {}
    for table, col, op, lit in read_conditions(query):
        if table == "demographic" and col == "hadm_id":
            continue
        if table in ("demographic", "diagnoses", "procedures", "prescriptions", "lab"):
            by_table.setdefault(table, {})[col] = _satisfy(op, lit, col in NUMERIC, rng)
    for table in re.findall(r"(?:from|join) (\w+)", query):
        if table in ("demographic", "diagnoses", "procedures", "prescriptions", "lab"):
            by_table.setdefault(table, {})
    demo = by_table.pop("demographic", {})
    if re.search(r"select [^;]*\bdemographic\.'dod", query):
        demo.setdefault("expire_flag", 1)
    sid_pin = demo.pop("subject_id", None)
    for t in list(by_table):
        if "subject_id" in by_table[t]:
            sid_pin = by_table[t].pop("subject_id")
    name = demo.get("name")
    n = 1 if (sid_pin is not None or name is not None) else copies
    for _ in range(n):
        sid = world.subject(int(sid_pin) if sid_pin is not None else None, name=name if isinstance(name, str) else None)
        hadm = world.admission(sid, **demo)
        world.populate_admission(sid, hadm)
        for table, over in by_table.items():
            over = dict(over)
            if table in ("diagnoses", "procedures"):
                lookup = DIAG_BY if table == "diagnoses" else PROC_BY
                for key in ("icd9_code", "short_title", "long_title"):
                    if key in over and over[key] in lookup[key]:
                        s, lt, c = lookup[key][over[key]]
                        over = {"short_title": s, "long_title": lt, "icd9_code": c, **over}
                        break
                if "icd9_code" in over:
                    over["icd9_code"] = str(over["icd9_code"])
            getattr(
                world,
                {"diagnoses": "diagnosis", "procedures": "procedure", "prescriptions": "prescription", "lab": "lab"}[
                    table
                ],
            )(sid, hadm, **over)
