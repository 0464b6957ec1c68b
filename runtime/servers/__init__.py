"""Reaching SGLang servers: starting and supervising them (launcher, processes, router), the endpoints
file, offline weights and the CPU dtype, and the connection that turns endpoints into backends."""
