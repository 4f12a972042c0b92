"""What hosts toolprep's actors: providers, tools, the ACP connection, the CLI."""
