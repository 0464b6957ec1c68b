"""Real SGLang CPU servers for tests, started through the project's own launcher."""


def cpu_servers(tmp_path_factory, draft: str, target: str, startup_timeout_s: float = 300):
    """Real SGLang CPU servers through the project's launcher (the judge shares the target's); stopped after."""
    from lookahead_reasoning.runtime.servers.specs import LaunchSpec
    from lookahead_reasoning.runtime.servers.starting import ServerGroup

    group = ServerGroup(
        LaunchSpec(draft, target, device="cpu", max_total_tokens=8192),
        log_dir=tmp_path_factory.mktemp("server-logs"), startup_timeout_s=startup_timeout_s, log=lambda m: None,
    )
    with group:
        yield group
