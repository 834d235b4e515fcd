package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/resource"
	"github.com/hatchery/hatchery/internal/store"
)

// Resources keeps the records of deployed resources: the reconciler's
// ResourceStorage, whose writes also record the event log's resource events.
type Resources struct{ base }

var _ reconciler.ResourceStorage = (*Resources)(nil)

// PutResource records a deployed resource (the reconciler's ResourceStorage),
// replacing the record with the same type and name. In the same transaction it
// records what happened for the event log: resource.created when a record
// stops being pending (or arrives confirmed), resource.updated when a
// confirmed record changes. Pending records and unchanged puts record nothing.
func (s *Resources) PutResource(ctx context.Context, project string, r *resource.Deployed) error {
	inputs, err := json.Marshal(r.Inputs)
	if err != nil {
		return fmt.Errorf("put %s/%s: encode inputs: %w", project, r.Key(), err)
	}
	outputs, err := json.Marshal(r.Outputs)
	if err != nil {
		return fmt.Errorf("put %s/%s: encode outputs: %w", project, r.Key(), err)
	}
	parents, err := json.Marshal(r.Parents)
	if err != nil {
		return fmt.Errorf("put %s/%s: encode parents: %w", project, r.Key(), err)
	}
	now := time.Now()
	err = s.write(ctx, func(tx Tx) error {
		// An insert that does nothing when the row is there, then the row
		// locked: the previous record is read under the lock the write holds.
		n, err := tx.Exec(ctx, `INSERT INTO resources
			(project, type, name, id, inputs, outputs, source, parents, pending, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (project, type, name) DO NOTHING`,
			project, r.Type, r.Name, r.ID, string(inputs), string(outputs), r.Source,
			string(parents), boolInt(r.Pending), Millis(now))
		if err != nil {
			return err
		}
		existed := n == 0
		var prev *resource.Deployed
		if existed {
			prev, err = scanResource(tx.QueryRow(ctx, `SELECT `+resourceColumns+` FROM resources
				WHERE project = $1 AND type = $2 AND name = $3`+s.d.LockRow, project, r.Type, r.Name))
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE resources SET id = $4, inputs = $5, outputs = $6, source = $7,
				parents = $8, pending = $9, updated_at = $10 WHERE project = $1 AND type = $2 AND name = $3`,
				project, r.Type, r.Name, r.ID, string(inputs), string(outputs), r.Source,
				string(parents), boolInt(r.Pending), Millis(now)); err != nil {
				return err
			}
		}
		var typ store.EventType
		switch {
		case r.Pending:
		case !existed || prev.Pending:
			typ = store.EventResourceCreated
		case prev.ID != r.ID || prev.Source != r.Source ||
			!resource.Equal(prev.Inputs, r.Inputs) || !resource.Equal(prev.Outputs, r.Outputs):
			typ = store.EventResourceUpdated
		}
		if typ == "" {
			return nil
		}
		_, err = tx.AppendEvent(ctx, resourceEvent(typ, project, r.Key(), now))
		return err
	})
	if err != nil {
		return fmt.Errorf("put %s/%s: %w", project, r.Key(), err)
	}
	return nil
}

// DeleteResource removes a resource's record, with a resource.deleted event
// if there was one. Deleting a record that does not exist is a success.
func (s *Resources) DeleteResource(ctx context.Context, project string, r *resource.Deployed) error {
	now := time.Now()
	err := s.write(ctx, func(tx Tx) error {
		n, err := tx.Exec(ctx, `DELETE FROM resources WHERE project = $1 AND type = $2 AND name = $3`,
			project, r.Type, r.Name)
		if err != nil || n == 0 {
			return err
		}
		_, err = tx.AppendEvent(ctx, resourceEvent(store.EventResourceDeleted, project, r.Key(), now))
		return err
	})
	if err != nil {
		return fmt.Errorf("delete %s/%s: %w", project, r.Key(), err)
	}
	return nil
}

// ListResources returns a project's records, sorted by type and name. Each is
// a fresh copy the caller may keep; numbers in inputs and outputs come back as
// float64, as JSON gives them.
func (s *Resources) ListResources(ctx context.Context, project string) ([]*resource.Deployed, error) {
	rows, err := s.db.Query(ctx, `SELECT `+resourceColumns+` FROM resources
		WHERE project = $1 ORDER BY type`+s.d.ByteOrder+`, name`+s.d.ByteOrder, project)
	if err != nil {
		return nil, fmt.Errorf("list resources of %s: %w", project, err)
	}
	out, err := collect(rows, scanResource)
	if err != nil {
		return nil, fmt.Errorf("list resources of %s: %w", project, err)
	}
	return out, nil
}

const resourceColumns = `id, type, name, inputs, outputs, source, parents, pending`

func scanResource(row Row) (*resource.Deployed, error) {
	var r resource.Deployed
	var inputs, outputs, parents string
	var pending int
	if err := row.Scan(&r.ID, &r.Type, &r.Name, &inputs, &outputs, &r.Source, &parents, &pending); err != nil {
		return nil, err
	}
	r.Pending = pending != 0
	if err := json.Unmarshal([]byte(inputs), &r.Inputs); err != nil {
		return nil, fmt.Errorf("%s: decode inputs: %w", r.Key(), err)
	}
	if err := json.Unmarshal([]byte(outputs), &r.Outputs); err != nil {
		return nil, fmt.Errorf("%s: decode outputs: %w", r.Key(), err)
	}
	if err := json.Unmarshal([]byte(parents), &r.Parents); err != nil {
		return nil, fmt.Errorf("%s: decode parents: %w", r.Key(), err)
	}
	return &r, nil
}

func resourceEvent(typ store.EventType, project, key string, at time.Time) store.Event {
	verb := map[store.EventType]string{
		store.EventResourceCreated: "created",
		store.EventResourceUpdated: "updated",
		store.EventResourceDeleted: "deleted",
	}[typ]
	return store.Event{Time: at, Type: typ, Project: project, Resource: key, Message: key + " " + verb}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
