"""Helpers the tests share (fixture builders, a fake hub, a GitHub-Actions runner): never tests themselves."""
