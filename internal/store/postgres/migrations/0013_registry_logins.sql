-- Cluster-wide registry logins, as the SQLite store's migration 0015. The
-- password is sealed with the control plane's key.
CREATE TABLE registry_logins (
    host        TEXT PRIMARY KEY,
    username    TEXT NOT NULL,
    sealed      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);
