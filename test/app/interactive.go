package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// tick writes "tick <version> <n>" every cfg.Tick until ctx ends, with
// " <unix nanoseconds>" at its end if cfg.TickStamp.
func tick(ctx context.Context, cfg Config, stdout io.Writer) {
	t := time.NewTicker(cfg.Tick)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if cfg.TickStamp {
				fmt.Fprintf(stdout, "tick %s %d %d\n", cfg.Version, n, time.Now().UnixNano())
				continue
			}
			fmt.Fprintf(stdout, "tick %s %d\n", cfg.Version, n)
		}
	}
}

// prompt is an interactive program for `hatch exec -it`: it asks a name
// and greets it, then answers "size" with its terminal's rows x columns
// and ends at "exit N" with status N (or at the input's end, with 0).
func prompt(in *os.File, out io.Writer) int {
	fmt.Fprint(out, "name? ")
	lines := bufio.NewScanner(in)
	if !lines.Scan() {
		return 0
	}
	fmt.Fprintf(out, "hello %s\n", strings.TrimSpace(lines.Text()))
	for lines.Scan() {
		cmd := strings.Fields(lines.Text())
		switch {
		case len(cmd) == 1 && cmd[0] == "size":
			rows, cols := termSize(in)
			fmt.Fprintf(out, "size %dx%d\n", rows, cols)
		case len(cmd) == 2 && cmd[0] == "exit":
			code, _ := strconv.Atoi(cmd[1])
			fmt.Fprintln(out, "bye")
			return code
		}
	}
	return 0
}

// termSize reads a terminal's size (TIOCGWINSZ); 0x0 for no terminal.
func termSize(f *os.File) (rows, cols uint16) {
	var ws struct{ Row, Col, X, Y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws)))
	if errno != 0 {
		return 0, 0
	}
	return ws.Row, ws.Col
}
