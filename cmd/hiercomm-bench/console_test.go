package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestConsoleStatus: the status line goes to stderr only, is cleared
// before anything else is written there or to stdout and drawn again
// after, and is not drawn at all when stderr is not a terminal.
func TestConsoleStatus(t *testing.T) {
	var out, errOut bytes.Buffer
	c := &console{out: &out, err: &errOut, tty: true}
	c.setStatus("measuring allreduce 8 B")
	c.stdout().Write([]byte("row 1\n"))
	c.stderr().Write([]byte("a log line\n"))
	c.setStatus("")
	if out.String() != "row 1\n" {
		t.Errorf("stdout = %q, want the row alone", out.String())
	}
	const clear = "\r\x1b[K"
	want := clear + "measuring allreduce 8 B" + clear + clear + "measuring allreduce 8 B" + clear + "a log line\n" + clear + "measuring allreduce 8 B" + clear
	if errOut.String() != want {
		t.Errorf("stderr = %q\nwant     %q", errOut.String(), want)
	}

	out.Reset()
	errOut.Reset()
	c = newConsole(&out, &errOut) // buffers are not terminals
	c.setStatus("measuring")
	c.stdout().Write([]byte("row\n"))
	if out.String() != "row\n" || errOut.Len() != 0 {
		t.Errorf("without a terminal: stdout %q, stderr %q; want the row and nothing else", out.String(), errOut.String())
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Error("/dev/null taken for a terminal")
	}
	if strings.Contains(out.String(), clear) {
		t.Error("an escape sequence reached stdout")
	}
}
