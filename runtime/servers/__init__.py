"""Reaching SGLang servers: what to start (specs), starting and supervising
them (starting, supervision, processes, router), the endpoints
file, offline weights and the CPU dtype, and the connection that turns endpoints into backends."""
