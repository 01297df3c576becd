"""Bioinformatics task helpers: reference computations (their source becomes reference_code) and FASTA synthesis."""
