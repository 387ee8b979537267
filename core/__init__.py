"""infertui core: the host library. Never imports textual, rich or the tui."""
