"""sup7, the level-1 supervisor: polls the mesh's pending approvals, decides with rules then an LLM, escalates
the rest to a human (CONTRACT 1.13 and 3)."""
