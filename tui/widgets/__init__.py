"""Widgets shared by the client app and the host dashboard."""
