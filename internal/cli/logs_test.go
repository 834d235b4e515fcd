package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/hatchery/hatchery/internal/contract"
)

func TestLogLinesArePrefixedWithEggSlotAndHostNameAndEscaped(t *testing.T) {
	var b bytes.Buffer
	p := &logPrinter{out: &b, hosts: map[string]string{"h-1": "alpha"}}
	at := time.Now()
	p.print(contract.LogRecord{Time: at, Host: "h-1", Egg: "web", Slot: 2, Stream: "stdout", Line: "hi \x1b[31mred"})
	p.print(contract.LogRecord{Time: at, Host: "h-2", Egg: "web", Slot: 0, Stream: "stderr", Line: "oops"})
	p.print(contract.LogRecord{Time: at, Host: "h-1", Egg: "web", Slot: 1, Container: "0123456789abcdef", Event: "stopped"})
	want := "web/2 alpha | hi \\x1b[31mred\nweb/0 h-2 | [stderr] oops\nweb/1 alpha | -- replica stopped (container 0123456789ab)\n"
	if b.String() != want {
		t.Fatalf("printed:\n%s\nwant:\n%s", b.String(), want)
	}
	if strings.ContainsRune(b.String(), 0x1b) {
		t.Fatal("an escape reached the output")
	}
}

func TestEveryFieldOfALogRecordIsEscaped(t *testing.T) {
	var b bytes.Buffer
	p := &logPrinter{out: &b, hosts: map[string]string{}}
	at := time.Now()
	// A host writes each field: none may reach the terminal raw.
	p.print(contract.LogRecord{Time: at, Host: "h\x1b[2J", Egg: "w\x1b[2J", Slot: 0, Container: "\x1b[2J\x1b[H", Event: "started"})
	p.print(contract.LogRecord{Time: at, Host: "h", Egg: "w", Container: "\x1b]0;title\a", Event: "stopped"})
	p.print(contract.LogRecord{Time: at, Host: "h", Egg: "w", Event: "odd\x1b[2J", Line: "\x1b[2J"})
	p.print(contract.LogRecord{Time: at, Event: "unavailable", Line: "host h did not open its stream"})
	if strings.ContainsRune(b.String(), 0x1b) || strings.ContainsRune(b.String(), 0x07) {
		t.Fatalf("a control character reached the output:\n%q", b.String())
	}
	if !strings.Contains(b.String(), "server | -- unavailable: host h did not open its stream") {
		t.Fatalf("the server's own record:\n%s", b.String())
	}
}
