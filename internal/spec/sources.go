package spec

import (
	"errors"
	"fmt"
	"io/fs"
)

// Environment is what CheckSources needs of the machine running hatch.
type Environment struct {
	LookupEnv func(name string) (string, bool)       // os.LookupEnv
	Stat      func(path string) (fs.FileInfo, error) // os.Stat
}

// CheckSources checks that what the project reads at deploy time is there:
// each build context is a directory holding its Dockerfile, each secret's
// file exists and each secret's variable is set. It reads no value. Parse
// does not call it, so that a project can be shown (hatch graph) on a machine
// without its secrets; hatch validate and hatch apply do.
func (p *Project) CheckSources(env Environment) []Diagnostic {
	pr := &problems{file: p.File}
	for _, e := range p.Eggs {
		b := e.Build
		if b == nil {
			continue
		}
		dir := p.Path(b.Context)
		if problem := statProblem(env.Stat, dir, true); problem != "" {
			pr.errorf(e.line("build"), "egg %q build: the context %s %s (it is relative to %s)", e.Name, dir, problem, p.File)
			continue
		}
		dockerfile := p.Path(b.Context + "/" + b.Dockerfile)
		if problem := statProblem(env.Stat, dockerfile, false); problem != "" {
			pr.errorf(e.line("build"), "egg %q build: the Dockerfile %s %s", e.Name, dockerfile, problem)
		}
	}
	for _, s := range p.Secrets {
		switch {
		case s.File != "":
			path := p.Path(s.File)
			if problem := statProblem(env.Stat, path, false); problem != "" {
				pr.errorf(s.Line, "secret %q: its file %s %s (it is relative to %s)", s.Name, path, problem, p.File)
			}
		case s.Env != "":
			if _, ok := env.LookupEnv(s.Env); !ok {
				pr.errorf(s.Line, "secret %q: %s is not set in hatch's environment: set it before deploying", s.Name, s.Env)
			}
		}
	}
	sortDiagnostics(pr.errors)
	return pr.errors
}

// statProblem says what is wrong with a path that should be a directory
// (or a file), or "" if nothing is.
func statProblem(stat func(string) (fs.FileInfo, error), path string, dir bool) string {
	info, err := stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case err != nil:
		return fmt.Sprintf("cannot be read: %v", err)
	case dir && !info.IsDir():
		return "is not a directory"
	case !dir && info.IsDir():
		return "is a directory, not a file"
	}
	return ""
}
