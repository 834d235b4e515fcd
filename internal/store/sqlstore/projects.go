package sqlstore

import (
	"context"
	"fmt"
	"slices"
)

// Projects lists the projects for the project views (store.Projects); their
// resources are listed by Resources, which the reconciler shares.
type Projects struct{ base }

// ListProjects returns every project with deployed resources or apply
// records, sorted (byte by byte: sorted here, since a UNION's ORDER BY takes
// no collation).
func (s *Projects) ListProjects(ctx context.Context) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT project FROM resources
		UNION SELECT project FROM applies`)
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	out, err := scanStrings(rows, "list projects")
	slices.Sort(out)
	return out, err
}
