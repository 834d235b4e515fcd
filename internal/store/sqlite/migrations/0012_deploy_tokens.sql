-- Project-scoped deploy tokens (issue 29): a named token is an admin token
-- or a deploy token, kept in one table so that a name means one token
-- whatever its kind. A deploy token acts on its project only
-- ("<namespace>/<name>"), and execs into its eggs only when may_exec is 1.
ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE tokens ADD COLUMN project TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN may_exec INTEGER NOT NULL DEFAULT 0;

-- A deploy token reads its project's events only.
CREATE INDEX events_project ON events (project, seq);
