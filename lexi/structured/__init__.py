"""Structured output: the constraint compiler (schema and regex translation, counting, budgets, masks, indexes)."""
