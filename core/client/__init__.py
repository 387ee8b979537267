"""infertui.core.client."""
