"""Known answers for the sequence reference functions, read from a real FASTA file."""

from __future__ import annotations

import pytest

from components.tasks.bioinfo import seqtools as st
from components.tasks.bioinfo import synth


@pytest.fixture()
def fasta(tmp_path):
    p = tmp_path / "t.fasta"
    p.write_text(synth.to_fasta([
        ("gfp", "start of EGFP", "ATGGTGAGCAAGGGCGAGGAGCTGTTCACCGGGTAA"),
        ("r1", "", "AATTGGCC"),
        ("r2", "lower case", "acgtacgt"),
        ("rev", "ORF on the minus strand", "GG" + "TTACATCAT" + "CC"),  # revcomp holds ATGATGTAA
        ("aaa", "", "AAAAATAAA"),
        ("pa", "", "GAGCCTACTAACGGGAT"), ("pb", "", "CATCGTAATGACGGCCT"),
        ("k", "", "kitten".upper().replace("I", "A")), ("s", "", "SITTING".replace("I", "A")),
    ]) + ">wrapped x\nACGT\nAC\n")
    return str(p)


def test_read_fasta_joins_lines_and_upper_cases(fasta):
    recs = st.read_fasta(fasta)
    assert recs["wrapped"] == "ACGTAC" and recs["r2"] == "ACGTACGT"
    assert synth.to_fasta([("x", "", "A" * 130)]).count("\n") == 4  # header + 60 + 60 + 10


def test_gc_reverse_complement_transcription(fasta):
    assert st.gc_content(fasta, "r1") == 0.5
    assert st.gc_content(fasta, "wrapped") == pytest.approx(3 / 6)
    assert st.reverse_complement(fasta, "gfp") == "TTACCCGGTGAACAGCTCCTCGCCCTTGCTCACCAT"
    assert st.transcribe(fasta, "r2") == "ACGUACGU"


def test_translation_of_known_sequence(fasta):
    assert st.translate(fasta, "gfp", True) == "MVSKGEELFTG"  # EGFP N-terminus
    assert st.translate(fasta, "gfp", False) == "MVSKGEELFTG*"
    assert st.translate(fasta, "wrapped", False) == "TY"  # ACG TAC
    assert st.translate(fasta, "r1", False) == "NW"  # AAT TGG, trailing CC ignored
    assert len(st.codon_table()) == 64 and st.codon_table()["TGA"] == "*"


def test_longest_orf_both_strands(fasta):
    assert st.longest_orf(fasta, "gfp", "length") == 36
    assert st.longest_orf(fasta, "gfp", "protein") == "MVSKGEELFTG"
    assert st.longest_orf(fasta, "rev", "length") == 9  # minus strand ATGATGTAA; outermost ATG
    assert st.longest_orf(fasta, "rev", "protein") == "MM"


def test_kmers_motifs_codons(fasta):
    assert st.kmer_count(fasta, "aaa", "AA") == 6  # overlapping: AAAAA gives 4, the final AAA gives 2
    assert st.most_frequent_kmer(fasta, "r2", 2) == "AC"  # AC, CG, GT each x2 (TA x1): alphabetical tie-break
    assert st.motif_positions(fasta, "aaa", "AAA") == [1, 2, 3, 7]
    assert st.codon_count(fasta, "gfp", "GAG") == 2
    assert st.most_frequent_codon(fasta, "gfp") == "GAG"


def test_distances(fasta):
    assert st.hamming(fasta, "pa", "pb") == 7  # Rosalind HAMM sample
    assert st.edit_distance(fasta, "k", "s") == 3  # kitten -> sitting, with I -> A in both


def test_assembly_stats(tmp_path):
    p = tmp_path / "a.fasta"
    p.write_text(synth.to_fasta([(f"c{i}", "", "A" * n) for i, n in enumerate((2, 3, 4, 5, 6, 7, 8, 9, 10))]))
    # total 54; descending 10, 9, 8 -> running 27 >= 27 -> N50 8, L50 3
    assert st.assembly_stat(str(p), "total") == 54
    assert st.assembly_stat(str(p), "n50") == 8
    assert st.assembly_stat(str(p), "l50") == 3
    assert st.assembly_stat(str(p), "count") == 9 and st.assembly_stat(str(p), "max") == 10
    # 90% of 54 is 48.6: running 10, 19, 27, 34, 40, 45, 49 -> N90 4, L90 7
    assert st.assembly_stat(str(p), "n90") == 4 and st.assembly_stat(str(p), "l90") == 7
    assert st.assembly_stat(str(p), "min") == 2
