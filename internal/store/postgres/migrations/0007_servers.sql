-- The control plane's live servers (issue 17), as the SQLite store's
-- migration 0009: each server registers the URL it is reached at, renewing
-- it every few seconds; expiry is measured by the database's clock. Not
-- copied by hatch server migrate (store.Uncopied).
CREATE TABLE servers (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
