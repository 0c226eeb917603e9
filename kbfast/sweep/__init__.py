"""Parameter sweeps: specs expanded into points, evaluated in batches, saved as tidy tables (design §1, §8–§10)."""
