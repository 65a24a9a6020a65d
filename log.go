package hiercomm

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
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
// HIERCOMM_DEBUG set (read through getenv), text lines on w at that level;
// else slog.Default().
func envLogger(getenv func(string) string, w io.Writer) (*slog.Logger, error) {
	s := strings.TrimSpace(getenv(EnvDebug))
	if s == "" {
		return slog.Default(), nil
	}
	level, err := parseLevel(s)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: traceName})), nil
}

// traceName prints LevelTrace as TRACE, not DEBUG-4.
func traceName(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l == LevelTrace {
			a.Value = slog.StringValue("TRACE")
		}
	}
	return a
}
