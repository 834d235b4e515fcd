package serverd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/sqlite"
	"github.com/hatchery/hatchery/internal/volumes"
)

// TestTheBackupKeyIsMadeOnlyWhereNoBackupDependsOnAnother: a first start
// on SQLite makes backup.key (private, and the same key ever after); on
// PostgreSQL a data dir without one gets one only while the database
// records no volume task, and is refused once backups exist (they open
// with the cluster's key only); hatch server backup-key never makes one.
func TestTheBackupKeyIsMadeOnlyWhereNoBackupDependsOnAnother(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "hatch.db"), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dir := t.TempDir()
	if _, err := BackupKey(dir, false); err == nil || !strings.Contains(err.Error(), "hatch server init") {
		t.Fatalf("reading a missing key: %v, want the advice to copy it or init", err)
	}
	first, err := loadBackupKey(t.Context(), dir, StoreLocation{SQLitePath: "x"}, st)
	if err != nil || len(first) != 32 {
		t.Fatalf("first start on SQLite: %x, %v", first, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, backupKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup.key: %v, %v; want it private", fi, err)
	}
	again, err := BackupKey(dir, false)
	if err != nil || string(again) != string(first) {
		t.Fatalf("the key read back differs: %v", err)
	}

	pg := StoreLocation{PostgresURL: "postgres://db"}
	fresh := t.TempDir()
	if _, err := loadBackupKey(t.Context(), fresh, pg, st); err != nil {
		t.Fatalf("a new cluster on PostgreSQL: %v", err)
	}
	if err := st.CreateVolumeTask(t.Context(), store.VolumeTask{ID: "0000000000000001", Kind: "backup", Project: "default/shop",
		Volume: "data", CreatedAt: time.Now(), State: store.TaskDone}, nil); err != nil {
		t.Fatal(err)
	}
	late := t.TempDir()
	if _, err := loadBackupKey(t.Context(), late, pg, st); err == nil {
		t.Fatal("a server on PostgreSQL made a key of its own while backups exist")
	}
	if _, err := os.Stat(filepath.Join(late, backupKeyFile)); err == nil {
		t.Fatal("the refused start wrote a key")
	}
}

// TestABackupBucketIsRefusedWithoutCredentialsOrAGoodURL: --backup-store
// takes its credentials from the environment only, and says which
// setting is wrong; without the flag, backups go to the blob store.
func TestABackupBucketIsRefusedWithoutCredentialsOrAGoodURL(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if _, err := openBackupStore("s3://bucket/prefix", getenv, nil, nil); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("a bucket without credentials: %v, want the variables named", err)
	}
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = "id", "secret"
	if _, err := openBackupStore("http://bucket", getenv, nil, nil); err == nil || !strings.Contains(err.Error(), "s3://bucket") {
		t.Fatalf("a URL that is not s3://: %v, want the form named", err)
	}
	env[EnvS3Endpoint] = "ftp://x"
	if _, err := openBackupStore("s3://bucket", getenv, nil, nil); err == nil || !strings.Contains(err.Error(), EnvS3Endpoint) {
		t.Fatalf("a bad endpoint: %v, want %s named", err, EnvS3Endpoint)
	}
	env[EnvS3Endpoint] = "http://127.0.0.1:8333"
	if st, err := openBackupStore("s3://bucket/prefix", getenv, nil, nil); err != nil || st == nil {
		t.Fatalf("a good bucket: %v", err)
	}
	if st, err := openBackupStore("", getenv, nil, nil); err != nil {
		t.Fatalf("no bucket: %v", err)
	} else if _, ok := st.(*volumes.BlobStore); !ok {
		t.Fatalf("no bucket: %T, want the blob store", st)
	}
}
