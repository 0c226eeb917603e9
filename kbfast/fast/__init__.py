"""Fast path: closed-form transfer latencies, occupancy and contention bounds (design §6)."""
