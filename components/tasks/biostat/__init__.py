"""Biostatistics task helpers: reference computations (whose source becomes each task's reference_code) and data synthesis."""
