-- /metrics: the tool and agent label values admitted so far, shared by every worker. Once a label holds
-- metrics.max_tools / metrics.max_agents values, later values are counted as `other` (bounded cardinality).
CREATE TABLE IF NOT EXISTS metric_label_values (
    label TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (label, value)
);
