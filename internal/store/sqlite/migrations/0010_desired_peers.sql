-- The fleet's peer list, once (issue 17): every host's desired state
-- carried the whole valid host set, so at 1,000 hosts each row was mostly
-- peers and an apply wrote them 1,000 times. One row; the servers write it
-- again at start, so states written before it are mended then.
CREATE TABLE desired_peers (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    version    TEXT NOT NULL,
    doc        TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
