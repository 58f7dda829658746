"""Variation operators: LLM mutation / crossover / repair / summarizer and offline knob tuning."""
