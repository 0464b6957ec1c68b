"""The `lookahead` command line. Nothing in the package imports it."""
