package bench

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm"
)

func TestLoadConfig(t *testing.T) {
	base := Config{Ranks: 4, Network: "quic", Ops: []string{"allreduce"}, MinBytes: 8, MaxBytes: 64 << 20, Check: true, Budget: Duration(50 * time.Millisecond)}
	c := base
	err := LoadConfig(strings.NewReader(`{"ranks": 2, "maxBytes": "1M", "minBytes": 1024, "dtype": "bf16", "redop": "max", "check": false, "budget": "10ms"}`), &c)
	if err != nil {
		t.Fatal(err)
	}
	want := base
	want.Ranks, want.MaxBytes, want.MinBytes, want.DType, want.RedOp, want.Check, want.Budget = 2, 1<<20, 1024, "bf16", "max", false, Duration(10*time.Millisecond)
	if !reflect.DeepEqual(c, want) {
		t.Errorf("LoadConfig = %+v, want %+v", c, want)
	}
	s, err := c.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if s.DType != comm.BF16 || s.Op != comm.Max || s.MaxBytes != 1<<20 || s.Budget != 10*time.Millisecond || s.Check {
		t.Errorf("Spec = %+v", s)
	}
	if err := s.Validate(2); err != nil {
		t.Error(err)
	}

	for _, bad := range []string{`{"rank": 2}`, `{"maxBytes": "lots"}`, `{"budget": 5}`, `{"ranks": "2"}`, `{} {}`, `[`} {
		c := base
		if err := LoadConfig(strings.NewReader(bad), &c); err == nil {
			t.Errorf("LoadConfig(%s) accepted", bad)
		} else if !reflect.DeepEqual(c, base) {
			t.Errorf("LoadConfig(%s) failed but changed the config", bad)
		}
	}
	for _, bad := range []Config{{DType: "float32"}, {RedOp: "add"}, {Average: "mean"}} {
		if _, err := bad.Spec(); err == nil {
			t.Errorf("%+v.Spec() accepted", bad)
		}
	}
}

func TestConfigRoundTrip(t *testing.T) {
	c := Config{Ranks: 3, MinBytes: 8, MaxBytes: 64 << 20, Budget: Duration(25 * time.Millisecond), Timeout: Duration(10 * time.Minute)}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"maxBytes":"64M"`) || !strings.Contains(string(b), `"timeout":"10m0s"`) {
		t.Errorf("Marshal = %s", b)
	}
	var back Config
	if err := LoadConfig(strings.NewReader(string(b)), &back); err != nil || !reflect.DeepEqual(back, c) {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, c)
	}
}

func TestResultJSON(t *testing.T) {
	res := Result{Ranks: 2, Spec: Spec{Ops: []string{"allreduce"}, DType: comm.F16, Progress: func(Row) {}},
		Rows: []Row{{Op: "allreduce", Bytes: 8, Count: 4, DType: comm.F16, RedOp: comm.Sum, Root: -1, Timing: Timing{TimeUS: 1.5, Wrong: 0}}}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	res.Spec.Progress = nil
	if !reflect.DeepEqual(back, res) {
		t.Errorf("round trip: %+v, want %+v", back, res)
	}
}
