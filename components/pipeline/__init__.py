"""The pipeline as data: its plan of stages, what each stage's result depends on, and what a rerun can skip."""
