"""The upstream engine: jobs sent to an OpenAI-compatible server (engine.py), over its own
kept-alive HTTP/1.1 connections (connection.py), in the server's wire format (wire.py)."""
