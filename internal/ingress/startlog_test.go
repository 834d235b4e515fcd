package ingress

import (
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// Issue 26: with no HTTPS listener (`--https-addr ""`) the start line
// logged `httpsError: PANIC=interface conversion`: a nil address went
// through zap.Stringer. A listener that is off says so.
func TestIngressStartedLogsNoPanicForAListenerThatIsOff(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	in := startIngress(t, func(c *Config) {
		c.HTTPSAddr = ""
		c.Logger = zap.New(core)
	})
	started := logs.FilterMessage("ingress started").All()
	if len(started) != 1 {
		t.Fatalf("%d \"ingress started\" lines, want 1", len(started))
	}
	fields := started[0].ContextMap()
	for k, v := range fields {
		if strings.HasSuffix(k, "Error") || strings.Contains(strings.ToUpper(toString(v)), "PANIC") {
			t.Errorf("field %s = %v", k, v)
		}
	}
	if got := fields["https"]; got != "off" {
		t.Errorf("https = %v, want off", got)
	}
	if got := fields["http"]; got != in.HTTPAddr().String() {
		t.Errorf("http = %v, want %s", got, in.HTTPAddr())
	}
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}
