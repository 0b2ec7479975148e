-- A decision's resolver comes from the credential (DESIGN decision 9); what the request body said it was is kept
-- beside it as a note. A deprecated SSE session belongs to the credential that opened it (as /mcp sessions do).
ALTER TABLE approvals ADD COLUMN resolved_note TEXT NOT NULL DEFAULT '';
ALTER TABLE memory_sse_sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
