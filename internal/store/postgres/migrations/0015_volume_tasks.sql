-- Volume backups and restores (issue 30), and the volumes' backup
-- schedules, as the SQLite store's migration 0017. A tick is recorded once:
-- volume_tasks_tick makes a second record of one volume's tick fail,
-- whichever server's scheduler tries it.
CREATE TABLE volume_tasks (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    project      TEXT NOT NULL,
    volume       TEXT NOT NULL,
    host         TEXT NOT NULL,
    task_trigger TEXT NOT NULL,
    actor        TEXT NOT NULL,
    scheduled_at BIGINT NOT NULL,
    created_at   BIGINT NOT NULL,
    delivered_at BIGINT NOT NULL,
    started_at   BIGINT NOT NULL,
    ended_at     BIGINT NOT NULL,
    state        TEXT NOT NULL,
    phase        TEXT NOT NULL,
    manifest     TEXT NOT NULL,
    backup       TEXT NOT NULL,
    target       TEXT NOT NULL,
    consistency  TEXT NOT NULL,
    bytes        BIGINT NOT NULL,
    chunks       BIGINT NOT NULL,
    new_chunks   BIGINT NOT NULL,
    sent_bytes   BIGINT NOT NULL,
    stored_bytes BIGINT NOT NULL,
    output       TEXT NOT NULL,
    error        TEXT NOT NULL,
    released_at  BIGINT NOT NULL,
    forgotten_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX volume_tasks_tick ON volume_tasks (project, volume, scheduled_at) WHERE scheduled_at <> 0;
CREATE INDEX volume_tasks_volume ON volume_tasks (project, volume, created_at);
CREATE INDEX volume_tasks_unreleased ON volume_tasks (released_at);

CREATE TABLE volume_schedules (
    project    TEXT NOT NULL,
    volume     TEXT NOT NULL,
    last_tick  BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (project, volume)
);
