-- Project-scoped deploy tokens (issue 29), as the SQLite store's migration
-- 0012: a named token is an admin token or a deploy token, kept in one table
-- so that a name means one token whatever its kind. may_exec is an integer
-- (0 or 1), as in SQLite, so that a copy between the stores moves it as it is.
ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE tokens ADD COLUMN project TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN may_exec INTEGER NOT NULL DEFAULT 0;

-- A deploy token reads its project's events only.
CREATE INDEX events_project ON events (project, seq);
