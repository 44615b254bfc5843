"""Tests of jaxblend.preprocess."""
