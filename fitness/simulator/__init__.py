"""NKI simulator: an emulator of the legacy `neuronxcc.nki` language and a Trainium performance model."""
