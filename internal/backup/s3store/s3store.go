// Package s3store keeps backups in an S3-compatible bucket (minio-go): a
// backup.Store, so that backups outlive the control plane's database. Under
// the URL's prefix, chunks are objects "chunks/<first 2 hex digits>/<id>" and
// manifests "manifests/<id>": listing the manifests is listing one prefix,
// which is all a new control plane needs (with the backup key) to find every
// backup.
//
// Credentials come from the environment or a credentials file, never from a
// flag (a flag is seen in the process list): LoadCredentials.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hatchery/hatchery/internal/backup"
)

// Config says which bucket and how to reach it.
type Config struct {
	// URL is s3://bucket or s3://bucket/prefix.
	URL string
	// Endpoint is the S3 server, https://host[:port] (http:// only for a
	// server on loopback or a trusted network); empty is AWS's.
	Endpoint string
	// Region is the bucket's, if the server needs it.
	Region      string
	Credentials Credentials
}

// Credentials are an access key's.
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// The environment variables LoadCredentials reads: AWS's own names.
const (
	EnvAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvSessionToken    = "AWS_SESSION_TOKEN"
	EnvCredentialsFile = "AWS_SHARED_CREDENTIALS_FILE"
	EnvProfile         = "AWS_PROFILE"
)

// LoadCredentials reads the access key from the environment (getenv is
// os.Getenv but in tests): AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
// AWS_SESSION_TOKEN), else the file AWS_SHARED_CREDENTIALS_FILE names, an AWS
// credentials file, at its AWS_PROFILE section ("default" if unset).
func LoadCredentials(getenv func(string) string) (Credentials, error) {
	id, secret := getenv(EnvAccessKeyID), getenv(EnvSecretAccessKey)
	if id != "" || secret != "" {
		if id == "" || secret == "" {
			return Credentials{}, fmt.Errorf("s3 credentials: set both %s and %s", EnvAccessKeyID, EnvSecretAccessKey)
		}
		return Credentials{AccessKeyID: id, SecretAccessKey: secret, SessionToken: getenv(EnvSessionToken)}, nil
	}
	file := getenv(EnvCredentialsFile)
	if file == "" {
		return Credentials{}, fmt.Errorf("s3 credentials: set %s and %s, or %s to a credentials file", EnvAccessKeyID, EnvSecretAccessKey, EnvCredentialsFile)
	}
	profile := getenv(EnvProfile)
	if profile == "" {
		profile = "default"
	}
	// nil: the default context; reading a file needs no HTTP client.
	v, err := credentials.NewFileAWSCredentials(file, profile).GetWithContext(nil)
	if err != nil {
		return Credentials{}, fmt.Errorf("s3 credentials: %s (profile %s): %w", file, profile, err)
	}
	if v.AccessKeyID == "" || v.SecretAccessKey == "" {
		return Credentials{}, fmt.Errorf("s3 credentials: %s has no aws_access_key_id and aws_secret_access_key in profile %s", file, profile)
	}
	return Credentials{AccessKeyID: v.AccessKeyID, SecretAccessKey: v.SecretAccessKey, SessionToken: v.SessionToken}, nil
}

// Validate names each field that is wrong.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := parseURL(c.URL); err != nil {
		errs = append(errs, err)
	}
	if c.Endpoint != "" {
		if _, _, err := parseEndpoint(c.Endpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Credentials.AccessKeyID == "" || c.Credentials.SecretAccessKey == "" {
		errs = append(errs, errors.New("s3 credentials: no access key (LoadCredentials)"))
	}
	return errors.Join(errs...)
}

func parseURL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("backup store %q: want s3://bucket or s3://bucket/prefix", raw)
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

func parseEndpoint(raw string) (host string, secure bool, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", false, fmt.Errorf("s3 endpoint %q: want https://host[:port]", raw)
	}
	return u.Host, u.Scheme == "https", nil
}

// Store is a backup.Store on a bucket. Safe for concurrent use.
type Store struct {
	client *minio.Client
	bucket string
	prefix string
}

var _ backup.Store = (*Store)(nil)

// New returns the store cfg describes. It makes no request: a bucket that
// does not exist or refuses the key fails the first call.
func New(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bucket, prefix, _ := parseURL(cfg.URL)
	host, secure := "s3.amazonaws.com", true
	if cfg.Endpoint != "" {
		host, secure, _ = parseEndpoint(cfg.Endpoint)
	}
	c := cfg.Credentials
	client, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		Secure:       secure,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %s: %w", cfg.Endpoint, err)
	}
	return &Store{client: client, bucket: bucket, prefix: prefix}, nil
}

func (s *Store) chunkKey(id string) string    { return s.prefix + "chunks/" + id[:2] + "/" + id }
func (s *Store) manifestKey(id string) string { return s.prefix + "manifests/" + id }

func (s *Store) put(ctx context.Context, key, id string, data []byte) error {
	if err := backup.CheckObject(id, data); err != nil {
		return err
	}
	_, err := s.client.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// get reads an object, at most limit bytes.
func (s *Store) get(ctx context.Context, key string, limit int64) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.readErr(key, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(io.LimitReader(obj, limit+1))
	if err != nil {
		return nil, s.readErr(key, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("get s3://%s/%s: more than %d bytes", s.bucket, key, limit)
	}
	return data, nil
}

func (s *Store) readErr(key string, err error) error {
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return fmt.Errorf("s3://%s/%s: %w", s.bucket, key, backup.ErrNotFound)
	}
	return fmt.Errorf("get s3://%s/%s: %w", s.bucket, key, err)
}

// Object size limits: a stored chunk is at most backup.MaxChunk plus a few
// bytes; a manifest about 100 bytes per chunk.
const (
	maxChunkObject    = backup.MaxChunk + 1<<10
	maxManifestObject = 1 << 30
)

func (s *Store) Put(ctx context.Context, id string, data []byte) error {
	return s.put(ctx, s.chunkKey(id), id, data)
}

func (s *Store) Get(ctx context.Context, id string) ([]byte, error) {
	if err := checkKeyID(id); err != nil {
		return nil, err
	}
	return s.get(ctx, s.chunkKey(id), maxChunkObject)
}

// Missing asks for each chunk in turn (a HEAD each): a backup asks for one
// chunk at a time, from several goroutines.
func (s *Store) Missing(ctx context.Context, ids []string) ([]string, error) {
	var missing []string
	for _, id := range ids {
		if err := checkKeyID(id); err != nil {
			return nil, err
		}
		_, err := s.client.StatObject(ctx, s.bucket, s.chunkKey(id), minio.StatObjectOptions{})
		switch {
		case err == nil:
		case minio.ToErrorResponse(err).Code == minio.NoSuchKey:
			missing = append(missing, id)
		default:
			return nil, fmt.Errorf("stat s3://%s/%s: %w", s.bucket, s.chunkKey(id), err)
		}
	}
	return missing, nil
}

func (s *Store) PutManifest(ctx context.Context, id string, data []byte) error {
	return s.put(ctx, s.manifestKey(id), id, data)
}

func (s *Store) GetManifest(ctx context.Context, id string) ([]byte, error) {
	if err := checkKeyID(id); err != nil {
		return nil, err
	}
	return s.get(ctx, s.manifestKey(id), maxManifestObject)
}

// ListManifests lists the manifests' prefix; objects there that are not
// named by an ID are left out.
func (s *Store) ListManifests(ctx context.Context) ([]string, error) {
	var ids []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "manifests/", Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list s3://%s/%smanifests/: %w", s.bucket, s.prefix, obj.Err)
		}
		if id := path.Base(obj.Key); checkKeyID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// checkKeyID refuses an ID that is not a hex SHA-256, so that no ID names
// another object's key.
func checkKeyID(id string) error {
	if !backup.ValidID(id) {
		return fmt.Errorf("object ID %q is not 64 lowercase hex digits", id)
	}
	return nil
}

// DeleteManifest deletes a manifest: its backup is no longer listed, and
// its chunks are collected by the next sweep once no other manifest lists
// them. Deleting a manifest the bucket lacks succeeds.
func (s *Store) DeleteManifest(ctx context.Context, id string) error {
	if err := checkKeyID(id); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, s.manifestKey(id), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete s3://%s/%s: %w", s.bucket, s.manifestKey(id), err)
	}
	return nil
}

// ChunkInfo is a stored chunk as a sweep sees it.
type ChunkInfo struct {
	ID       string
	Modified time.Time
	Size     int64
}

// ListChunks lists every chunk with its modification time (the bucket's
// clock), for a sweep to tell old unreferenced chunks from those a backup
// in progress may have just written. Objects that are not named by an ID
// are left out.
func (s *Store) ListChunks(ctx context.Context) ([]ChunkInfo, error) {
	var out []ChunkInfo
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + "chunks/", Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list s3://%s/%schunks/: %w", s.bucket, s.prefix, obj.Err)
		}
		if id := path.Base(obj.Key); checkKeyID(id) == nil && obj.Key == s.chunkKey(id) {
			out = append(out, ChunkInfo{ID: id, Modified: obj.LastModified, Size: obj.Size})
		}
	}
	return out, nil
}

// DeleteChunk deletes a chunk; deleting one the bucket lacks succeeds.
func (s *Store) DeleteChunk(ctx context.Context, id string) error {
	if err := checkKeyID(id); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, s.chunkKey(id), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("delete s3://%s/%s: %w", s.bucket, s.chunkKey(id), err)
	}
	return nil
}
