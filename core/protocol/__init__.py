"""Wire models of specs 000, 001, 002, 004 and the error taxonomy. Depends on pydantic only."""
