"""Synthetic FASTA content: random records with varied GC, planted ORFs, motifs, mutated pairs and contigs.

Everything is drawn from the caller's rng and written with 60-column lines, so files are byte-identical
for the same rng state.
"""

from __future__ import annotations

import random

LINE = 60
STOPS = ("TAA", "TAG", "TGA")
SENSE = tuple(a + b + c for a in "ACGT" for b in "ACGT" for c in "ACGT" if a + b + c not in STOPS)
COMPLEMENT = str.maketrans("ACGT", "TGCA")
MAX_INDEL_EDITS = 16  # edits between the records of an edit-distance pair


def random_seq(rng: random.Random, length: int, gc: float) -> str:
    w = (1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2
    return "".join(rng.choices("ACGT", weights=w, k=length))


def coding_seq(rng: random.Random, n_codons: int) -> str:
    """ATG, n_codons - 2 sense codons, then a stop: an ORF of 3 * n_codons nt."""
    return "ATG" + "".join(rng.choices(SENSE, k=n_codons - 2)) + rng.choice(STOPS)


def to_fasta(records: list[tuple[str, str, str]]) -> str:
    """records: (id, description, sequence)."""
    out = []
    for rid, desc, seq in records:
        out.append(f">{rid} {desc}".rstrip())
        out.extend(seq[i:i + LINE] for i in range(0, len(seq), LINE))
    return "\n".join(out) + "\n"


def record_ids(rng: random.Random, n: int, prefix: str) -> list[str]:
    base = rng.randint(1, 9000)
    return [f"{prefix}_{base + i:04d}" for i in range(n)]


PREFIXES = ("seq", "read", "gene", "clone", "isolate", "frag")
DESCRIPTIONS = ("Homo sapiens synthetic fragment", "synthetic construct", "Escherichia coli synthetic locus",
                "simulated amplicon", "Mus musculus synthetic region", "")


def random_records(rng: random.Random, n: int, lo: int, hi: int) -> list[tuple[str, str, str]]:
    ids = record_ids(rng, n, rng.choice(PREFIXES))
    return [(rid, rng.choice(DESCRIPTIONS), random_seq(rng, rng.randint(lo, hi), rng.uniform(0.3, 0.7)))
            for rid in ids]


def orf_records(rng: random.Random, n: int) -> list[tuple[str, str, str]]:
    """Random flanks around a planted ORF, on either strand, so the longest ORF is usually the planted one."""
    records = []
    for rid in record_ids(rng, n, rng.choice(PREFIXES)):
        orf = coding_seq(rng, rng.randint(20, 90))
        if rng.random() < 0.5:
            orf = orf[::-1].translate(COMPLEMENT)
        gc = rng.uniform(0.35, 0.65)
        seq = random_seq(rng, rng.randint(10, 150), gc) + orf + random_seq(rng, rng.randint(10, 150), gc)
        records.append((rid, rng.choice(DESCRIPTIONS), seq))
    return records


def coding_records(rng: random.Random, n: int, codons: tuple[int, int] = (15, 80)) -> list[tuple[str, str, str]]:
    """Records that start with ATG and reach a stop after `codons` codons, followed by a random tail."""
    return [(rid, "synthetic CDS", coding_seq(rng, rng.randint(*codons)) + random_seq(rng, rng.randint(0, 60), 0.5))
            for rid in record_ids(rng, n, "cds")]


def mutate(rng: random.Random, seq: str, n_edits: int, indels: bool) -> str:
    s = list(seq)
    for _ in range(n_edits):
        kind = rng.choice(("sub", "ins", "del")) if indels else "sub"
        i = rng.randrange(len(s))
        if kind == "sub":
            s[i] = rng.choice([b for b in "ACGT" if b != s[i]])
        elif kind == "ins":
            s.insert(i, rng.choice("ACGT"))
        elif len(s) > 5:
            del s[i]
    return "".join(s)


def pair_records(rng: random.Random, n_pairs: int, indels: bool) -> list[tuple[str, str, str]]:
    records = []
    for p in range(1, n_pairs + 1):
        if indels:
            # the number of edits first, uniformly, then a length with room for them: drawing the length first
            # made small distances the common answers
            edits = rng.randint(1, MAX_INDEL_EDITS)
            a = random_seq(rng, rng.randint(max(20, 5 * edits), 90), rng.uniform(0.35, 0.65))
        else:
            a = random_seq(rng, rng.randint(40, 200), rng.uniform(0.35, 0.65))
            edits = rng.randint(1, max(2, len(a) // 5))
        b = mutate(rng, a, edits, indels)
        records += [(f"pair{p}_a", "", a), (f"pair{p}_b", "", b)]
    return records


def motif_records(rng: random.Random, n: int) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Records with a motif planted 1-6 times (sometimes back to back, so overlaps occur); returns motifs too."""
    records, motifs = [], []
    for rid in record_ids(rng, n, rng.choice(PREFIXES)):
        if rng.random() < 0.3:
            unit = random_seq(rng, rng.randint(1, 3), 0.5)
            motif = (unit * 8)[: rng.randint(max(3, len(unit) + 1), max(4, len(unit) * 3))]
        else:
            motif = random_seq(rng, rng.randint(4, 8), 0.5)
        seq = random_seq(rng, rng.randint(80, 300), rng.uniform(0.35, 0.65))
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(seq))
            seq = seq[:i] + motif * rng.choice((1, 1, 2)) + seq[i:]
        records.append((rid, rng.choice(DESCRIPTIONS), seq))
        motifs.append(motif)
    return records, motifs


def contig_records(rng: random.Random) -> list[tuple[str, str, str]]:
    n = rng.randint(8, 30)
    gc = rng.uniform(0.35, 0.65)
    return [(f"contig_{i + 1}", f"len={length}", random_seq(rng, length, gc))
            for i, length in enumerate(int(rng.lognormvariate(5.8, 0.7)) + 30 for _ in range(n))]
