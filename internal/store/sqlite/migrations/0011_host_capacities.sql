-- The hosts' capacity baselines and pins (issue 24, finding 5): a host's
-- report of its capacity is believed up to its first report's (its
-- baseline), or to what an admin pinned with `hatch hosts set`, so a host
-- cannot draw every new replica by claiming a huge capacity.
CREATE TABLE host_capacities (
    host_id            TEXT PRIMARY KEY,
    baseline_memory    INTEGER NOT NULL,
    baseline_milli_cpu INTEGER NOT NULL,
    baseline_at        INTEGER NOT NULL,
    pinned_memory      INTEGER NOT NULL,
    pinned_milli_cpu   INTEGER NOT NULL,
    pinned_at          INTEGER NOT NULL,
    pinned_by          TEXT NOT NULL
);
