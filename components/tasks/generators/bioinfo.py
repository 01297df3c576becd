"""Bioinformatics task generators over synthetic FASTA files (GC, reverse complement, ORFs, k-mers, ...).

A FASTA file is shared by up to `per_file` consecutive tasks of a category (fewer where a file has few
distinct questions) and lives at files/bioinfo/<category>/<split>/<group>.fasta under ctx.out_dir. Every
answer is computed by calling the same module-level function whose source is embedded in the task's
reference_code. No prompt repeats within a generator call.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any, ClassVar

from components.common.io import atomic_write
from components.tasks.bioinfo import seqtools as st
from components.tasks.bioinfo import synth
from components.tasks.generators.base import GenContext
from components.tasks.generators.filetasks import Question, file_task, questions_per_file
from components.tasks.generators.refcode import RefProgram
from components.tasks.record import AnswerSpec, AnswerType, Domain, Task

DATASET = "synthetic_bioinfo"
TASKS_PER_FILE = 10
INTEGER = AnswerSpec(type=AnswerType.INTEGER)
SEQUENCE = AnswerSpec(type=AnswerType.STRING, case_sensitive=False)
POSITIONS = AnswerSpec(type=AnswerType.LIST)
FRACTION = AnswerSpec(type=AnswerType.NUMERIC, abs_tol=1e-4)
# helpers every reference program carries; entry points follow
HELPERS = (st.read_fasta, st.gc_fraction, st.codon_table, st.revcomp)


@dataclass(frozen=True)
class FastaFile:
    text: str
    records: list[tuple[str, str]]  # (id, sequence) as read back
    motifs: list[str] = field(default_factory=list)  # motif planted in each record, where relevant


def _file(records: list[tuple[str, str, str]], motifs: list[str] | None = None) -> FastaFile:
    return FastaFile(synth.to_fasta(records), [(r[0], r[2]) for r in records], motifs or [])


def _intro(rel: str) -> str:
    return (f"The FASTA file {rel} holds DNA records; a record's id is the first word after '>' and its "
            f"sequence is the concatenation of the lines that follow (line breaks are not part of it).")


@dataclass(frozen=True)
class FastaGenerator:
    category: str
    make_file: Callable[[random.Random], FastaFile]
    ask: Callable[[random.Random, str, FastaFile], Question]
    funcs: tuple[Callable[..., Any], ...]
    per_file: int = TASKS_PER_FILE
    domain: ClassVar[Domain] = Domain.BIOINFO

    def generate(self, ctx: GenContext, n: int) -> Iterator[Task]:
        rng = ctx.rng(self.category)
        program = RefProgram(st.IMPORTS, (*HELPERS, *self.funcs))

        def open_file(group: int) -> tuple[str, FastaFile]:
            rel = f"files/bioinfo/{self.category}/{ctx.split}/{group:05d}.fasta"
            fasta = self.make_file(rng)
            with atomic_write(ctx.out_dir / rel) as fh:
                fh.write(fasta.text)
            return rel, fasta

        triples = questions_per_file(n, self.per_file, open_file, lambda f: self.ask(rng, *f),
                                     lambda f, q: q.func(str(ctx.out_dir / f[0]), *q.args))
        for i, ((rel, _), q, answer) in enumerate(triples):
            yield file_task(dataset=DATASET, category=self.category, domain=self.domain, ctx=ctx, i=i, rel=rel,
                            kind="fasta", q=q, answer=answer, program=program)


# ---- files ------------------------------------------------------------------------------------------------

def short_records(rng: random.Random) -> FastaFile:
    return _file(synth.random_records(rng, rng.randint(6, 12), 20, 150))


def medium_records(rng: random.Random) -> FastaFile:
    return _file(synth.random_records(rng, rng.randint(6, 12), 100, 400))


def coding_file(rng: random.Random) -> FastaFile:
    return _file(synth.coding_records(rng, rng.randint(6, 12)))


def long_coding_file(rng: random.Random) -> FastaFile:
    # long enough that a codon occurs up to a dozen times: in 15-80 codons most codons occur once, and the
    # count questions' answers were mostly 1
    return _file(synth.coding_records(rng, rng.randint(6, 12), codons=(40, 300)))


def orf_file(rng: random.Random) -> FastaFile:
    return _file(synth.orf_records(rng, rng.randint(6, 12)))


def substitution_pairs(rng: random.Random) -> FastaFile:
    return _file(synth.pair_records(rng, rng.randint(4, 8), indels=False))


def indel_pairs(rng: random.Random) -> FastaFile:
    return _file(synth.pair_records(rng, rng.randint(4, 8), indels=True))


def motif_file(rng: random.Random) -> FastaFile:
    records, motifs = synth.motif_records(rng, rng.randint(6, 12))
    return _file(records, motifs)


def contig_file(rng: random.Random) -> FastaFile:
    return _file(synth.contig_records(rng))


# ---- questions --------------------------------------------------------------------------------------------


def all_kmers(k: int) -> tuple[str, ...]:
    """Every DNA word of length k, in alphabetical order."""
    return tuple("".join(p) for p in product("ACGT", repeat=k))


CODONS = all_kmers(3)
ABSENT_SHARE = 0.1  # count questions about a k-mer or codon the record lacks (answer 0)
SEQ_NOTE = "Answer with the sequence as one string of letters (no spaces or line breaks)."


def ask_gc(rng: random.Random, rel: str, f: FastaFile) -> Question:
    gcs = sorted((st.gc_fraction(s) for _, s in f.records), reverse=True)
    if rng.random() < 0.3 and gcs[0] - gcs[1] > 1e-9:
        prompt = (f"{_intro(rel)} GC content is (number of G + number of C) / sequence length. Which record has "
                  f"the highest GC content? Answer with its record id.")
        return Question(prompt, st.highest_gc_record, (), AnswerSpec(type=AnswerType.STRING, case_sensitive=True))
    rid = rng.choice(f.records)[0]
    prompt = (f"{_intro(rel)} What is the GC content of record {rid}, i.e. (number of G + number of C) / sequence "
              f"length? Give it as a fraction between 0 and 1 (not a percentage), unrounded.")
    return Question(prompt, st.gc_content, (rid,), FRACTION)


def ask_revcomp(rng: random.Random, rel: str, f: FastaFile) -> Question:
    rid = rng.choice(f.records)[0]
    prompt = (f"{_intro(rel)} Give the reverse complement of record {rid} (A<->T, C<->G, read 5' to 3' on the "
              f"opposite strand). {SEQ_NOTE}")
    return Question(prompt, st.reverse_complement, (rid,), SEQUENCE)


def ask_transcribe(rng: random.Random, rel: str, f: FastaFile) -> Question:
    rid = rng.choice(f.records)[0]
    prompt = (f"{_intro(rel)} Treat record {rid} as the coding (sense) strand of a gene, 5' to 3'. Give the mRNA "
              f"sequence transcribed from it (the same sequence with U in place of T). {SEQ_NOTE}")
    return Question(prompt, st.transcribe, (rid,), SEQUENCE)


def ask_translate(rng: random.Random, rel: str, f: FastaFile) -> Question:
    rid = rng.choice(f.records)[0]
    to_stop = rng.random() < 0.5
    rule = ("stop at the first stop codon and do not include it" if to_stop else
            "translate every complete codon, writing stop codons as '*', and ignore a trailing incomplete codon")
    prompt = (f"{_intro(rel)} Translate record {rid} with the standard genetic code (NCBI table 1) in frame 1, "
              f"starting at its first nucleotide; {rule}. Answer with one-letter amino-acid codes as one string.")
    return Question(prompt, st.translate, (rid, to_stop), SEQUENCE)


ORF_RULES = ("An ORF starts with ATG and ends with the first in-frame stop codon (TAA, TAG or TGA) downstream on "
             "the same strand; search all three reading frames of both the given strand and its reverse "
             "complement; an ATG without an in-frame stop before the end of the sequence does not make an ORF.")


def ask_orf(rng: random.Random, rel: str, f: FastaFile) -> Question:
    rid, seq = rng.choice(f.records)
    lengths = sorted((o[0] for o in st.orfs(seq)), reverse=True)
    if rng.random() < 0.5 and (len(lengths) == 1 or lengths[0] > lengths[1]):
        prompt = (f"{_intro(rel)} {ORF_RULES} Give the protein encoded by the longest ORF in record {rid}, "
                  f"translated with the standard genetic code, starting with its M and without the stop codon. "
                  f"Answer with one-letter amino-acid codes as one string.")
        return Question(prompt, st.longest_orf, (rid, "protein"), SEQUENCE)
    prompt = (f"{_intro(rel)} {ORF_RULES} What is the length in nucleotides, including the stop codon, of the "
              f"longest ORF in record {rid}? Answer with an integer.")
    return Question(prompt, st.longest_orf, (rid, "length"), INTEGER)


def ask_kmer(rng: random.Random, rel: str, f: FastaFile) -> Question:
    rid, seq = rng.choice(f.records)
    if rng.random() < 0.5:
        k = rng.randint(2, 6)
        prompt = (f"{_intro(rel)} Considering all overlapping substrings of length {k} of record {rid} (forward "
                  f"strand only), which {k}-mer occurs most often? If several tie, answer with the "
                  f"alphabetically first of them.")
        return Question(prompt, st.most_frequent_kmer, (rid, k), SEQUENCE)
    k = rng.randint(2, 5)
    kmer = by_count(rng, Counter(seq[i:i + k] for i in range(len(seq) - k + 1)), all_kmers(k))
    prompt = (f"{_intro(rel)} How many times does the {k}-mer {kmer} occur in record {rid}, counting overlapping "
              f"occurrences (e.g. AA occurs twice in AAA) on the forward strand only? Answer with an integer.")
    return Question(prompt, st.kmer_count, (rid, kmer), INTEGER)


def by_count(rng: random.Random, counts: Counter[str], universe: Sequence[str]) -> str:
    """An item of `universe` to count: its count drawn uniformly from the distinct counts present, then the
    item among those with that count; one time in ten an item that does not occur (count 0), where one exists.

    Drawing the item itself (a codon of the record) makes most answers 1, the count of a typical codon in a
    short record; drawing the count first spreads the answers over every count the record has.
    """
    absent = [u for u in universe if not counts[u]]
    if absent and rng.random() < ABSENT_SHARE:
        return rng.choice(absent)
    by: dict[int, list[str]] = {}
    for item, c in sorted(counts.items()):
        by.setdefault(c, []).append(item)
    return rng.choice(by[rng.choice(sorted(by))])


def ask_hamming(rng: random.Random, rel: str, f: FastaFile) -> Question:
    p = rng.randint(1, len(f.records) // 2)
    prompt = (f"{_intro(rel)} Records pair{p}_a and pair{p}_b have the same length. What is their Hamming "
              f"distance (the number of positions at which they differ)? Answer with an integer.")
    return Question(prompt, st.hamming, (f"pair{p}_a", f"pair{p}_b"), INTEGER)


def ask_edit(rng: random.Random, rel: str, f: FastaFile) -> Question:
    p = rng.randint(1, len(f.records) // 2)
    prompt = (f"{_intro(rel)} What is the edit (Levenshtein) distance between records pair{p}_a and pair{p}_b, "
              f"i.e. the minimum number of single-nucleotide substitutions, insertions and deletions turning one "
              f"into the other? Answer with an integer.")
    return Question(prompt, st.edit_distance, (f"pair{p}_a", f"pair{p}_b"), INTEGER)


def ask_motif(rng: random.Random, rel: str, f: FastaFile) -> Question:
    i = rng.randrange(len(f.records))
    rid, motif = f.records[i][0], f.motifs[i]
    prompt = (f"{_intro(rel)} Find every occurrence of the motif {motif} in record {rid}, on the given (forward) "
              f"strand only, counting overlapping occurrences. Answer with the list of their 1-based start "
              f"positions in increasing order, e.g. [3, 17, 40].")
    return Question(prompt, st.motif_positions, (rid, motif), POSITIONS)


ASSEMBLY_ASKS = {
    "n50": "the N50 of the record lengths (sort lengths in decreasing order; N50 is the length of the record at "
           "which the running total of lengths first reaches at least half of the total length)",
    "l50": "the L50 of the record lengths (sort lengths in decreasing order; L50 is the number of records needed "
           "for the running total of lengths to first reach at least half of the total length)",
    "n90": "the N90 of the record lengths (sort lengths in decreasing order; N90 is the length of the record at "
           "which the running total of lengths first reaches at least 90% of the total length)",
    "l90": "the L90 of the record lengths (sort lengths in decreasing order; L90 is the number of records needed "
           "for the running total of lengths to first reach at least 90% of the total length)",
    "total": "the total length of all records in nucleotides",
    "count": "the number of records",
    "max": "the length of the longest record in nucleotides",
    "min": "the length of the shortest record in nucleotides",
}


def ask_assembly(rng: random.Random, rel: str, f: FastaFile) -> Question:
    stat = rng.choice(("n50", "n50", "l50", "n90", "l90", "total", "count", "max", "min"))
    prompt = (f"{_intro(rel)} The records are contigs of a draft assembly. What is {ASSEMBLY_ASKS[stat]}? "
              f"Answer with an integer.")
    return Question(prompt, st.assembly_stat, (stat,), INTEGER)


def ask_codon(rng: random.Random, rel: str, f: FastaFile) -> Question:
    rid, seq = rng.choice(f.records)
    frame = "in reading frame 1 (non-overlapping triplets starting at the first nucleotide; ignore a trailing " \
            "incomplete codon)"
    if rng.random() < 0.5:
        prompt = (f"{_intro(rel)} Split record {rid} into codons {frame}. Which codon occurs most often? If "
                  f"several tie, answer with the alphabetically first of them.")
        return Question(prompt, st.most_frequent_codon, (rid,), SEQUENCE)
    codon = by_count(rng, Counter(seq[i:i + 3] for i in range(0, len(seq) - 2, 3)), CODONS)
    prompt = f"{_intro(rel)} Split record {rid} into codons {frame}. How many times does codon {codon} occur?"
    return Question(prompt + " Answer with an integer.", st.codon_count, (rid, codon), INTEGER)


# per_file stays below a file's question space (records x question kinds) so its questions rarely run out
GENERATORS = [
    FastaGenerator("bioinfo_gc_content", medium_records, ask_gc, (st.gc_content, st.highest_gc_record), per_file=5),
    FastaGenerator("bioinfo_reverse_complement", short_records, ask_revcomp, (st.reverse_complement,), per_file=5),
    FastaGenerator("bioinfo_transcription", short_records, ask_transcribe, (st.transcribe,), per_file=5),
    FastaGenerator("bioinfo_translation", coding_file, ask_translate, (st.translate,), per_file=8),
    FastaGenerator("bioinfo_longest_orf", orf_file, ask_orf, (st.orfs, st.longest_orf), per_file=6),
    FastaGenerator("bioinfo_kmer", medium_records, ask_kmer, (st.kmer_count, st.most_frequent_kmer)),
    FastaGenerator("bioinfo_hamming", substitution_pairs, ask_hamming, (st.hamming,), per_file=3),
    FastaGenerator("bioinfo_edit_distance", indel_pairs, ask_edit, (st.edit_distance,), per_file=3),
    FastaGenerator("bioinfo_motif", motif_file, ask_motif, (st.motif_positions,), per_file=5),
    FastaGenerator("bioinfo_assembly_stats", contig_file, ask_assembly, (st.assembly_stat,), per_file=4),
    FastaGenerator("bioinfo_codon_usage", long_coding_file, ask_codon, (st.codon_count, st.most_frequent_codon)),
]
