"""TF Serving's own rules, which the export writes to and the server reads by: the version
folders of a model base path (versions), the warm-up records (warmup) and the process-wide XLA
switch (xla_compilation). Nothing here imports `tfattn`."""
