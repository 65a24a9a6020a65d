package hiercomm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
)

// EnvDebug is the environment variable that sets the log level when
// Options.Logger is nil, like NCCL_DEBUG: ERROR, WARN, INFO, DEBUG or
// TRACE (any case). Unset: slog.Default(), whatever level it has.
const EnvDebug = "HIERCOMM_DEBUG"

// LevelTrace is the level below slog.LevelDebug that HIERCOMM_DEBUG=TRACE
// shows (logs print it as TRACE).
const LevelTrace = slog.LevelDebug - 4

// levels are HIERCOMM_DEBUG's values, most severe first.
var levels = []struct {
	name  string
	level slog.Level
}{
	{"ERROR", slog.LevelError},
	{"WARN", slog.LevelWarn},
	{"INFO", slog.LevelInfo},
	{"DEBUG", slog.LevelDebug},
	{"TRACE", LevelTrace},
}

// parseLevel reads a HIERCOMM_DEBUG value.
func parseLevel(s string) (slog.Level, error) {
	for _, l := range levels {
		if strings.EqualFold(s, l.name) {
			return l.level, nil
		}
	}
	return 0, fmt.Errorf("%s=%s: use ERROR, WARN, INFO, DEBUG or TRACE (or unset it: slog.Default's level)", EnvDebug, s)
}

// envLogger is the logger Init uses when Options.Logger is nil: with
// HIERCOMM_DEBUG set (read through getenv), lines on w at that level, in
// the format of slog.Default()'s own lines ("2026/11/28 19:53:18 INFO
// msg key=value", the log package's), so that a job's log reads the same
// whether the variable is set or not; else slog.Default().
func envLogger(getenv func(string) string, w io.Writer) (*slog.Logger, error) {
	s := strings.TrimSpace(getenv(EnvDebug))
	if s == "" {
		return slog.Default(), nil
	}
	level, err := parseLevel(s)
	if err != nil {
		return nil, err
	}
	return slog.New(newLineHandler(w, level)), nil
}

// lineHandler writes records as slog's default handler does (through the
// log package: date, time, level, message, then the attributes as
// key=value), at a level of its own, TRACE included. The attributes are
// written by a TextHandler, which quotes and groups them as slog does.
type lineHandler struct {
	level slog.Leveler
	out   *lineOut
	attrs slog.Handler // a TextHandler on out.buf, without time, level and message
}

// lineOut is what the handlers derived from one lineHandler share: the
// writer, and the buffer a record's attributes are written to.
type lineOut struct {
	mu  sync.Mutex
	w   io.Writer
	buf bytes.Buffer
}

func newLineHandler(w io.Writer, level slog.Leveler) *lineHandler {
	out := &lineOut{w: w}
	attrs := slog.NewTextHandler(&out.buf, &slog.HandlerOptions{
		Level: slog.Level(math.MinInt),
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	return &lineHandler{level: level, out: out, attrs: attrs}
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *lineHandler) Handle(ctx context.Context, r slog.Record) error {
	level := r.Level.String()
	if r.Level == LevelTrace {
		level = "TRACE"
	}
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.buf.Reset()
	if err := h.attrs.Handle(ctx, r); err != nil {
		return err
	}
	line := make([]byte, 0, 64+len(r.Message)+h.out.buf.Len())
	if !r.Time.IsZero() {
		line = r.Time.AppendFormat(line, "2006/01/02 15:04:05 ")
	}
	line = append(line, level...)
	line = append(line, ' ')
	line = append(line, r.Message...)
	if attrs := bytes.TrimSuffix(h.out.buf.Bytes(), []byte("\n")); len(attrs) > 0 {
		line = append(append(line, ' '), attrs...)
	}
	line = append(line, '\n')
	_, err := h.out.w.Write(line)
	return err
}

func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &lineHandler{level: h.level, out: h.out, attrs: h.attrs.WithAttrs(as)}
}

func (h *lineHandler) WithGroup(name string) slog.Handler {
	return &lineHandler{level: h.level, out: h.out, attrs: h.attrs.WithGroup(name)}
}
