"""Task sources: the built-in arithmetic generator and loaders for GSM8K/MATH files."""
