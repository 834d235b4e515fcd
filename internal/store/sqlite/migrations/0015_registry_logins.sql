-- Cluster-wide registry logins (issue 29): `hatch registry login`. The
-- password is sealed with the control plane's key.
CREATE TABLE registry_logins (
    host        TEXT PRIMARY KEY,
    username    TEXT NOT NULL,
    sealed      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);
