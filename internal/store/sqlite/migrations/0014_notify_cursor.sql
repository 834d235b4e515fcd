-- Notifications (issue 29 point 5): the seq of the last event the loops'
-- holder handed to the webhook deliveries, one row (id 1), so that with
-- several servers each event is notified once, and a new holder resumes
-- where the last one stopped.
CREATE TABLE notify_cursor (
    id  INTEGER PRIMARY KEY,
    seq INTEGER NOT NULL
);
