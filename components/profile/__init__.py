"""The profile: one YAML file in configs/ (demo, smoke, paper; diag-demo, diag-smoke) as typed settings.

config   PipelineConfig, its sections and load_config; each engine's own settings come from the engine
diag     the `diag:` section, DiagGym's stages end to end

It sits in the composition layer, beside components/pipeline: it imports the engines' settings, and nothing below
it imports the profile (tests/test_layers.py). An engine is handed the settings it reads.
"""
