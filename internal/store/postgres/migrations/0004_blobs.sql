-- Blobs in the database (issue 17), so that every server on it serves every
-- blob and none is lost with a server's disk. An upload streams its content
-- into chunk rows of at most 1 MiB under an upload of its own, invisible to
-- readers; only once the digest is checked does a blobs row name the upload,
-- in one statement, and that row is what readers look up. Uploads that never
-- got a blobs row (failed, aborted, lost to a concurrent upload of the same
-- content, or cut by a crash) are deleted, at once or by the collector.
-- These tables are not in store.Tables: `hatch server migrate` copies blobs
-- through the blob store, from the data dir's files.

CREATE TABLE blob_uploads (
	id         BIGSERIAL   PRIMARY KEY,
	started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE blob_chunks (
	upload_id BIGINT  NOT NULL REFERENCES blob_uploads (id) ON DELETE CASCADE,
	seq       INTEGER NOT NULL,
	data      BYTEA   NOT NULL,
	PRIMARY KEY (upload_id, seq)
);
-- Chunks are kept out of line and uncompressed (EXTERNAL): compressing every
-- write would slow uploads, for space the blob size limit already bounds.
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE blobs (
	digest     TEXT        PRIMARY KEY,
	upload_id  BIGINT      NOT NULL UNIQUE REFERENCES blob_uploads (id) ON DELETE CASCADE,
	size       BIGINT      NOT NULL,
	chunk_size INTEGER     NOT NULL,
	touched_at TIMESTAMPTZ NOT NULL
);
