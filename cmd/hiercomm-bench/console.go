package main

import (
	"io"
	"os"
	"sync"
)

// console is the command's stdout and stderr with a status line: a line
// that is redrawn in place at the bottom of a terminal. It is drawn only
// when stderr is a terminal, and only on stderr, so a redirected stdout
// never receives it; whatever else is written to either stream first
// clears it, then it is drawn again below.
type console struct {
	mu     sync.Mutex // guards everything below, and orders the writes
	out    io.Writer
	err    io.Writer
	tty    bool   // stderr is a terminal: draw the status line
	status string // the status line, "" for none
	shown  bool   // the status line is on the screen
}

func newConsole(stdout, stderr io.Writer) *console {
	return &console{out: stdout, err: stderr, tty: isTerminal(stderr)}
}

// isTerminal reports whether w is a character device other than /dev/null
// (a terminal), without a dependency: os.File.Stat's ModeCharDevice.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// clear erases the status line; the caller holds mu.
func (c *console) clear() {
	if c.shown {
		io.WriteString(c.err, "\r\x1b[K")
		c.shown = false
	}
}

// draw shows the status line; the caller holds mu.
func (c *console) draw() {
	if c.tty && c.status != "" {
		io.WriteString(c.err, "\r\x1b[K"+c.status)
		c.shown = true
	}
}

// setStatus replaces the status line ("" removes it).
func (c *console) setStatus(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status = s
	if !c.tty {
		return
	}
	c.clear()
	c.draw()
}

// stdout and stderr are writers that keep the status line below what
// they write. A write should be whole lines.
func (c *console) stdout() io.Writer { return consoleWriter{c, false} }
func (c *console) stderr() io.Writer { return consoleWriter{c, true} }

type consoleWriter struct {
	c     *console
	toErr bool
}

func (w consoleWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.clear()
	dst := w.c.out
	if w.toErr {
		dst = w.c.err
	}
	n, err := dst.Write(p)
	w.c.draw()
	return n, err
}
