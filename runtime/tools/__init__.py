"""Tools the agent can run, and the registry a hosting daemon extends."""
