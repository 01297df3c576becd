"""Reference computations over FASTA files; each function's source is embedded in reference_code.

Record ids are the first whitespace-separated word after '>'; sequences are read upper-case with line
breaks removed. Every function returns plain Python values so json.dumps prints them.
"""

from __future__ import annotations

from collections import Counter

IMPORTS = ("from collections import Counter",)


def read_fasta(path):
    records, name, chunks = {}, None, []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith(">"):
                if name is not None:
                    records[name] = "".join(chunks).upper()
                name, chunks = line[1:].split()[0], []
            elif line:
                chunks.append(line)
    if name is not None:
        records[name] = "".join(chunks).upper()
    return records


def gc_fraction(seq):
    return (seq.count("G") + seq.count("C")) / len(seq)


def codon_table():
    bases = "TCAG"
    aas = "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG"
    codons = [a + b + c for a in bases for b in bases for c in bases]
    return dict(zip(codons, aas, strict=True))


def revcomp(seq):
    return seq[::-1].translate(str.maketrans("ACGT", "TGCA"))


def gc_content(path, record_id):
    return gc_fraction(read_fasta(path)[record_id])


def highest_gc_record(path):
    records = read_fasta(path)
    return max(records, key=lambda rid: gc_fraction(records[rid]))


def reverse_complement(path, record_id):
    return revcomp(read_fasta(path)[record_id])


def transcribe(path, record_id):
    return read_fasta(path)[record_id].replace("T", "U")


def translate(path, record_id, to_stop):
    """Frame 1 from the first base; to_stop: stop before the first stop codon, else stops are '*'."""
    seq, table = read_fasta(path)[record_id], codon_table()
    protein = []
    for i in range(0, len(seq) - 2, 3):
        aa = table[seq[i:i + 3]]
        if aa == "*" and to_stop:
            break
        protein.append(aa)
    return "".join(protein)


def orfs(seq):
    """(length in nt incl. stop, protein without stop) for each ORF: ATG to the first in-frame stop, 6 frames,
    the outermost ATG per stop (nested ATGs only give shorter ORFs); ORFs running off the end are skipped."""
    table, found = codon_table(), []
    for strand in (seq, revcomp(seq)):
        for frame in range(3):
            start = None
            for i in range(frame, len(strand) - 2, 3):
                codon = strand[i:i + 3]
                if start is None and codon == "ATG":
                    start = i
                elif start is not None and table[codon] == "*":
                    orf = strand[start:i]
                    found.append((i + 3 - start, "".join(table[orf[j:j + 3]] for j in range(0, len(orf), 3))))
                    start = None
    return found


def longest_orf(path, record_id, what):
    best = max(orfs(read_fasta(path)[record_id]))
    return best[0] if what == "length" else best[1]


def kmer_count(path, record_id, kmer):
    seq = read_fasta(path)[record_id]
    return sum(1 for i in range(len(seq) - len(kmer) + 1) if seq[i:i + len(kmer)] == kmer)


def most_frequent_kmer(path, record_id, k):
    """Ties go to the lexicographically smallest k-mer."""
    seq = read_fasta(path)[record_id]
    counts = Counter(seq[i:i + k] for i in range(len(seq) - k + 1))
    return min(counts, key=lambda km: (-counts[km], km))


def hamming(path, id_a, id_b):
    records = read_fasta(path)
    a, b = records[id_a], records[id_b]
    return sum(x != y for x, y in zip(a, b, strict=True))


def edit_distance(path, id_a, id_b):
    """Levenshtein distance: unit-cost substitution, insertion and deletion."""
    records = read_fasta(path)
    a, b = records[id_a], records[id_b]
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def motif_positions(path, record_id, motif):
    """1-based start positions of every occurrence on the given strand, overlaps included."""
    seq = read_fasta(path)[record_id]
    return [i + 1 for i in range(len(seq) - len(motif) + 1) if seq[i:i + len(motif)] == motif]


def assembly_stat(path, stat):
    lengths = sorted((len(s) for s in read_fasta(path).values()), reverse=True)
    if stat == "total":
        return sum(lengths)
    if stat == "count":
        return len(lengths)
    if stat == "max":
        return lengths[0]
    if stat == "min":
        return lengths[-1]
    pct = int(stat[1:])  # n50, l90, ...: integer arithmetic, so the threshold is exact
    running = 0
    for i, length in enumerate(lengths, 1):
        running += length
        if 100 * running >= pct * sum(lengths):
            return length if stat[0] == "n" else i
    raise ValueError("empty assembly")


def codon_count(path, record_id, codon):
    seq = read_fasta(path)[record_id]
    return sum(1 for i in range(0, len(seq) - 2, 3) if seq[i:i + 3] == codon)


def most_frequent_codon(path, record_id):
    """Codons of frame 1 from the first base; ties go to the lexicographically smallest codon."""
    seq = read_fasta(path)[record_id]
    counts = Counter(seq[i:i + 3] for i in range(0, len(seq) - 2, 3))
    return min(counts, key=lambda c: (-counts[c], c))
