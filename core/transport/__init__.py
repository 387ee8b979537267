"""infertui.core.transport."""
