-- Joining hosts (issue 6): join tokens, and the identity of every host that
-- joined. Only hashes of token secrets are stored.

CREATE TABLE join_tokens (
    id         TEXT    PRIMARY KEY,
    hash       TEXT    NOT NULL UNIQUE,
    created_at BIGINT  NOT NULL,
    expires_at BIGINT  NOT NULL,
    max_uses   INTEGER NOT NULL,
    uses       INTEGER NOT NULL,
    revoked_at BIGINT  NOT NULL
);

CREATE TABLE host_identities (
    id         TEXT   PRIMARY KEY,
    name       TEXT   NOT NULL,
    token_hash TEXT   NOT NULL UNIQUE,
    join_token TEXT   NOT NULL,
    joined_at  BIGINT NOT NULL,
    removed_at BIGINT NOT NULL
);
-- A name belongs to one host at a time; a removed host's name may be reused.
CREATE UNIQUE INDEX host_identities_name ON host_identities (name) WHERE removed_at = 0;
