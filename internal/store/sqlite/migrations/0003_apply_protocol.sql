-- The apply protocol (issue 8): one lease per project, pending plans (their
-- blobs are retained in blob_retention under the owner 'plan:<id>'), and the
-- sealed values of secrets.

CREATE TABLE leases (
    project    TEXT   PRIMARY KEY,
    token      TEXT   NOT NULL,
    holder     TEXT   NOT NULL,
    server     TEXT   NOT NULL,
    since      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX leases_server ON leases (server);

CREATE TABLE plans (
    id         TEXT   PRIMARY KEY,
    project    TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    doc        TEXT   NOT NULL
);
CREATE INDEX plans_expires ON plans (expires_at);

CREATE TABLE secret_values (
    project     TEXT   NOT NULL,
    name        TEXT   NOT NULL,
    fingerprint TEXT   NOT NULL,
    sealed      TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (project, name, fingerprint)
);
