"""The app's screens: chat, queue, metrics and engines (both apps), live streams (host)."""
