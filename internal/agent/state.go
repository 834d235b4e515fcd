package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/hatchery/hatchery/internal/contract"
	"github.com/hatchery/hatchery/internal/converge"
	"github.com/hatchery/hatchery/internal/fsutil"
)

// memory is what the agent remembers across restarts, beyond the desired
// state: the converge engine's History (restarts and back-off of each
// container, failed rollouts) and the last log lines of each failed
// rollout's container, which is gone by the time a restarted agent reports.
type memory struct {
	History *converge.History `json:"history"`
	// FailureLogs are the last log lines of the container whose rollout
	// failed, by workload ID.
	FailureLogs map[string]failureLog `json:"failure_logs,omitempty"`
	// Runs is what the agent knows of the runs of its desired state beyond
	// their containers (see runRecord), by run ID.
	Runs map[string]runRecord `json:"runs,omitempty"`
	// VolumeTasks are the volume tasks begun that are still in the desired
	// state, with their last status, by task ID: one found running by a new
	// agent process was cut short by a restart (see volumetasks.go).
	VolumeTasks map[string]contract.VolumeTaskStatus `json:"volume_tasks,omitempty"`
}

type failureLog struct {
	SpecHash    string   `json:"spec_hash"`
	ContainerID string   `json:"container_id,omitempty"`
	Lines       []string `json:"lines,omitempty"`
}

func newMemory() *memory {
	return &memory{History: converge.NewHistory(), FailureLogs: map[string]failureLog{}, Runs: map[string]runRecord{},
		VolumeTasks: map[string]contract.VolumeTaskStatus{}}
}

// memoryFile persists memory atomically, skipping writes that would not
// change the file (a converge that changed nothing costs no fsync).
type memoryFile struct {
	path string
	last []byte // the content last read or written
}

// load reads the memory; a missing file is a fresh start.
func (f *memoryFile) load() (*memory, error) {
	data, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return newMemory(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read agent state: %w", err)
	}
	m := newMemory()
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("agent state %s: %w (move it away to start afresh)", f.path, err)
	}
	if m.History == nil {
		m.History = converge.NewHistory()
	}
	if m.FailureLogs == nil {
		m.FailureLogs = map[string]failureLog{}
	}
	if m.Runs == nil {
		m.Runs = map[string]runRecord{}
	}
	if m.VolumeTasks == nil {
		m.VolumeTasks = map[string]contract.VolumeTaskStatus{}
	}
	f.last = data
	return m, nil
}

// save writes m if it differs from what the file holds.
func (f *memoryFile) save(m *memory) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode agent state: %w", err)
	}
	if bytes.Equal(data, f.last) {
		return nil
	}
	if err := fsutil.WriteFileAtomic(f.path, data, 0o600); err != nil {
		return fmt.Errorf("write agent state: %w", err)
	}
	f.last = data
	return nil
}
