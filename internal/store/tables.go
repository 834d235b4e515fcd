package store

// Table is one table of the control plane's schema, as `hatch server
// migrate` copies it from one store to another: the SQLite and PostgreSQL
// stores keep the same tables with the same columns (times in Unix
// milliseconds, JSON as text), so a row is copied value by value.
type Table struct {
	Name    string
	Columns []string
}

// Tables lists every table a store copies, in the order they are copied.
// Each store's tests check that its schema has exactly these tables and
// columns beside its own bookkeeping (schema_migrations, counters) and the
// Uncopied tables.
var Tables = []Table{
	{"resources", []string{"project", "type", "name", "id", "inputs", "outputs", "source", "parents", "pending", "updated_at"}},
	{"hosts", []string{"id", "state", "state_since", "last_seen", "status", "created_at"}},
	{"desired_states", []string{"host_id", "version", "doc", "updated_at"}},
	{"desired_peers", []string{"id", "version", "doc", "updated_at"}},
	{"events", []string{"seq", "at", "type", "project", "host", "resource", "message", "actor"}},
	{"applies", []string{"id", "project", "started_at", "finished_at", "outcome", "message", "actor", "inputs", "summary", "digest", "rollback_of"}},
	{"apply_blobs", []string{"apply_id", "digest"}},
	{"blob_retention", []string{"owner", "digest"}},
	{"tokens", []string{"name", "hash", "created_at", "revoked_at", "kind", "project", "may_exec"}},
	{"join_tokens", []string{"id", "hash", "created_at", "expires_at", "max_uses", "uses", "revoked_at"}},
	{"host_identities", []string{"id", "name", "token_hash", "join_token", "joined_at", "removed_at"}},
	{"leases", []string{"project", "token", "holder", "server", "since", "expires_at"}},
	{"plans", []string{"id", "project", "created_at", "expires_at", "doc"}},
	{"secret_values", []string{"project", "name", "fingerprint", "sealed", "created_at"}},
	{"host_capacities", []string{"host_id", "baseline_memory", "baseline_milli_cpu", "baseline_at",
		"pinned_memory", "pinned_milli_cpu", "pinned_at", "pinned_by"}},
	{"runs", []string{"id", "project", "egg", "host", "run_trigger", "actor", "scheduled_at", "created_at", "delivered_at",
		"delay_ms", "started_at", "ended_at", "state", "exit_code", "error", "kept", "command", "timeout_ms", "stop_requested",
		"stop_egg", "missed", "released_at", "tty"}},
	{"schedule_states", []string{"project", "egg", "paused", "last_tick", "updated_at"}},
	{"volume_tasks", []string{"id", "kind", "project", "volume", "host", "task_trigger", "actor", "scheduled_at", "created_at",
		"delivered_at", "started_at", "ended_at", "state", "phase", "manifest", "backup", "target", "consistency", "bytes", "chunks",
		"new_chunks", "sent_bytes", "stored_bytes", "output", "error", "released_at", "forgotten_at"}},
	{"volume_schedules", []string{"project", "volume", "last_tick", "updated_at"}},
	{"notify_cursor", []string{"id", "seq"}},
	{"registry_logins", []string{"host", "username", "sealed", "fingerprint", "updated_at"}},
}

// Uncopied are the tables a copy leaves out: servers, the live servers'
// registrations (ServerRegistry), which expire within seconds and are made
// again by the servers started on the copy.
var Uncopied = []string{"servers"}

// Counters are the numbers a store hands out that must never be handed out
// again after a copy, by table: the highest event Seq and apply ID ever
// given, which may exceed the highest one kept (old applies are dropped).
type Counters map[string]int64

// The tables whose counters a copy carries over.
const (
	CounterEvents  = "events"
	CounterApplies = "applies"
)
