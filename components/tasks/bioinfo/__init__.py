"""Bioinformatics task helpers: reference computations (whose source becomes each task's reference_code) and FASTA synthesis."""
