package hiercomm

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want slog.Level
	}{
		{"ERROR", slog.LevelError},
		{"WARN", slog.LevelWarn},
		{"INFO", slog.LevelInfo},
		{"DEBUG", slog.LevelDebug},
		{"TRACE", LevelTrace},
		{"warn", slog.LevelWarn},
		{"Trace", LevelTrace},
	} {
		got, err := parseLevel(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseLevel(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	if LevelTrace >= slog.LevelDebug {
		t.Errorf("LevelTrace %v is not below Debug", LevelTrace)
	}
	for _, bad := range []string{"VERBOSE", "WARNING", "4", "INFO,DEBUG"} {
		if _, err := parseLevel(bad); err == nil || !strings.Contains(err.Error(), EnvDebug+"="+bad) {
			t.Errorf("parseLevel(%q) = %v; want an error naming %s=%s", bad, err, EnvDebug, bad)
		}
	}
}

// TestEnvLogger: HIERCOMM_DEBUG sets the level of the logger Init makes,
// TRACE shows a level below Debug and prints it as TRACE; unset leaves
// slog.Default().
func TestEnvLogger(t *testing.T) {
	getenv := func(v string) func(string) string {
		return func(name string) string {
			if name == EnvDebug {
				return v
			}
			return ""
		}
	}
	if log, err := envLogger(getenv(""), nil); err != nil || log != slog.Default() {
		t.Errorf("unset: %v, %v; want slog.Default()", log, err)
	}
	for _, tc := range []struct {
		env       string
		want, not []string
	}{
		{"ERROR", []string{"level=ERROR msg=e"}, []string{"msg=w", "msg=i", "msg=d", "msg=t"}},
		{"WARN", []string{"msg=e", "level=WARN msg=w"}, []string{"msg=i", "msg=d", "msg=t"}},
		{" info ", []string{"msg=e", "msg=w", "level=INFO msg=i"}, []string{"msg=d", "msg=t"}},
		{"DEBUG", []string{"msg=w", "msg=i", "level=DEBUG msg=d"}, []string{"msg=t"}},
		{"TRACE", []string{"msg=i", "msg=d", "level=TRACE msg=t"}, nil},
	} {
		var buf bytes.Buffer
		log, err := envLogger(getenv(tc.env), &buf)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvDebug, tc.env, err)
		}
		log.Error("e")
		log.Warn("w")
		log.Info("i")
		log.Debug("d")
		log.Log(context.Background(), LevelTrace, "t")
		for _, w := range tc.want {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%s=%q: the log lacks %q:\n%s", EnvDebug, tc.env, w, buf.String())
			}
		}
		for _, n := range tc.not {
			if strings.Contains(buf.String(), n+"\n") {
				t.Errorf("%s=%q: the log has %q:\n%s", EnvDebug, tc.env, n, buf.String())
			}
		}
	}
}

// TestInitBadDebugLevel: Init refuses a HIERCOMM_DEBUG it cannot read,
// before anything else, and ignores it when the caller gives a Logger.
func TestInitBadDebugLevel(t *testing.T) {
	getenv := func(name string) string {
		if name == EnvDebug {
			return "LOUD"
		}
		return ""
	}
	_, err := Init(context.Background(), Options{Getenv: getenv})
	if err == nil || !strings.Contains(err.Error(), "HIERCOMM_DEBUG=LOUD") {
		t.Fatalf("Init = %v; want an error naming HIERCOMM_DEBUG=LOUD", err)
	}
	w, err := Init(context.Background(), Options{Getenv: getenv, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Init with a Logger: %v", err)
	}
	w.Close()
}
