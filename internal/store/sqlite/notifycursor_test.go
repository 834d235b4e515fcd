package sqlite

import (
	"testing"

	"github.com/hatchery/hatchery/internal/store/storetest"
)

func TestNotifyCursorConformance(t *testing.T) {
	storetest.RunNotifyCursor(t, func(t *testing.T) storetest.NotifyCursorStore { return openTemp(t) })
}
