-- Runs of eggs and the schedules' states (issue 28). A tick is recorded
-- once: runs_tick makes a second record of one egg's tick fail, whichever
-- server's scheduler tries it.
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    project        TEXT NOT NULL,
    egg            TEXT NOT NULL,
    host           TEXT NOT NULL,
    run_trigger    TEXT NOT NULL,
    actor          TEXT NOT NULL,
    scheduled_at   INTEGER NOT NULL,
    created_at     INTEGER NOT NULL,
    delivered_at   INTEGER NOT NULL,
    delay_ms       INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    ended_at       INTEGER NOT NULL,
    state          TEXT NOT NULL,
    exit_code      INTEGER NOT NULL,
    error          TEXT NOT NULL,
    kept           INTEGER NOT NULL,
    command        TEXT NOT NULL,
    timeout_ms     INTEGER NOT NULL,
    stop_requested INTEGER NOT NULL,
    stop_egg       INTEGER NOT NULL,
    missed         INTEGER NOT NULL,
    released_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX runs_tick ON runs (project, egg, scheduled_at) WHERE scheduled_at <> 0;
CREATE INDEX runs_egg ON runs (project, egg, created_at);
CREATE INDEX runs_unreleased ON runs (released_at);

CREATE TABLE schedule_states (
    project    TEXT NOT NULL,
    egg        TEXT NOT NULL,
    paused     INTEGER NOT NULL,
    last_tick  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project, egg)
);
