"""Variation operators: LLM mutation / crossover / repair / summarizer and the offline operators (knob moves, structural rewrites)."""
