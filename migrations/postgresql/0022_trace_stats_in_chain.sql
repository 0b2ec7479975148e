-- The /health counts move into the chain head's row (issue 19): every trace write already updates that row, so
-- the counts ride in the same statement and the same page instead of a second UPDATE of a second table.
ALTER TABLE trace_chain ADD COLUMN total BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trace_chain ADD COLUMN allowed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trace_chain ADD COLUMN denied BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trace_chain ADD COLUMN human_approval BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trace_chain ADD COLUMN errors BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trace_chain ADD COLUMN estimated_input_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE trace_chain ADD COLUMN estimated_output_tokens BIGINT NOT NULL DEFAULT 0;
UPDATE trace_chain SET
    total = s.total,
    allowed = s.allowed,
    denied = s.denied,
    human_approval = s.human_approval,
    errors = s.errors,
    estimated_input_tokens = s.estimated_input_tokens,
    estimated_output_tokens = s.estimated_output_tokens
FROM trace_stats s WHERE s.id = 1 AND trace_chain.id = 1;
DROP TABLE trace_stats;
