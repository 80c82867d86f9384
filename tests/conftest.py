"""Shared fixtures: the bundled models are loaded once per test session."""

from __future__ import annotations
