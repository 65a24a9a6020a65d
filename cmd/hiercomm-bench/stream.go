package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hiercomm/hiercomm/bench"
)

// A run's progress as rank 0 tells it: what the run is, each row as soon
// as it is measured, and the result at the end. A local job's rank 0
// appends them as JSON lines to a file its parent reads as they come
// (tail), so the parent has each row at once (its status line counts it,
// its tables print it when the operation ends) and keeps every row
// measured when the job is interrupted; elsewhere they go straight to a
// printer (output.go).
type sink interface {
	start(info runInfo)
	row(row bench.Row)
	// phase announces a second measurement (the hierarchy's AllReduce
	// paths), which is counted in the progress but not tabled.
	phase(what string, steps int)
	done(res bench.Result)
}

// event is one line of the stream file: exactly one field is set.
type event struct {
	Start *runInfo      `json:"start,omitempty"`
	Row   *bench.Row    `json:"row,omitempty"`
	Phase *phaseInfo    `json:"phase,omitempty"`
	Done  *bench.Result `json:"done,omitempty"`
}

type phaseInfo struct {
	What  string `json:"what"`
	Steps int    `json:"steps"`
}

// fileSink writes events to a file, one line each, each in one write.
type fileSink struct {
	mu  sync.Mutex // guards f and err
	f   *os.File
	err error
}

func newFileSink(path string) (*fileSink, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &fileSink{f: f}, nil
}

func (s *fileSink) put(e event) {
	b, err := json.Marshal(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.err == nil {
		_, err = s.f.Write(append(b, '\n'))
	}
	if s.err == nil {
		s.err = err
	}
}

func (s *fileSink) start(info runInfo)           { s.put(event{Start: &info}) }
func (s *fileSink) row(row bench.Row)            { s.put(event{Row: &row}) }
func (s *fileSink) phase(what string, steps int) { s.put(event{Phase: &phaseInfo{what, steps}}) }
func (s *fileSink) done(res bench.Result)        { s.put(event{Done: &res}) }

// close closes the file and returns the first error of any write.
func (s *fileSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.f.Close(); s.err == nil {
		s.err = err
	}
	return s.err
}

// tail reads the events appended to path and hands them to to, until stop
// is closed; then it reads what is left and returns. A line is handled
// once it is complete.
func tail(path string, to sink, stop <-chan struct{}) error {
	var off int64
	var partial []byte
	read := func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
		b, err := io.ReadAll(f)
		if err != nil {
			return err
		}
		off += int64(len(b))
		partial = append(partial, b...)
		for {
			i := bytes.IndexByte(partial, '\n')
			if i < 0 {
				return nil
			}
			line := partial[:i]
			partial = partial[i+1:]
			var e event
			if err := json.Unmarshal(line, &e); err != nil {
				return fmt.Errorf("reading rank 0's progress: %w", err)
			}
			switch {
			case e.Start != nil:
				to.start(*e.Start)
			case e.Row != nil:
				to.row(*e.Row)
			case e.Phase != nil:
				to.phase(e.Phase.What, e.Phase.Steps)
			case e.Done != nil:
				to.done(*e.Done)
			}
		}
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return read()
		case <-t.C:
			if err := read(); err != nil {
				return err
			}
		}
	}
}
