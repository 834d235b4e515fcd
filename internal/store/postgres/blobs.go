package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/hatchery/hatchery/internal/blob"
)

// ChunkSize is the most content one chunk row holds: an upload or a read
// holds one chunk in memory at a time, never the whole blob.
const ChunkSize = 1 << 20

// Blobs is the blob store in the database (migration 0004): every server on
// it serves every blob, and a blob outlives the server it was uploaded to.
//
// An upload writes its chunks, each in a statement of its own, under a row
// of blob_uploads that no reader looks at; once the content is all read and
// its digest checked, one transaction adds the blobs row that names the
// upload, and readers find it from then on. So a partial, mismatched or
// aborted upload is never served. Its chunks are deleted when it fails, or by
// Collect if the server died first. Uploads of the same content race only on
// that last insert: the first wins, the others drop their chunks and answer
// with the winner's blob. Times (a blob's grace) are the database's now(), so
// servers whose clocks differ agree on them.
type Blobs struct {
	s         *Store
	chunkSize int
}

var _ blob.Storage = (*Blobs)(nil)

// Blobs returns the blob store kept in this database.
func (s *Store) Blobs() *Blobs { return &Blobs{s: s, chunkSize: ChunkSize} }

// Put stores the content read from r under digest (see blob.Storage.Put),
// streaming it into chunk rows.
func (b *Blobs) Put(ctx context.Context, digest string, r io.Reader, limit int64) (blob.Info, bool, error) {
	h, err := blob.ParseDigest(digest)
	if err != nil {
		return blob.Info{}, false, err
	}
	if info, err := b.Touch(ctx, digest); err == nil {
		return info, false, nil
	} else if !errors.Is(err, blob.ErrNotFound) {
		return blob.Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	var upload int64
	if err := b.s.db.QueryRow(ctx, `INSERT INTO blob_uploads DEFAULT VALUES RETURNING id`).Scan(&upload); err != nil {
		return blob.Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	kept := false
	defer func() {
		if !kept {
			b.dropUpload(ctx, digest, upload)
		}
	}()

	hash := sha256.New()
	buf := make([]byte, b.chunkSize)
	body := io.LimitReader(r, limit+1)
	var size int64
	for seq := 0; ; seq++ {
		n, rerr := fill(body, buf)
		size += int64(n)
		if rerr != nil && rerr != io.EOF {
			return blob.Info{}, false, fmt.Errorf("put %s: read content: %w", digest, rerr)
		}
		if err := ctx.Err(); err != nil {
			return blob.Info{}, false, fmt.Errorf("put %s: %w", digest, err)
		}
		if size > limit {
			return blob.Info{}, false, fmt.Errorf("put %s: more than %d bytes: %w", digest, limit, blob.ErrTooLarge)
		}
		if n > 0 {
			hash.Write(buf[:n])
			if err := b.putChunk(ctx, upload, seq, buf[:n]); err != nil {
				return blob.Info{}, false, fmt.Errorf("put %s: chunk %d: %w", digest, seq, classify(err))
			}
		}
		if rerr == io.EOF {
			break
		}
	}
	if got := hex.EncodeToString(hash.Sum(nil)); got != h {
		return blob.Info{}, false, fmt.Errorf("put %s: %w (got sha256:%s)", digest, blob.ErrDigestMismatch, got)
	}
	info, created, err := b.install(ctx, digest, upload, size)
	if err != nil {
		return blob.Info{}, false, fmt.Errorf("put %s: %w", digest, err)
	}
	kept = created
	return info, created, nil
}

// putChunk stores one chunk of an upload, without waiting for the disk: the
// chunk matters only once install commits, and that commit, waited for,
// flushes the write-ahead log up to it, chunks included. An upload thus
// waits for one flush, not one per chunk.
func (b *Blobs) putChunk(ctx context.Context, upload int64, seq int, data []byte) error {
	return pgx.BeginTxFunc(ctx, b.s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO blob_chunks (upload_id, seq, data) VALUES ($1, $2, $3)`, upload, seq, data)
		return err
	})
}

// install makes a verified upload the blob digest, unless a concurrent upload
// of the same content did first (created false: the caller drops this one).
// Marking the upload active in the same transaction keeps Collect, which
// removes only uploads inactive past the grace and rechecks a row it waited
// for, from taking it.
func (b *Blobs) install(ctx context.Context, digest string, upload, size int64) (info blob.Info, created bool, err error) {
	for range 3 { // a winner collected between our insert and our touch: try again
		err = b.s.writeTx(ctx, false, func(tx *txn) error {
			tag, err := tx.Exec(ctx, `UPDATE blob_uploads SET started_at = now() WHERE id = $1`, upload)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return errors.New("the upload outlasted the blob grace period and was collected: upload it again")
			}
			var touched time.Time
			err = tx.QueryRow(ctx, `INSERT INTO blobs (digest, upload_id, size, chunk_size, touched_at)
				VALUES ($1, $2, $3, $4, now()) ON CONFLICT (digest) DO NOTHING RETURNING touched_at`,
				digest, upload, size, b.chunkSize).Scan(&touched)
			if errors.Is(err, pgx.ErrNoRows) {
				created = false
				return nil
			}
			info, created = blob.Info{Digest: digest, Size: size, ModTime: touched}, true
			return err
		})
		if err != nil || created {
			return info, created, err
		}
		info, err = b.Touch(ctx, digest)
		if !errors.Is(err, blob.ErrNotFound) {
			return info, false, err
		}
	}
	return blob.Info{}, false, errors.New("the blob was stored and collected again three times during this upload")
}

// dropUpload deletes a failed upload's chunks, even once ctx ended (a
// client gone mid-upload is the usual failure). Failing that, Collect
// deletes them after the grace period.
func (b *Blobs) dropUpload(ctx context.Context, digest string, upload int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := b.s.pool.Exec(ctx, `DELETE FROM blob_uploads WHERE id = $1`, upload); err != nil {
		b.s.log.Warn("the chunks of a failed upload were not deleted: blob collection will", zap.String("digest", digest),
			zap.Int64("upload", upload), zap.Error(classify(err)))
	}
}

// fill reads into buf until it is full or r ends (io.EOF) or fails, and
// returns what it read; unlike io.ReadFull, it tells a body that ended from
// one that failed with io.ErrUnexpectedEOF.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Stat describes a stored blob, or returns blob.ErrNotFound.
func (b *Blobs) Stat(ctx context.Context, digest string) (blob.Info, error) {
	if _, err := blob.ParseDigest(digest); err != nil {
		return blob.Info{}, err
	}
	info := blob.Info{Digest: digest}
	err := b.s.db.QueryRow(ctx, `SELECT size, touched_at FROM blobs WHERE digest = $1`, digest).Scan(&info.Size, &info.ModTime)
	return info, blobNotFound(digest, "stat", err)
}

// Touch restarts a stored blob's grace period, by the database's clock.
func (b *Blobs) Touch(ctx context.Context, digest string) (blob.Info, error) {
	if _, err := blob.ParseDigest(digest); err != nil {
		return blob.Info{}, err
	}
	info := blob.Info{Digest: digest}
	err := b.s.db.QueryRow(ctx, `UPDATE blobs SET touched_at = now() WHERE digest = $1 RETURNING size, touched_at`,
		digest).Scan(&info.Size, &info.ModTime)
	return info, blobNotFound(digest, "touch", err)
}

func blobNotFound(digest, op string, err error) error {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", digest, blob.ErrNotFound)
	case err != nil:
		return fmt.Errorf("%s %s: %w", op, digest, err)
	}
	return nil
}

// HasSource reports whether a blob is stored: the reconciler's SourceStorage.
func (b *Blobs) HasSource(ctx context.Context, digest string) (bool, error) {
	_, err := b.Stat(ctx, digest)
	if errors.Is(err, blob.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// List describes every stored blob, sorted by digest.
func (b *Blobs) List(ctx context.Context) ([]blob.Info, error) {
	rows, err := b.s.db.Query(ctx, `SELECT digest, size, touched_at FROM blobs ORDER BY digest`)
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", err)
	}
	var out []blob.Info
	for rows.Next() {
		var i blob.Info
		if err := rows.Scan(&i.Digest, &i.Size, &i.ModTime); err != nil {
			return nil, fmt.Errorf("list blobs: %w", classify(err))
		}
		out = append(out, i)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list blobs: %w", classify(err))
	}
	return out, nil
}

// Bytes returns the size of every stored blob, added up.
func (b *Blobs) Bytes(ctx context.Context) (int64, error) {
	var n int64
	if err := b.s.db.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0)::BIGINT FROM blobs`).Scan(&n); err != nil {
		return 0, fmt.Errorf("blob bytes: %w", err)
	}
	return n, nil
}

// Collect removes every blob that is not referenced and was last uploaded or
// touched more than grace ago by the database's clock, with its chunks, and
// the chunks of uploads that stopped (a server died mid-upload) more than
// grace ago. A Touch racing it either commits first (the row no longer
// matches when the delete rechecks it) or finds the blob gone.
func (b *Blobs) Collect(ctx context.Context, referenced []string, grace time.Duration) ([]blob.Info, error) {
	if referenced == nil {
		referenced = []string{}
	}
	var removed []blob.Info
	err := b.s.writeTx(ctx, false, func(tx *txn) error {
		removed = nil
		rows, err := tx.Query(ctx, `DELETE FROM blobs
			WHERE digest <> ALL($1) AND touched_at < now() - make_interval(secs => $2)
			RETURNING digest, size, touched_at, upload_id`, referenced, grace.Seconds())
		if err != nil {
			return err
		}
		var uploads []int64
		for rows.Next() {
			var i blob.Info
			var upload int64
			if err := rows.Scan(&i.Digest, &i.Size, &i.ModTime, &upload); err != nil {
				return err
			}
			removed, uploads = append(removed, i), append(uploads, upload)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM blob_uploads WHERE id = ANY($1)`, uploads); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM blob_uploads u
			WHERE started_at < now() - make_interval(secs => $1)
			AND NOT EXISTS (SELECT 1 FROM blobs b WHERE b.upload_id = u.id)`, grace.Seconds())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("collect blobs: %w", err)
	}
	return removed, nil
}

// Open opens a stored blob for reading, or returns blob.ErrNotFound. The
// reader fetches one chunk at a time, with ctx.
func (b *Blobs) Open(ctx context.Context, digest string) (blob.Reader, blob.Info, error) {
	if _, err := blob.ParseDigest(digest); err != nil {
		return nil, blob.Info{}, err
	}
	r := &chunkReader{ctx: ctx, s: b.s, digest: digest, seq: -1}
	info := blob.Info{Digest: digest}
	err := b.s.db.QueryRow(ctx, `SELECT upload_id, size, chunk_size, touched_at FROM blobs WHERE digest = $1`, digest).
		Scan(&r.upload, &info.Size, &r.chunkSize, &info.ModTime)
	if err := blobNotFound(digest, "open", err); err != nil {
		return nil, blob.Info{}, err
	}
	r.size = info.Size
	return r, info, nil
}

// chunkReader reads a blob's chunks in turn, holding the current one.
type chunkReader struct {
	ctx       context.Context
	s         *Store
	digest    string
	upload    int64
	size      int64
	chunkSize int64

	off   int64  // the next byte to read
	seq   int64  // the chunk held in chunk, -1 for none
	chunk []byte // its content
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if r.s == nil {
		return 0, errors.New("read of a closed blob")
	}
	if r.off >= r.size {
		return 0, io.EOF
	}
	seq := r.off / r.chunkSize
	if seq != r.seq {
		want := min(r.chunkSize, r.size-seq*r.chunkSize)
		r.chunk = r.chunk[:0]
		err := r.s.db.QueryRow(r.ctx, `SELECT data FROM blob_chunks WHERE upload_id = $1 AND seq = $2`, r.upload, seq).Scan(&r.chunk)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("read %s: chunk %d is gone (the blob was collected while read)", r.digest, seq)
		}
		if err != nil {
			return 0, fmt.Errorf("read %s: chunk %d: %w", r.digest, seq, err)
		}
		if int64(len(r.chunk)) != want {
			r.seq = -1
			return 0, fmt.Errorf("read %s: chunk %d holds %d bytes, want %d", r.digest, seq, len(r.chunk), want)
		}
		r.seq = seq
	}
	n := copy(p, r.chunk[r.off-seq*r.chunkSize:])
	r.off += int64(n)
	return n, nil
}

func (r *chunkReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.size
	default:
		return 0, fmt.Errorf("seek %s: bad whence %d", r.digest, whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek %s: negative offset %d", r.digest, offset)
	}
	r.off = offset
	return offset, nil
}

func (r *chunkReader) Close() error {
	r.s, r.chunk = nil, nil
	return nil
}
