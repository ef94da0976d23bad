"""What surrounds the model without being it: the run directory's layout (run_dir), checkpoint
averaging (checkpoints), attention pictures (attention_plot) and length buckets (shapes)."""
