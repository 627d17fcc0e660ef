"""Test helpers that run real services (no mocks): a schema registry over HTTP."""
