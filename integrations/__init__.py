"""Integrations of memevo with agent frameworks: an MCP server and a LangGraph store.

Each lives in its own module and needs an optional extra: ``memevo[mcp]`` for
:mod:`memevo.integrations.mcp_server`, ``memevo[langgraph]`` for
:mod:`memevo.integrations.langgraph`. Both are clients of a running sidecar;
neither opens a data directory.
"""
