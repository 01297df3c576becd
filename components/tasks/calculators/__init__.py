"""Clinical calculators in the MedCalc-Bench sense: formulas, unit conversions, note rendering, registry."""
