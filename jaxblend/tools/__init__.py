"""Command-line tools (absl): preprocess, dump_samples, dump_batches, inspect, launch_local."""
