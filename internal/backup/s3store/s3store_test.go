package s3store_test

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/backup"
	"github.com/hatchery/hatchery/internal/backup/backuptest"
	"github.com/hatchery/hatchery/internal/backup/s3store"
	"github.com/hatchery/hatchery/internal/testutil/s3test"
)

func open(t *testing.T, srv *s3test.Server, prefix string) *s3store.Store {
	t.Helper()
	st, err := s3store.New(s3store.Config{
		URL:         "s3://" + srv.Bucket + "/" + prefix,
		Endpoint:    srv.Endpoint,
		Credentials: s3store.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestTheBucketKeepsTheStoreContract(t *testing.T) {
	srv := s3test.Start(t)
	backuptest.Conformance(t, open(t, srv, "contract"))
}

// A control plane that lost everything but the bucket's address and the
// backup key lists every backup and restores each byte for byte.
func TestANewStoreWithOnlyTheBucketAndTheKeyRestoresEveryBackup(t *testing.T) {
	srv := s3test.Start(t)
	clusterKey := make([]byte, backup.KeySize)
	rand.Read(clusterKey)
	volumes := []backup.VolumeID{
		{Namespace: "default", Project: "shop", Volume: "data"},
		{Namespace: "default", Project: "blog", Volume: "db"},
	}
	streams := map[string][]byte{}
	first := open(t, srv, "cluster/a")
	for i, v := range volumes {
		data := make([]byte, 3<<20+i*12345)
		rand.Read(data[:1<<20]) // the rest compresses
		key, err := backup.DeriveVolumeKey(clusterKey, v)
		if err != nil {
			t.Fatal(err)
		}
		m, st, err := backup.Backup(t.Context(), bytes.NewReader(data), key, first, time.Now())
		if err != nil {
			t.Fatalf("backup %s: %v", v, err)
		}
		t.Logf("%s: %d bytes in %d chunks, %d bytes sent", v, st.Bytes, st.Chunks, st.SentBytes)
		streams[m.ID] = data
		// Again: nothing new but the manifest.
		if _, st, err := backup.Backup(t.Context(), bytes.NewReader(data), key, first, time.Now().Add(time.Second)); err != nil || st.NewChunks != 0 {
			t.Fatalf("second backup of %s: %d new chunks, %v", v, st.NewChunks, err)
		}
	}

	fresh := open(t, srv, "cluster/a")
	list, err := backup.ListBackups(t.Context(), fresh, clusterKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 {
		t.Fatalf("listed %d backups, want 4", len(list))
	}
	for _, m := range list {
		key, _ := backup.DeriveVolumeKey(clusterKey, m.Volume)
		var out bytes.Buffer
		if err := backup.Restore(t.Context(), m, key, fresh, &out, t.TempDir()); err != nil {
			t.Fatalf("restore %s of %s: %v", m.ID, m.Volume, err)
		}
		if want, ok := streams[m.ID]; ok && !bytes.Equal(out.Bytes(), want) {
			t.Errorf("backup %s restored %d bytes that differ from the %d backed up", m.ID, out.Len(), len(want))
		}
	}
	if others, err := backup.ListBackups(t.Context(), open(t, srv, "cluster/b"), clusterKey); err != nil || len(others) != 0 {
		t.Errorf("another prefix lists %d backups, %v; want none", len(others), err)
	}
}

func TestCredentialsComeFromTheEnvironmentOrAFile(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := s3store.LoadCredentials(env(map[string]string{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}))
	if err != nil || c.AccessKeyID != "id" || c.SecretAccessKey != "secret" {
		t.Errorf("from the environment: %+v, %v", c, err)
	}
	if _, err := s3store.LoadCredentials(env(map[string]string{"AWS_ACCESS_KEY_ID": "id"})); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("an access key without its secret: %v, want an error naming AWS_SECRET_ACCESS_KEY", err)
	}
	file := filepath.Join(t.TempDir(), "credentials")
	os.WriteFile(file, []byte("[default]\naws_access_key_id = d\naws_secret_access_key = ds\n[backup]\naws_access_key_id = b\naws_secret_access_key = bs\n"), 0o600)
	c, err = s3store.LoadCredentials(env(map[string]string{"AWS_SHARED_CREDENTIALS_FILE": file, "AWS_PROFILE": "backup"}))
	if err != nil || c.AccessKeyID != "b" || c.SecretAccessKey != "bs" {
		t.Errorf("from the file's profile: %+v, %v", c, err)
	}
	if _, err := s3store.LoadCredentials(env(nil)); err == nil || !strings.Contains(err.Error(), "AWS_SHARED_CREDENTIALS_FILE") {
		t.Errorf("no credentials: %v, want an error naming where to put them", err)
	}
}

func TestABadConfigNamesEachField(t *testing.T) {
	_, err := s3store.New(s3store.Config{URL: "https://bucket/x", Endpoint: "ftp://x"})
	for _, want := range []string{`"https://bucket/x"`, `"ftp://x"`, "no access key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to name %s", err, want)
		}
	}
}
