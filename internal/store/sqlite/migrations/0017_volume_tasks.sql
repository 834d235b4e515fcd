-- Volume backups and restores (issue 30), and the volumes' backup
-- schedules. A tick is recorded once: volume_tasks_tick makes a second
-- record of one volume's tick fail, whichever server's scheduler tries it.
CREATE TABLE volume_tasks (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    project      TEXT NOT NULL,
    volume       TEXT NOT NULL,
    host         TEXT NOT NULL,
    task_trigger TEXT NOT NULL,
    actor        TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    ended_at     INTEGER NOT NULL,
    state        TEXT NOT NULL,
    phase        TEXT NOT NULL,
    manifest     TEXT NOT NULL,
    backup       TEXT NOT NULL,
    target       TEXT NOT NULL,
    consistency  TEXT NOT NULL,
    bytes        INTEGER NOT NULL,
    chunks       INTEGER NOT NULL,
    new_chunks   INTEGER NOT NULL,
    sent_bytes   INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL,
    output       TEXT NOT NULL,
    error        TEXT NOT NULL,
    released_at  INTEGER NOT NULL,
    forgotten_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX volume_tasks_tick ON volume_tasks (project, volume, scheduled_at) WHERE scheduled_at <> 0;
CREATE INDEX volume_tasks_volume ON volume_tasks (project, volume, created_at);
CREATE INDEX volume_tasks_unreleased ON volume_tasks (released_at);

CREATE TABLE volume_schedules (
    project    TEXT NOT NULL,
    volume     TEXT NOT NULL,
    last_tick  INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project, volume)
);
