"""Hyperswarm face: spec 000 between host and client, reached by server ID."""
