package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// isTerminal reports whether w (or r) is a character device: a terminal a
// person reads. Anything else (a pipe, a file, a test's buffer) gets plain
// lines and no question.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// errNotConfirmed is the answer of a user who did not say yes.
var errNotConfirmed = errors.New("not confirmed: nothing was changed")

// confirm asks a yes/no question on a terminal. Only "y" or "yes" is a yes;
// the end of the input is a no.
func confirm(in io.Reader, out io.Writer, question string) (bool, error) {
	fmt.Fprintf(out, "%s [y/N] ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read the answer: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	if errors.Is(err, io.EOF) {
		fmt.Fprintln(out)
	}
	return false, nil
}
