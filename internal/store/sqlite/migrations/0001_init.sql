-- The control plane's tables. Times are Unix milliseconds (0 = never), JSON is
-- TEXT, booleans are 0/1: plain types that PostgreSQL reads the same way.

CREATE TABLE resources (
    project    TEXT    NOT NULL,
    type       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    inputs     TEXT    NOT NULL,
    outputs    TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    parents    TEXT    NOT NULL,
    pending    INTEGER NOT NULL,
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (project, type, name)
);
CREATE INDEX resources_source ON resources (source);

CREATE TABLE hosts (
    id          TEXT   PRIMARY KEY,
    state       TEXT   NOT NULL,
    state_since BIGINT NOT NULL,
    last_seen   BIGINT NOT NULL,
    status      TEXT   NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE desired_states (
    host_id    TEXT   PRIMARY KEY,
    version    TEXT   NOT NULL,
    doc        TEXT   NOT NULL,
    updated_at BIGINT NOT NULL
);

-- AUTOINCREMENT: a sequence number is never reused, even after pruning.
CREATE TABLE events (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    at       BIGINT  NOT NULL,
    type     TEXT    NOT NULL,
    project  TEXT    NOT NULL,
    host     TEXT    NOT NULL,
    resource TEXT    NOT NULL,
    message  TEXT    NOT NULL
);

CREATE TABLE applies (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    project     TEXT    NOT NULL,
    started_at  BIGINT  NOT NULL,
    finished_at BIGINT  NOT NULL,
    outcome     TEXT    NOT NULL,
    message     TEXT    NOT NULL
);
CREATE INDEX applies_project ON applies (project, id);

CREATE TABLE apply_blobs (
    apply_id BIGINT NOT NULL,
    digest   TEXT   NOT NULL,
    PRIMARY KEY (apply_id, digest)
);

CREATE TABLE blob_retention (
    owner  TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (owner, digest)
);

CREATE TABLE tokens (
    name       TEXT   PRIMARY KEY,
    hash       TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
