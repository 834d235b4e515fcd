-- The hosts' capacity baselines and pins, as the SQLite store's migration
-- 0011: a host's report of its capacity is believed up to its first
-- report's, or to what an admin pinned with `hatch hosts set`.
CREATE TABLE host_capacities (
    host_id            TEXT PRIMARY KEY,
    baseline_memory    BIGINT NOT NULL,
    baseline_milli_cpu BIGINT NOT NULL,
    baseline_at        BIGINT NOT NULL,
    pinned_memory      BIGINT NOT NULL,
    pinned_milli_cpu   BIGINT NOT NULL,
    pinned_at          BIGINT NOT NULL,
    pinned_by          TEXT NOT NULL
);
