-- hatch history and hatch rollback (issue 19): an apply record keeps what it
-- applied (the deploy service's encoding of its resources and dependencies,
-- secret values never: only their keyed fingerprints), so a rollback can
-- apply it again; a one-line summary of its changes, the digest of its spec
-- and sources, and the apply it rolled back to (0: none).

ALTER TABLE applies ADD COLUMN inputs TEXT NOT NULL DEFAULT '';
ALTER TABLE applies ADD COLUMN summary TEXT NOT NULL DEFAULT '';
ALTER TABLE applies ADD COLUMN digest TEXT NOT NULL DEFAULT '';
ALTER TABLE applies ADD COLUMN rollback_of BIGINT NOT NULL DEFAULT 0;
