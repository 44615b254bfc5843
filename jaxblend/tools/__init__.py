"""Command-line tools (absl): preprocess, build_index, dump_samples, dump_batches, inspect, launch_local."""
