"""Which target layers feed a head, in each convention engines and exporters store them (docs/taps.md)."""
