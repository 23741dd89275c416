"""Position limits and RoPE schedules, checked from configs alone before inspect, convert and bench."""
