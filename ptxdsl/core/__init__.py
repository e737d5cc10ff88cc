"""The stages every kernel goes through, with no device and no arrays: types, errors,
specs, the IR, tracing, whole-program checks and PTX text."""
