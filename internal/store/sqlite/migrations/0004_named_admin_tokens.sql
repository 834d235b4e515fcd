-- Named admin tokens and "who ran what" (issue 19): admin tokens beyond the
-- first are looked up by the hash of their secret and can be revoked; events
-- and apply records name the admin token that caused them ('' when the
-- control plane or a host did).

ALTER TABLE tokens ADD COLUMN revoked_at BIGINT NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX tokens_hash ON tokens (hash);

ALTER TABLE events ADD COLUMN actor TEXT NOT NULL DEFAULT '';
ALTER TABLE applies ADD COLUMN actor TEXT NOT NULL DEFAULT '';
