-- The control plane's live servers (issue 17): each server registers the URL
-- it is reached at, renewing it every few seconds, so that desired-state
-- answers can list them. Not copied by hatch server migrate (store.Uncopied).
CREATE TABLE servers (
    id         TEXT PRIMARY KEY,
    url        TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
