"""The training example's parts: a small decoder-only LM, checkpoints and the built-in corpus."""
