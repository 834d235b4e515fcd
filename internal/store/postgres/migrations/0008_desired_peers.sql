-- The fleet's peer list, once, as the SQLite store's migration 0010: every
-- host's desired state carried the whole valid host set, so at 1,000 hosts
-- each row was mostly peers and an apply wrote them 1,000 times.
CREATE TABLE desired_peers (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    version    TEXT NOT NULL,
    doc        TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
