package storagetest_test

import (
	"testing"

	"github.com/hatchery/hatchery/internal/reconciler"
	"github.com/hatchery/hatchery/internal/reconciler/reconcilertest"
	"github.com/hatchery/hatchery/internal/reconciler/storagetest"
)

func TestMemoryStorage(t *testing.T) {
	storagetest.Run(t, func(*testing.T) reconciler.ResourceStorage { return reconcilertest.NewStorage() })
}
