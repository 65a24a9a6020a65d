package hiercomm

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
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
		{"ERROR", []string{" ERROR e k=1"}, []string{" w k=1", " i k=1", " d k=1", " t k=1"}},
		{"WARN", []string{" ERROR e k=1", " WARN w k=1"}, []string{" i k=1", " d k=1", " t k=1"}},
		{" info ", []string{" e k=1", " w k=1", " INFO i k=1"}, []string{" d k=1", " t k=1"}},
		{"DEBUG", []string{" w k=1", " i k=1", " DEBUG d k=1"}, []string{" t k=1"}},
		{"TRACE", []string{" i k=1", " d k=1", " TRACE t k=1"}, nil},
	} {
		var buf bytes.Buffer
		log, err := envLogger(getenv(tc.env), &buf)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvDebug, tc.env, err)
		}
		log.Error("e", "k", 1)
		log.Warn("w", "k", 1)
		log.Info("i", "k", 1)
		log.Debug("d", "k", 1)
		log.Log(context.Background(), LevelTrace, "t", "k", 1)
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

// HIERCOMM_DEBUG's lines read as slog.Default()'s (the log package's
// format: date, time, level, message, key=value), with the attributes
// quoted and grouped as slog's text output does them, and the ones a
// derived logger carries.
func TestEnvLoggerWritesTheDefaultFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := envLogger(func(string) string { return "debug" }, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.With("rank", 3).WithGroup("g").Info("world ready", "via", "hierarchy: shm within nodes", "n", 4)
	log.Debug("bare")
	want := regexp.MustCompile(`^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d INFO world ready rank=3 g\.via="hierarchy: shm within nodes" g\.n=4\n\d{4}/\d\d/\d\d \d\d:\d\d:\d\d DEBUG bare\n$`)
	if !want.Match(buf.Bytes()) {
		t.Errorf("the lines read\n%s", buf.String())
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
