"""The flux7 terminal agent: an LLM loop whose every tool call goes through the mesh (`flux7 agent`)."""
