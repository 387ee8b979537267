"""infertui: serve and use a local LLM from a terminal."""
