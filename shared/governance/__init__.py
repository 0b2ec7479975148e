"""The governance engine (docs/governance.md): agent catalog and lifecycle, three-axis scores, governance rules
and verdicts, the dependency graph, the diff engine and policy replay. No web framework here."""
