-- hatch run -it (issue 28 point 1): a run whose container gets a terminal
-- and its operator's input, started once the operator is attached.
ALTER TABLE runs ADD COLUMN tty INTEGER NOT NULL DEFAULT 0;
