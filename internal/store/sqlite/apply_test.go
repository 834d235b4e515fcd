package sqlite

import (
	"testing"

	"github.com/hatchery/hatchery/internal/store/storetest"
)

func TestApplyProtocolConformance(t *testing.T) {
	storetest.RunApply(t, func(t *testing.T) storetest.ApplyStore { return openTemp(t) })
}

func TestRunFencing(t *testing.T) {
	storetest.RunRunFencing(t, func(t *testing.T) storetest.RunFencingStore { return openTemp(t) })
}
