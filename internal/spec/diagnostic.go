package spec

import (
	"fmt"
	"sort"
	"strings"
)

// Diagnostic is one problem found in a project file, at a line.
type Diagnostic struct {
	File    string
	Line    int
	Message string
}

// String formats the diagnostic the way compilers do, "file:line: message",
// so that editors and terminals link it to the line.
func (d Diagnostic) String() string {
	return fmt.Sprintf("%s:%d: %s", d.File, d.Line, d.Message)
}

// Error is what loading a project file returns when it has errors: all of
// them, sorted by line, and the warnings found on the way.
type Error struct {
	Errors   []Diagnostic
	Warnings []Diagnostic
}

// Error returns the errors, one per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Errors))
	for i, d := range e.Errors {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// sortDiagnostics orders diagnostics by line, keeping the order they were
// found in on the same line.
func sortDiagnostics(ds []Diagnostic) {
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].Line < ds[j].Line })
}

// problems collects the diagnostics of one file.
type problems struct {
	file     string
	errors   []Diagnostic
	warnings []Diagnostic
}

func (p *problems) errorf(line int, format string, args ...any) {
	p.errors = append(p.errors, Diagnostic{File: p.file, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (p *problems) warnf(line int, format string, args ...any) {
	p.warnings = append(p.warnings, Diagnostic{File: p.file, Line: line, Message: fmt.Sprintf(format, args...)})
}
