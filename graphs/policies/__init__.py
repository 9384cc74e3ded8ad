"""Model backends and the policies that fill seats."""
