-- Registration is open, so it is counted by address (oauth.registrations_per_minute): each client keeps the
-- address that registered it.
ALTER TABLE oauth_clients ADD COLUMN registered_from TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS oauth_clients_registered_from ON oauth_clients (registered_from, created_at);
