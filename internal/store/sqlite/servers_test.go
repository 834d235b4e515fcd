package sqlite

import (
	"testing"

	"github.com/hatchery/hatchery/internal/store"
	"github.com/hatchery/hatchery/internal/store/storetest"
)

func TestServerRegistryConformance(t *testing.T) {
	storetest.RunServerRegistry(t, func(t *testing.T) store.ServerRegistry { return openTemp(t) })
}
