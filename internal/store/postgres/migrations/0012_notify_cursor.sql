-- Notifications (issue 29 point 5), as the SQLite store's migration 0014:
-- the seq of the last event the loops' holder handed to the webhook
-- deliveries, one row (id 1), so that with several servers each event is
-- notified once, and a new holder resumes where the last one stopped.
CREATE TABLE notify_cursor (
    id  BIGINT PRIMARY KEY,
    seq BIGINT NOT NULL
);
