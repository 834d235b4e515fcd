-- Runs of eggs and the schedules' states, as the SQLite store's migration
-- 0013. A tick is recorded once: runs_tick makes a second record of one egg's tick fail, whichever
-- server's scheduler tries it.
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    project        TEXT NOT NULL,
    egg            TEXT NOT NULL,
    host           TEXT NOT NULL,
    run_trigger    TEXT NOT NULL,
    actor          TEXT NOT NULL,
    scheduled_at   BIGINT NOT NULL,
    created_at     BIGINT NOT NULL,
    delivered_at   BIGINT NOT NULL,
    delay_ms       BIGINT NOT NULL,
    started_at     BIGINT NOT NULL,
    ended_at       BIGINT NOT NULL,
    state          TEXT NOT NULL,
    exit_code      BIGINT NOT NULL,
    error          TEXT NOT NULL,
    kept           BIGINT NOT NULL,
    command        TEXT NOT NULL,
    timeout_ms     BIGINT NOT NULL,
    stop_requested BIGINT NOT NULL,
    stop_egg       BIGINT NOT NULL,
    missed         BIGINT NOT NULL,
    released_at    BIGINT NOT NULL
);
CREATE UNIQUE INDEX runs_tick ON runs (project, egg, scheduled_at) WHERE scheduled_at <> 0;
CREATE INDEX runs_egg ON runs (project, egg, created_at);
CREATE INDEX runs_unreleased ON runs (released_at);

CREATE TABLE schedule_states (
    project    TEXT NOT NULL,
    egg        TEXT NOT NULL,
    paused     BIGINT NOT NULL,
    last_tick  BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (project, egg)
);
