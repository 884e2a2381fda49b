"""The model catalog (built-in + user models) and how a checkpoint becomes a file on disk."""
