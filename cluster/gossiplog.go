package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// memberlistLog adapts memberlist's log.Logger output to slog, and keeps
// it from flooding. memberlist writes one line per event, prefixed by its
// level: "[ERR] ", "[WARN] ", "[INFO] ", "[DEBUG] ". Its [ERR] lines are
// per-packet and per-probe events (a failed probe of a dying member, a
// packet from a process without the key) that this package summarizes
// itself as real errors, so they go out as warnings; its [INFO] lines
// (suspicions, state merges) are chatter at Debug, as is everything else.
//
// Anyone who reaches the gossip port can make memberlist write a line per
// datagram or connection, with the sender's bytes in it ("unsupported
// encryption version 37"). So lines are rate-limited by kind — the text
// up to its second colon, without the sender's address —: at most
// logBurst lines of a kind per logWindow. The lines left out are counted,
// and said in one line once the window has passed (at the next line
// memberlist writes, of any kind: it writes some every few seconds).
type memberlistLog struct {
	log *slog.Logger
	now func() time.Time // time.Now; tests set another

	mu    sync.Mutex          // guards kinds; held while writing, so summaries come in order
	kinds map[string]*logKind // by logKey; at most logKinds
}

// Rate limits of memberlistLog.
const (
	logWindow = 10 * time.Second
	logBurst  = 5
	// logKinds bounds the kinds tracked at once, logOther included: lines
	// of further kinds share that one, so no sender can grow the map.
	logKinds = 32
	logOther = "memberlist: other lines"
)

// logKind counts the lines of one kind in its current window.
type logKind struct {
	start time.Time  // the window's start
	lines int        // lines in it, written or not
	level slog.Level // the highest level of the lines left out
}

func newMemberlistLog(log *slog.Logger) *memberlistLog {
	return &memberlistLog{log: log, now: time.Now, kinds: make(map[string]*logKind)}
}

func (w *memberlistLog) Write(p []byte) (int, error) {
	line, level := memberlistLevel(strings.TrimRight(string(p), "\r\n"))
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.summarize(now)
	key := logKey(line)
	k := w.kinds[key]
	if k == nil && len(w.kinds) >= logKinds-1 {
		key = logOther
		k = w.kinds[key]
	}
	if k == nil {
		k = &logKind{start: now, level: slog.LevelDebug}
		w.kinds[key] = k
	}
	k.lines++
	if k.lines > logBurst {
		k.level = max(k.level, level)
		return len(p), nil
	}
	w.log.Log(context.Background(), level, line, "component", "memberlist")
	return len(p), nil
}

// summarize says, for each kind whose window has passed, how many of its
// lines were left out, and forgets it. Called with mu held.
func (w *memberlistLog) summarize(now time.Time) {
	for key, k := range w.kinds {
		if now.Sub(k.start) < logWindow {
			continue
		}
		if left := k.lines - logBurst; left > 0 {
			w.log.Log(context.Background(), k.level,
				fmt.Sprintf("memberlist: left out %d more lines of the kind %q in %v (rate limit: %d per %v; a flood of them is usually traffic without the job key on the gossip port)",
					left, key, now.Sub(k.start).Round(time.Second), logBurst, logWindow),
				"component", "memberlist")
		}
		delete(w.kinds, key)
	}
}

// memberlistLevel strips memberlist's level prefix from line and maps it
// to a slog level.
func memberlistLevel(line string) (string, slog.Level) {
	for _, l := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[ERR] ", slog.LevelWarn},
		{"[WARN] ", slog.LevelWarn},
		{"[INFO] ", slog.LevelDebug},
		{"[DEBUG] ", slog.LevelDebug},
	} {
		if rest, ok := strings.CutPrefix(line, l.prefix); ok {
			return rest, l.level
		}
	}
	return line, slog.LevelDebug
}

// logKey is the kind of a memberlist line: its text up to the second
// colon ("memberlist: Decrypt packet failed"), without the " from=ADDR"
// memberlist appends, at most 64 bytes. What follows the second colon is
// the detail, often the sender's own bytes.
func logKey(line string) string {
	if i := strings.Index(line, " from="); i >= 0 {
		line = line[:i]
	}
	if i := strings.IndexByte(line, ':'); i >= 0 {
		if j := strings.IndexByte(line[i+1:], ':'); j >= 0 {
			line = line[:i+1+j]
		}
	}
	if len(line) > 64 {
		line = line[:64]
	}
	return line
}
